"""``onnxlite.bench``: models measured interleaved, each in its own worker process (docs/measure.md).

``bench`` is the API and its records, ``workers`` the parent side of the
worker processes, ``worker`` the child (``python -m onnxlite.benchmark.worker``).
"""
