"""Built-in plugin: builtin (being written)."""
