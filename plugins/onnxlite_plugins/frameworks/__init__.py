"""Built-in frameworks plugins."""
