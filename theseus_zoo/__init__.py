"""Ready recipes and the results they reached."""
