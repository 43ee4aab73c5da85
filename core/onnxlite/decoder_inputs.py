"""The inputs a decoder graph takes beyond its token window: positions and the key/value cache.

A quantizer calibrates a decoder, and the host's smoke check runs it, on token windows (``input_ids`` and
``attention_mask``) as a prompt's first pass sees them: positions counted from the mask and every cache input
empty (past length 0).  :func:`with_empty_past` completes such feeds for the graph at hand; the cache's head size
comes from its fixed dimension, or else from a ``GroupQueryAttention`` node's packed QKV projection
(onnxruntime-genai's builder leaves it symbolic).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .graph_family import PAST_PREFIXES, is_decoder


def _producers(proto: Any) -> dict[str, Any]:
    return {out: node for node in proto.graph.node for out in node.output}


def _dim(shape: Any, axis: int, fallback: int | None) -> int:
    dims = shape.dim
    if axis < len(dims) and dims[axis].HasField("dim_value") and dims[axis].dim_value > 0:
        return int(dims[axis].dim_value)
    if fallback is None:
        raise ValueError(f"the cache input's axis {axis} has no fixed size and the graph does not say it")
    return fallback


def head_size(proto: Any) -> int | None:
    """The cache's head size from a GroupQueryAttention node (its packed QKV width over the heads)."""
    from onnx import helper

    producers = _producers(proto)
    shapes = {i.name: list(i.dims) for i in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type != "GroupQueryAttention":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        heads, kv = int(attrs.get("num_heads", 0)), int(attrs.get("kv_num_heads", 0))
        src = producers.get(node.input[0])
        while src is not None and not (len(src.input) > 1 and len(shapes.get(src.input[1], ())) == 2) \
                and src.op_type != "MatMulNBits":
            src = producers.get(src.input[0]) if src.input else None
        if src is None or not heads:
            return None
        if src.op_type == "MatMulNBits":
            width = next(int(a.i) for a in src.attribute if a.name == "N")
        else:
            width = shapes[src.input[1]][-1]
        return width // (heads + 2 * kv) if node.input[1] == "" else width // heads
    return None


def with_empty_past(proto: Any, feeds: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Token-window feeds completed for a decoder with a cache: ``attention_mask`` (ones) and ``position_ids``
    when the graph takes them and the feed lacks them, and every ``past_*`` input empty (past length 0)."""
    import numpy as np

    head = head_size(proto)
    inputs = list(proto.graph.input)
    done = []
    for feed in feeds:
        tokens = feed.get("input_ids")
        # a graph fed embeddings (no input_ids) still has a batch and a sequence axis first
        first = np.asarray(tokens if tokens is not None else next(iter(feed.values())))
        first = first[None] if tokens is not None and first.ndim == 1 else first
        batch, seq = int(first.shape[0]), int(first.shape[1])
        out: dict[str, Any] = {} if tokens is None else {"input_ids": first.astype(np.int64)}
        mask = np.asarray(feed.get("attention_mask", np.ones((batch, seq)))).reshape(batch, -1).astype(np.int64)
        for spec in inputs:
            shape = spec.type.tensor_type.shape
            if spec.name == "attention_mask":
                out[spec.name] = mask
            elif spec.name == "position_ids":
                out[spec.name] = np.asarray(feed.get("position_ids", np.clip(mask.cumsum(-1) - 1, 0, None)),
                                            dtype=np.int64).reshape(batch, seq)
            elif spec.name.startswith(PAST_PREFIXES):
                from onnx import helper

                dtype = helper.tensor_dtype_to_np_dtype(spec.type.tensor_type.elem_type)
                out[spec.name] = np.zeros((batch, _dim(shape, 1, None), 0, _dim(shape, 3, head)),
                                          dtype=dtype)
            elif spec.name in feed:
                out[spec.name] = np.asarray(feed[spec.name])
        done.append(out)
    return done


def window_specs(proto: Any, specs: list[Any]) -> list[Any]:
    """The input specs data must hold: a decoder's without its cache and positions (token windows; the strategy
    completes them with :func:`with_empty_past`), anything else's unchanged."""
    if not is_decoder(proto):
        return specs
    return [s for s in specs if not s.name.startswith(PAST_PREFIXES) and s.name != "position_ids"]
