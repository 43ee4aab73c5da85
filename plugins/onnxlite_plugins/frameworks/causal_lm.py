"""A transformers causal language model, exported with its key/value cache, and its PyTorch reference.

Two engines write the graph:

- ``genai-builder``: onnxruntime-genai's model builder (fp32, cpu) for the
  architectures it supports; it fuses attention into GroupQueryAttention with
  rotary embedding and packed QKV, which decodes fast on onnxruntime.
- ``torchscript``: the torch exporter over a wrapper that takes the cache as
  flat ``past_key_values.{i}.key/value`` tensors and returns ``present.{i}.*``
  (a transformers ``DynamicCache`` inside); it serves every other architecture.

The reference is the same model in PyTorch fp32: left-padded batched prefill
logits and each prompt's greedy continuation through its own cache.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnxlite import OnnxliteError, UsageError

ENGINES = ("genai-builder", "torchscript")
#: architectures onnxruntime-genai's builder writes as a plain decoder (its ``create_model`` dispatch)
BUILDER_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GemmaForCausalLM",
    "Gemma2ForCausalLM", "PhiForCausalLM", "Phi3ForCausalLM", "GraniteForCausalLM", "OlmoForCausalLM",
    "NemotronForCausalLM", "SmolLM3ForCausalLM", "InternLM2ForCausalLM", "Ernie4_5ForCausalLM",
})
#: onnxruntime-genai's model types for a plain decoder, by transformers' ``model_type``; any other (GPT-2
#: included: genai's own "gpt2" type expects another cache layout) runs as its generic "llama" decoder
GENAI_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "phi": "phi",
               "gemma": "gemma", "granite": "granite", "olmo": "olmo", "nemotron": "nemotron"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def is_causal_architecture(architectures: Sequence[str] | None) -> bool:
    return any(str(a).endswith(_CAUSAL_SUFFIXES) for a in architectures or ())


def is_causal_folder(path: Path) -> bool:
    """A transformers folder whose config names a causal-LM class (a cheap look at config.json)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and is_causal_architecture(config.get("architectures"))


