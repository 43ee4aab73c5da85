"""Built-in plugin: int4 (being written)."""
