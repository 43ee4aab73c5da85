"""Loading PyTorch sources: Python references, TorchScript, ``torch.export`` programs, state dicts,
transformers folders and GGUF files."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import UsageError

from .torch_source import TorchSource, is_script


def _as_module(obj: Any, source: str) -> Any:
    import torch

    if isinstance(obj, torch.export.ExportedProgram):
        return obj
    if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
        try:
            obj = obj()
        except TypeError as exc:
            raise UsageError(f"{source}: cannot build {obj.__name__}() without arguments ({exc})") from None
    elif callable(obj) and not isinstance(obj, torch.nn.Module):
        obj = obj()
    if isinstance(obj, torch.export.ExportedProgram):
        return obj
    if not isinstance(obj, torch.nn.Module):
        raise UsageError(f"{source}: expected a torch.nn.Module (or a zero-argument factory of one), "
                         f"got {type(obj).__name__}")
    return obj.eval()


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(n.endswith("constants.pkl") or "/code/" in n for n in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _program_specs(program: Any) -> list[Any]:
    """Input specs from a ``torch.export`` program's signature; symbolic sizes become named dims."""
    from onnxlite.inputs import InputSpec

    user_inputs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    specs = []
    symbols: dict[str, str] = {}
    for spec in user_inputs:
        name = spec.arg.name
        value = placeholders[name].meta.get("val")
        if value is None or not hasattr(value, "shape"):
            raise UsageError(f"{name}: the program's input is not a tensor; pass --input")
        dims: list[int | str] = []
        for axis, size in enumerate(value.shape):
            if isinstance(size, int):
                dims.append(size)
            else:
                symbol = str(size)
                default = "batch" if axis == 0 and "batch" not in symbols.values() else (
                    "seq" if "seq" not in symbols.values() else f"dim_{symbol}")
                dims.append(symbols.setdefault(symbol, default))
        specs.append(InputSpec(name, str(value.dtype).replace("torch.", ""), tuple(dims)).with_role())
    return specs


