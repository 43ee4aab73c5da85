"""Built-in plugin: tensorflow (being written)."""
