"""Built-in providers plugins."""
