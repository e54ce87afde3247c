"""What the cli reports in one line. Kept apart from the training modules so that the cli imports it without torch."""

ONE_LINE_ERRORS = (ValueError, KeyError, FileNotFoundError)
"""The errors the cli reports in one line, without a traceback: bad input (`RunError`, a ``ValueError``, among them),
an unknown name, a missing file."""
