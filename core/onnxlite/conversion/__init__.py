"""``onnxlite.export``: load a source through its framework plugin, export it to ONNX, verify it.

``sources`` finds and loads the source, ``export`` writes the verified file,
``verify`` compares an ONNX model's outputs with the source framework's
(docs/export.md).
"""
