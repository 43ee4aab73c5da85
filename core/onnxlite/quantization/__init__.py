"""``onnxlite.quantize``: one strategy on one model, through the registry, published atomically.

``run`` is the host around a strategy (options, calibration data, scratch
folder, metadata); ``smoke`` is the load/shape/NaN check of what it produced.
"""