def is_causal_module(module: Any) -> bool:
    """A transformers model with a language-model head (``GPT2LMHeadModel``, ``LlamaForCausalLM``...)."""
    config = getattr(module, "config", None)
    if config is None or not hasattr(module, "get_output_embeddings"):
        return False
    return type(module).__name__.endswith(_CAUSAL_SUFFIXES) or is_causal_architecture(
        getattr(config, "architectures", None))


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def load_gguf(path: Path, source: str) -> tuple[Any, Any]:
    """The model (dequantized to float32) and tokenizer of a GGUF file, through transformers' own loader."""
    import importlib.util

    for module, package in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"{source}: reading a GGUF file needs the {package} package: pip install {package}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                         dtype=torch.float32, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers' GGUF reader raises many kinds
        raise UsageError(f"{source}: transformers could not load the GGUF file ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from None
    return model.eval(), tokenizer


class CausalLM:
    """A causal LM to export with its cache: the module, where its tokenizer is, and how to write a folder."""

    def __init__(self, model: Any, source: str, *, folder: Path | None = None, tokenizer: Any = None,
                 gguf: bool = False):
        self.model = model
        self.source = source
        #: the transformers folder it was loaded from (its tokenizer and generation config live there)
        self.folder = folder
        self.tokenizer = tokenizer
        self.gguf = gguf
        self.notes: list[str] = []

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def architecture(self) -> str:
        architectures = getattr(self.config, "architectures", None) or [type(self.model).__name__]
        return str(architectures[0])

    def has_tokenizer(self) -> bool:
        if self.tokenizer is not None:
            return True
        return self.folder is not None and any((self.folder / n).is_file() for n in TOKENIZER_FILES[:5])

    def load_tokenizer(self) -> Any:
        if self.tokenizer is None and self.folder is not None:
            from transformers import AutoTokenizer

            with _quiet():
                self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
        return self.tokenizer

    def to_float32(self) -> str:
        """Cast every floating parameter and buffer to float32 before any engine runs (models ship in bf16;
        onnxruntime's CPU has no bfloat16 kernels); the reference is then the float32 model.  Returns the note."""
        import torch

        low = sorted({str(t.dtype).replace("torch.", "") for t in [*self.model.parameters(), *self.model.buffers()]
                      if t.is_floating_point() and t.dtype != torch.float32})
        if not low:
            return ""
        self.model.float()
        note = (f"cast the {'/'.join(low)} weights to float32 before export (onnxruntime's CPU has no kernels "
                "for them); verified against the float32 model")
        self.notes.append(note)
        return note

    # ------------------------------------------------------------------ files beside the graph

    def hf_folder(self, scratch: Path) -> Path:
        """A transformers folder of the float32 model for the builder: the source folder when it is one as
        is, else one written into ``scratch`` (never beside the input)."""
        import torch

        if self.folder is not None and not self.gguf and _float32_on_disk(self.folder):
            return self.folder
        out = scratch / "hf"
        out.mkdir(parents=True, exist_ok=True)
        config = self.config
        config.__dict__.pop("quantization_config", None)   # a GGUF load marks itself; the copy is plain fp32
        fresh_class = type(self.model)
        with _quiet(), torch.no_grad():
            if self.gguf:   # transformers refuses to save a GGUF-loaded model: copy its weights into a fresh one
                fresh = fresh_class(config)
                fresh.load_state_dict(self.model.state_dict(), strict=False)
                if getattr(config, "tie_word_embeddings", False):
                    fresh.tie_weights()
                fresh.to(torch.float32).save_pretrained(str(out))
            else:
                self.model.save_pretrained(str(out))
        self.save_tokenizer(out)   # the builder copies the tokenizer from its input folder
        return out

    def save_tokenizer(self, out: Path) -> None:
        if self.folder is not None and not self.gguf:
            copied = False
            for name in TOKENIZER_FILES:
                if (self.folder / name).is_file():
                    shutil.copy2(self.folder / name, out / name)
                    copied = True
            if copied:
                return
        tokenizer = self.load_tokenizer()
        if tokenizer is not None:
            with _quiet():
                tokenizer.save_pretrained(str(out))

    def save_generation_config(self, out: Path) -> None:
        if self.folder is not None and (self.folder / "generation_config.json").is_file():
            shutil.copy2(self.folder / "generation_config.json", out / "generation_config.json")
            return
        generation = getattr(self.model, "generation_config", None)
        if generation is not None:
            with _quiet():
                generation.save_pretrained(str(out))

    # ------------------------------------------------------------------ engines

    def engines(self, requested: str | None) -> list[str]:
        if requested:
            if requested not in ENGINES:
                raise UsageError(f"--exporter {requested}: a causal LM exports with one of {', '.join(ENGINES)}")
            return [requested]
        import importlib.util

        builder = (self.architecture in BUILDER_ARCHITECTURES
                   and importlib.util.find_spec("onnxruntime_genai") is not None)
        return ["genai-builder", "torchscript"] if builder else ["torchscript"]

    def export(self, out: Path, engine: str, opset: int, scratch: Path) -> None:
        """Write ``model.onnx`` (+ ``model.onnx.data``) and ``genai_config.json`` into ``out`` with ``engine``."""
        if engine == "genai-builder":
            run_builder(self.hf_folder(scratch), out, scratch / "builder-cache")
            for name in TOKENIZER_FILES:   # the tokenizer files are written from the source below
                (out / name).unlink(missing_ok=True)
        else:
            export_torchscript(self.model, out / "model.onnx", opset)
            write_genai_config(self.config, out)

    # ------------------------------------------------------------------ reference

    def prefill(self, input_ids: Any, attention_mask: Any) -> Any:
        """PyTorch's logits for a left-padded batch, positions counted from the mask as the ONNX loop does."""
        import numpy as np
        import torch

        positions = np.maximum(np.cumsum(attention_mask, axis=-1) - 1, 0)
        with torch.no_grad():
            out = self.model(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention_mask),
                             position_ids=torch.from_numpy(positions), use_cache=False)
        return out.logits.float().numpy()

    def greedy(self, prompt: Sequence[int], steps: int) -> tuple[list[int], list[float]]:
        """Greedy tokens of one prompt alone through PyTorch's cache, and each step's top-1 minus top-2 logit."""
        import torch

        tokens: list[int] = []
        margins: list[float] = []
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        cache = None
        keyword = cache_keyword(self.model)
        with torch.no_grad():
            for _ in range(steps):
                out = self.model(input_ids=ids, use_cache=True, **({keyword: cache} if cache is not None else {}))
                cache = returned_cache(out)
                last = out.logits[0, -1].float()
                top = torch.topk(last, 2).values
                token = int(torch.argmax(last))
                tokens.append(token)
                margins.append(float(top[0] - top[1]))
                ids = torch.tensor([[token]], dtype=torch.long)
        return tokens, margins


def _float32_on_disk(folder: Path) -> bool:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "float32")
    return dtype == "float32" and (folder / "model.safetensors").is_file() or \
        dtype == "float32" and (folder / "model.safetensors.index.json").is_file()


