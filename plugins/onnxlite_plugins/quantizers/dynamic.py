"""Built-in plugin: dynamic (being written)."""
