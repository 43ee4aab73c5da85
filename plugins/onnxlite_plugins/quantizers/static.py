"""Built-in plugin: static (being written)."""
