"""What a decoder ONNX model takes and returns, read from its graph's inputs and outputs.

The names are the ones optimum and onnxruntime-genai use: ``input_ids``,
``attention_mask``, optional ``position_ids``, ``past_key_values.{i}.key`` /
``.value`` shaped [batch, kv_heads, past_len, head_dim]; outputs ``logits`` and
``present.{i}.key`` / ``.value``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAST_KEY = "past_key_values.{}.key"
PAST_VALUE = "past_key_values.{}.value"
PRESENT_KEY = "present.{}.key"
PRESENT_VALUE = "present.{}.value"


@dataclass(frozen=True)
class DecoderLayout:
    """A causal LM's cache layout: one key and one value per layer, [batch, kv_heads, past_len, head_dim]."""

    num_layers: int
    kv_heads: int
    head_dim: int
    #: numpy dtype name of the cache tensors (``float32``, ``float16``)
    past_dtype: str
    has_position_ids: bool
    #: the logits' last dimension when the graph states it
    vocab_size: int | None = None
    #: where a batch's shorter prompts get their pads: ``left`` (positions from the mask, as optimum exports),
    #: or ``right`` for onnxruntime's GroupQueryAttention, which counts each row's tokens from the mask's sum
    #: and takes them as the first ones (onnxruntime-genai's builder)
    padding: str = "left"

    @property
    def past_names(self) -> tuple[str, ...]:
        """Cache inputs in order: layer 0 key, layer 0 value, layer 1 key, ..."""
        return tuple(name.format(i) for i in range(self.num_layers) for name in (PAST_KEY, PAST_VALUE))

    @property
    def present_names(self) -> tuple[str, ...]:
        """Cache outputs in the order of :attr:`past_names`."""
        return tuple(name.format(i) for i in range(self.num_layers) for name in (PRESENT_KEY, PRESENT_VALUE))

    def cache_bytes_per_token(self, batch: int = 1) -> int:
        """Bytes the key/value cache grows by per token of context (all layers, keys and values)."""
        import numpy as np

        return 2 * self.num_layers * self.kv_heads * self.head_dim * np.dtype(self.past_dtype).itemsize * batch


def model_file(path: str | os.PathLike[str]) -> Path:
    """``path`` itself, or ``model.onnx`` inside it when it is a folder (an exported LM's folder)."""
    path = Path(path)
    return path / "model.onnx" if path.is_dir() else path


def _dims(value) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in
            value.type.tensor_type.shape.dim]


def _stated_sizes(path: Path) -> dict[str, int]:
    """KV heads and head size from the configs beside the model, for graphs that leave those dims symbolic
    (onnxruntime-genai's builder names the head size ``kv_cache_dim``)."""
    import json

    folder = path if path.is_dir() else path.parent
    sizes: dict[str, int] = {}
    try:
        decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
        sizes = {"kv_heads": int(decoder["num_key_value_heads"]), "head_dim": int(decoder["head_size"])}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        config = json.loads((folder / "config.json").read_text())
        heads = int(config.get("num_attention_heads") or config.get("n_head"))
        sizes.setdefault("kv_heads", int(config.get("num_key_value_heads") or heads))
        sizes.setdefault("head_dim", int(config.get("head_dim") or
                                         int(config.get("hidden_size") or config.get("n_embd")) // heads))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return sizes


def decoder_layout(path: str | os.PathLike[str]) -> DecoderLayout | None:
    """The cache layout of the decoder at ``path`` (a model file or its folder); None when it is not one."""
    import onnx
    from onnx import helper

    model = onnx.load(str(model_file(path)), load_external_data=False)
    inputs = {value.name: value for value in model.graph.input}
    outputs = {value.name: value for value in model.graph.output}
    if not {"input_ids", "attention_mask"} <= set(inputs) or "logits" not in outputs:
        return None
    layers = 0
    while all(name.format(layers) in inputs for name in (PAST_KEY, PAST_VALUE)) and \
            all(name.format(layers) in outputs for name in (PRESENT_KEY, PRESENT_VALUE)):
        layers += 1
    if not layers:
        return None
    first = inputs[PAST_KEY.format(0)]
    dims = _dims(first)
    if len(dims) != 4:
        return None
    stated = _stated_sizes(Path(path))
    kv_heads = dims[1] if isinstance(dims[1], int) else stated.get("kv_heads")
    head_dim = dims[3] if isinstance(dims[3], int) else stated.get("head_dim")
    if not kv_heads or not head_dim:
        return None
    elem = first.type.tensor_type.elem_type
    dtype = "bfloat16" if elem == onnx.TensorProto.BFLOAT16 else helper.tensor_dtype_to_np_dtype(elem).name
    logits = _dims(outputs["logits"])
    vocab = logits[-1] if logits and isinstance(logits[-1], int) and logits[-1] > 0 else None
    return DecoderLayout(num_layers=layers, kv_heads=int(kv_heads), head_dim=int(head_dim), past_dtype=dtype,
                         has_position_ids="position_ids" in inputs, vocab_size=vocab,
                         padding="right" if any(n.op_type == "GroupQueryAttention" for n in model.graph.node)
                         else "left")
