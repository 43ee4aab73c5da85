"""Built-in metrics plugins."""
