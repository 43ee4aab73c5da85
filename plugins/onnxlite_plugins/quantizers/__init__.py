"""Built-in quantizers plugins."""
