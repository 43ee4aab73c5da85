"""Built-in onnxlite plugins. Each module is a plain pluggy plugin using only the public hooks."""
