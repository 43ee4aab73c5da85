"""Every graph of an ONNX model: the main graph and, depth first, the bodies of If, Loop and Scan nodes.

One walk for everything that must see nested graphs (opsets and dtypes a runtime needs, initializers
and Constant tensors counted before and after normalising, tf2onnx's dims), so none of them misses a
graph attribute kind: a single graph (``g``) or a list of graphs (``graphs``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def iter_graphs(graph: Any) -> Iterator[Any]:
    """``graph`` (an ``onnx.GraphProto``), then every graph nested in its nodes' attributes, depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from iter_graphs(attr.g)
            for sub in attr.graphs:
                yield from iter_graphs(sub)
