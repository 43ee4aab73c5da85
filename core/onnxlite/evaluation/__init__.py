"""``onnxlite.compare``: candidates scored against a reference with metric plugins (docs/metrics.md).

``reference`` runs the reference (ONNX or a framework source), ``judge`` holds
its outputs and scores candidates, ``metrics`` resolves metric plugins and
budgets, ``compare`` is the one-call API.
"""
