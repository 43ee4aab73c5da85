"""Built-in plugin: transformer (being written)."""