def _load_transformers(path: Path, source: str) -> TorchSource:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise UsageError(f"{source}: a transformers folder needs transformers: "
                         "pip install 'onnxlite[transformers]'") from None
    from onnxlite.inputs import InputSpec

    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise UsageError(f"{path / 'config.json'}: not a usable transformers config ({exc})") from None
    if hasattr(config, "use_cache"):
        config.use_cache = False
    model_class = None
    for arch in getattr(config, "architectures", None) or []:
        model_class = getattr(transformers, arch, None)
        if model_class is not None:
            break
    model_class = model_class or transformers.AutoModel
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            # Eager attention exports the MatMul/Softmax pattern onnxruntime's transformer optimizer fuses
            # into Attention; the SDPA export (transformers' default) is left unfused.
            try:
                model = model_class.from_pretrained(str(path), config=config, local_files_only=True,
                                                    attn_implementation="eager")
            except (ValueError, TypeError):
                model = model_class.from_pretrained(str(path), config=config, local_files_only=True)
    except Exception as exc:
        raise UsageError(f"{source}: transformers could not load the model from disk ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from None
    model.eval()
    params = inspect.signature(model.forward).parameters
    specs = []
    vocab = getattr(config, "vocab_size", None)
    if "input_ids" in params and vocab:
        specs.append(InputSpec("input_ids", "int64", ("batch", "seq"), (0, int(vocab)), "ids"))
        specs.append(InputSpec("attention_mask", "int64", ("batch", "seq"), (0, 2), "mask"))
        if "token_type_ids" in params and int(getattr(config, "type_vocab_size", 0) or 0):
            specs.append(InputSpec("token_type_ids", "int64", ("batch", "seq"), (0, 1), "type_ids"))
    elif "pixel_values" in params:
        size = getattr(config, "image_size", 224)
        size = size if isinstance(size, int) else int(size[0])
        specs.append(InputSpec("pixel_values", "float32",
                               ("batch", int(getattr(config, "num_channels", 3)), size, size)))
    return _transformers_source(model, source, specs, path)


def _transformers_source(model: Any, source: str, specs: list[Any], folder: Path | None,
                         tokenizer: Any = None, gguf: bool = False) -> TorchSource:
    import transformers

    from .causal_lm import CausalLM, is_causal_module

    config = model.config
    summary = {key: getattr(config, key, None) for key in ("model_type", "num_attention_heads", "hidden_size",
                                                            "vocab_size")}
    kind = "GGUF model" if gguf else "transformers model"
    loaded = TorchSource(model, source, kind, specs or None,
                         provenance={"onnxlite.transformers_config": json.dumps(summary)},
                         versions={"transformers": transformers.__version__})
    if is_causal_module(model):
        loaded.causal_lm = CausalLM(model, source, folder=folder, tokenizer=tokenizer, gguf=gguf)
    return loaded


def _lm_specs(config: Any) -> list[Any]:
    from onnxlite.inputs import InputSpec

    vocab = int(config.vocab_size)
    return [InputSpec("input_ids", "int64", ("batch", "seq"), (0, vocab), "ids"),
            InputSpec("attention_mask", "int64", ("batch", "seq"), (0, 2), "mask")]


def _load_gguf(path: Path, source: str) -> TorchSource:
    from .causal_lm import load_gguf

    model, tokenizer = load_gguf(path, source)
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    return _transformers_source(model, source, _lm_specs(model.config), None, tokenizer=tokenizer, gguf=True)


def _load_file(path: Path, source: str, options: Mapping[str, Any]) -> TorchSource:
    import torch

    model_class = options.get("model_class")
    if path.suffix.lower() == ".gguf":
        return _load_gguf(path, source)
    if path.suffix.lower() == ".pt2":
        try:
            program = torch.export.load(str(path))
        except Exception as exc:
            raise UsageError(f"{path}: not a loadable torch.export program ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:200]})") from None
        return TorchSource(program.module(), source, "torch.export program", _program_specs(program), program=program)
    if _is_torchscript(path):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise UsageError(f"{path}: not a loadable TorchScript file ({type(exc).__name__}: {exc})") from None
        return TorchSource(module.eval(), source, "TorchScript module")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UsageError(f"{path}: cannot be loaded safely with torch.load(weights_only=True) "
                         f"({' '.join(str(exc).split())[:200]}); "
                         "save a state dict, TorchScript or a .pt2 program") from None
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{path}: expected a state dict (names to tensors), got {type(state).__name__}")
    if not model_class:
        raise UsageError(f"{path}: is a state dict (weights only); pass --model-class module:Class "
                         "to say which model it belongs to")
    from onnxlite.pyref import load_python_ref

    module = _as_module(load_python_ref(model_class, "--model-class"), f"--model-class {model_class}")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise UsageError(f"{path}: does not fit --model-class {model_class} "
                         f"({' '.join(str(exc).split())[:240]})") from None
    return TorchSource(module.eval(), source, f"state dict for {model_class}")


def float32_weights(loaded: TorchSource) -> TorchSource:
    """Cast a module's bfloat16 parameters and buffers to float32 as it loads, before references are taken and
    before any exporter runs: onnxruntime's CPU has no bfloat16 kernels, and an exporter keeps their dtype.
    The export is then checked against the float32 module, and the note says so."""
    import torch

    module = loaded.module
    if loaded.program is not None or is_script(module) or not isinstance(module, torch.nn.Module):
        return loaded
    low = [(n, t) for n, t in [*module.named_parameters(), *module.named_buffers()] if t.dtype == torch.bfloat16]
    if not low:
        return loaded
    with torch.no_grad():
        for _, tensor in low:
            tensor.data = tensor.data.float()
    listed = ", ".join(n for n, _ in low[:4]) + (" ..." if len(low) > 4 else "")
    loaded.provenance["onnxlite.cast"] = (
        f"cast {len(low)} bfloat16 buffer(s)/weight(s) ({listed}) to float32 before export: onnxruntime's CPU "
        "has no bfloat16 kernels; verified against the float32 module")
    return loaded


def load_source(source: str, options: Mapping[str, Any]) -> TorchSource:
    """The source as a :class:`TorchSource`, before any cast (``python_object``: a reference already imported)."""
    import torch

    obj = options.get("python_object")
    if obj is not None:
        built = _as_module(obj, source)
        if isinstance(built, torch.export.ExportedProgram):
            return TorchSource(built.module(), source, "torch.export program", _program_specs(built),
                               program=built)
        from .causal_lm import is_causal_module

        if is_causal_module(built):   # a transformers LM built in code: its tokenizer may be where it came from
            named = Path(str(getattr(built.config, "_name_or_path", "") or ""))
            return _transformers_source(built, source, _lm_specs(built.config),
                                        named if str(named) not in ("", ".") and named.is_dir() else None)
        return TorchSource(built, source, "nn.Module")
    path = Path(source)
    if not path.exists():
        raise UsageError(f"{source}: no such file")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{path}: a folder without config.json is not a transformers model")
        return _load_transformers(path, source)
    return _load_file(path, source, options)