def run_builder(hf_folder: Path, out: Path, cache: Path) -> None:
    """onnxruntime-genai's model builder at fp32 for the cpu provider, through its Python API (its progress
    output swallowed); its own error on failure."""
    try:
        from onnxruntime_genai.models import builder
    except ImportError as exc:
        raise OnnxliteError(f"onnxruntime-genai's builder is not importable ({exc}): pip install onnxruntime-genai") \
            from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        with _quiet():
            options = builder.parse_extra_options(None, str(hf_folder), str(out), "fp32", "cpu", str(cache), [])
            builder.create_model(None, str(hf_folder), str(out), "fp32", "cpu", str(cache), **options)
    except Exception as exc:  # noqa: BLE001 - the builder raises bare Exceptions and NotImplementedError
        raise OnnxliteError(f"onnxruntime-genai's builder failed ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:240]})") from None
    if not (out / "model.onnx").is_file():
        raise OnnxliteError("onnxruntime-genai's builder wrote no model.onnx")


def cache_keyword(model: Any) -> str:
    """The forward's cache argument: ``cache`` in recent transformers, ``past_key_values`` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(out: Any) -> Any:
    value = getattr(out, "cache", None)
    return value if value is not None else out.past_key_values


def _flat_cache_module(model: Any) -> Any:
    import torch
    from transformers import DynamicCache

    layers = int(model.config.num_hidden_layers)
    keyword = cache_keyword(model)

    class FlatCache(torch.nn.Module):
        """The model with its cache as flat tensors in and out: what an ONNX graph can carry."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> tuple:
            cache = DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1]) for i in range(layers)],
                                 config=self.model.config)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=True, **{keyword: cache})
            present = returned_cache(out)
            return (out.logits, *[t for layer in present.layers for t in (layer.keys, layer.values)])

    return FlatCache().eval()


def cache_shape(config: Any) -> tuple[int, int, int]:
    """(layers, kv heads, head size) of a transformers config."""
    heads = int(getattr(config, "num_attention_heads", 0) or config.n_head)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    hidden = int(getattr(config, "hidden_size", 0) or config.n_embd)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    return int(config.num_hidden_layers), kv_heads, head_dim


def export_torchscript(model: Any, path: Path, opset: int) -> None:
    """The torch (TorchScript) exporter over :func:`_flat_cache_module`, weights in ``model.onnx.data``.

    The trace sample has a past of 3 and a left-padded row, so no branch is taken on an empty cache or a mask of
    ones; every sequence axis is dynamic.
    """
    import torch

    from onnxlite.modelio import load_model, save_model

    layers, kv_heads, head_dim = cache_shape(model.config)
    batch, seq, past = 2, 4, 3
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    mask[1, :2] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -seq:]
    pasts = [torch.zeros(batch, kv_heads, past, head_dim) for _ in range(2 * layers)]
    past_names = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    present_names = [f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {0: "batch_size", 1: "sequence_length"},
        "logits": {0: "batch_size", 1: "sequence_length"},
        **{name: {0: "batch_size", 2: "past_sequence_length"} for name in past_names},
        **{name: {0: "batch_size", 2: "total_sequence_length"} for name in present_names},
    }
    raw = path.with_name("raw.onnx")
    with _quiet(), torch.no_grad():
        torch.onnx.export(_flat_cache_module(model), (ids, mask, positions, *pasts), str(raw),
                          input_names=["input_ids", "attention_mask", "position_ids", *past_names],
                          output_names=["logits", *present_names], dynamic_axes=axes, opset_version=opset,
                          dynamo=False, do_constant_folding=True)
    graph = load_model(raw, load_external_data=True)
    save_model(graph, path, external_data=True)
    for leftover in raw.parent.glob("raw.onnx*"):
        leftover.unlink()


def write_genai_config(config: Any, out: Path) -> None:
    """onnxruntime-genai's ``genai_config.json`` for a graph with ``position_ids`` and a growing cache."""
    layers, kv_heads, head_dim = cache_shape(config)
    heads = int(getattr(config, "num_attention_heads", 0) or config.n_head)
    context = int(getattr(config, "max_position_embeddings", 0) or getattr(config, "n_positions", 0) or 2048)
    eos = getattr(config, "eos_token_id", None)
    pad = getattr(config, "pad_token_id", None)
    genai = {
        "model": {
            "bos_token_id": getattr(config, "bos_token_id", None),
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx", "head_size": head_dim,
                "hidden_size": int(getattr(config, "hidden_size", 0) or config.n_embd),
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": kv_heads,
            },
            "eos_token_id": eos,
            "pad_token_id": pad if pad is not None else (eos[0] if isinstance(eos, list) else eos),
            "type": GENAI_TYPES.get(str(getattr(config, "model_type", "")), "llama"),
            "vocab_size": int(config.vocab_size),
        },
        "search": {"do_sample": False, "max_length": context, "min_length": 0, "num_beams": 1,
                   "num_return_sequences": 1, "past_present_share_buffer": False, "repetition_penalty": 1.0,
                   "temperature": 1.0, "top_k": 1, "top_p": 1.0, "early_stopping": True, "length_penalty": 1.0,
                   "diversity_penalty": 0.0, "no_repeat_ngram_size": 0},
    }
    (out / "genai_config.json").write_text(json.dumps(genai, indent=4))
