"""Built-in plugin: pytorch (being written)."""
