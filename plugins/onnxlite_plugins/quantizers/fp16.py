"""Built-in plugin: fp16 (being written)."""
