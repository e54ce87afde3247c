"""Readers and splits of the zoo's data, and the offline assets: no model library is imported here."""
