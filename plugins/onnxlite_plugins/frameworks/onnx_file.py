"""Built-in plugin: onnx_file (being written)."""
