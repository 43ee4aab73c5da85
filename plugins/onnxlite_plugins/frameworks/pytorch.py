"""Built-in framework plugin: PyTorch models to ONNX with ``torch.onnx.export``.

Sources: a Python reference (an ``nn.Module``, a zero-argument factory or
class), a TorchScript file, a ``torch.export`` program (``.pt2``), a state dict
(``.pt``/``.pth``, with ``model_class``) and a Hugging Face transformers folder
(loaded from disk only).

Both exporters are offered.  ``torchscript`` is the default: across our tests
it exported every model dynamo did, in a fraction of the time, and its graph
ran 15-25% faster in onnxruntime.  When the chosen exporter fails and the user
did not insist on it, the other is tried and the fallback is recorded.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import re
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnxlite import FrameworkSpec, OnnxliteError, Option, UsageError, hookimpl

EXPORTERS = ("torchscript", "dynamo")
DEFAULT_EXPORTER = "torchscript"
_SUFFIXES = {".pt", ".pth", ".pt2", ".ts", ".torchscript", ".jit", ".gguf"}
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
               "pytorch_model.bin.index.json")


def detect(source: str) -> bool:
    """Cheap: a PyTorch file suffix, or a transformers folder with PyTorch weights."""
    path = Path(source)
    if path.is_dir():
        return (path / "config.json").is_file() and any((path / name).is_file() for name in _HF_WEIGHTS)
    return path.suffix.lower() in _SUFFIXES


# --------------------------------------------------------------------------- outputs


def flatten_outputs(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Tensors of a model's output with stable names: ``output``, ``output_0``..., or the dict/ModelOutput keys."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(prefix or "output", value)]
    if isinstance(value, Mapping) or hasattr(value, "to_tuple"):
        items = value.items()
        out = []
        for key, item in items:
            if item is not None:
                out.extend(flatten_outputs(item, f"{prefix}_{key}" if prefix else str(key)))
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for i, item in enumerate(value):
            out.extend(flatten_outputs(item, f"{prefix}_{i}" if prefix else f"output_{i}"))
        return out
    return []


def _make_wrapper(module: Any, names: Sequence[str], use_kwargs: bool):
    import torch

    class FlatOutputs(torch.nn.Module):
        """Calls the model with inputs in spec order and returns a flat tuple of tensors, as ONNX sees them."""

        def __init__(self):
            super().__init__()
            self.model = module

        def forward(self, *args):
            out = self.model(**dict(zip(names, args))) if use_kwargs else self.model(*args)
            return tuple(t for _, t in flatten_outputs(out))

    return FlatOutputs().eval()


def _takes_kwargs(module: Any, names: Sequence[str]) -> bool:
    """Whether the forward accepts every input by name (transformers models do; positional otherwise)."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False
    return all(name in params and params[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                         inspect.Parameter.KEYWORD_ONLY) for name in names)


def _versions(extra: Mapping[str, str] | None = None) -> str:
    import torch

    versions = {"torch": torch.__version__.split("+")[0]}
    versions.update(extra or {})
    return json.dumps(versions, sort_keys=True)


# --------------------------------------------------------------------------- errors


_OP_RE = re.compile(r"aten(?:::|\.)[A-Za-z_][A-Za-z0-9_]*")


def unsupported_operators(exc: BaseException | None) -> list[str]:
    """Operator names an exporter error mentions (``aten::histc``, ``aten.histc``), deduplicated."""
    texts = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    found: list[str] = []
    for name in _OP_RE.findall("\n".join(texts)):
        name = name.replace("aten.", "aten::", 1)  # dynamo says aten.histc, torchscript aten::histc
        if name not in found:
            found.append(name)
    return found


def _summary(exc: BaseException) -> str:
    """The exporter's own first error line.  dynamo's message is a report whose summary reads
    ``<class 'torch._dynamo.exc.Unsupported'>: the reason`` then ``(Refer to the full stack trace above ...)``,
    a trace the user never sees: keep the reason, drop the pointer."""
    text = str(exc)
    marker = "## Exception summary"
    if marker in text:
        text = text.split(marker, 1)[1]
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = []
    for line in text.splitlines():
        line = re.sub(r"^<class '[^']*'>:\s*", "", line.strip())
        if line and not line.startswith("(Refer to the full stack trace"):
            lines.append(line)
    if not lines and exc.__cause__ is not None and exc.__cause__ is not exc:
        return _summary(exc.__cause__)
    first = lines[0] if lines else type(exc).__name__
    return " ".join(first.split())[:240]


@contextlib.contextmanager
def _quiet_fds():
    """Silence what the exporters print below Python (the TorchScript exporter writes its IR graph to file
    descriptor 1 when it fails): the host prints its own one line."""
    import sys
    import tempfile

    saved: list[tuple[int, int]] = []
    sink = None
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sink = tempfile.TemporaryFile()
        for fd in (1, 2):
            saved.append((fd, os.dup(fd)))
            os.dup2(sink.fileno(), fd)
    except (OSError, ValueError):   # no real descriptors (an embedding host): Python-level silencing still applies
        pass
    try:
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        if sink is not None:
            sink.close()


# --------------------------------------------------------------------------- source models


class TorchSource:
    """An ``nn.Module`` (or exported program) ready to run on numpy inputs and to export."""

    def __init__(self, module: Any, source: str, kind: str, specs: Sequence[Any] | None = None,
                 program: Any = None, provenance: Mapping[str, str] | None = None,
                 versions: Mapping[str, str] | None = None):
        self.module = module
        self.source = source
        self.kind = kind
        self._specs = list(specs) if specs else None
        self.program = program
        self.provenance = dict(provenance or {})
        self.versions = dict(versions or {})
        #: a causal language model's cache export and reference (onnxlite_plugins.frameworks.causal_lm), or None
        self.causal_lm: Any = None

    def input_specs(self):
        if self._specs is None:
            raise UsageError(f"{self.source}: a {self.kind} does not say what inputs it takes; pass "
                             "--input NAME:DTYPE[dims] for each, e.g. --input x:float32[batch,3,32,32]")
        return self._specs

    def _tensors(self, feeds: Mapping[str, Any]) -> list[Any]:
        import numpy as np
        import torch

        return [torch.from_numpy(np.ascontiguousarray(array)) for array in feeds.values()]

    def _call(self, names: Sequence[str], tensors: Sequence[Any]) -> Any:
        # An exported program's module advertises named parameters but takes them positionally only.
        if self.program is None and _takes_kwargs(self.module, names):
            return self.module(**dict(zip(names, tensors)))
        return self.module(*tensors)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            out = self._call(list(feeds), self._tensors(feeds))
        return {name: tensor.detach().cpu().numpy() for name, tensor in flatten_outputs(out)}

    def export(self, path: Path, inputs: Sequence[Any], sample: Mapping[str, Any], opset: int,
               options: Mapping[str, Any]) -> dict[str, str]:
        import torch

        names = [spec.name for spec in inputs]
        ordered = {name: sample[name] for name in names}
        args = tuple(self._tensors(ordered))
        with torch.no_grad():
            produced = flatten_outputs(self._call(names, args))
        output_names = [name for name, _ in produced]
        self._output_axes = _output_axes(inputs, args, produced)
        requested = options.get("exporter") or None
        if requested and requested not in EXPORTERS:
            raise UsageError(f"--exporter {requested}: expected one of {', '.join(EXPORTERS)}")
        if self.program is not None or isinstance(self.module, torch.fx.GraphModule):
            order = ["dynamo"]  # an exported program only goes through the dynamo exporter
            if requested == "torchscript":
                raise UsageError(f"{self.source}: a torch.export program can only use --exporter dynamo")
        elif isinstance(self.module, torch.jit.ScriptModule):
            order = ["torchscript"]
            if requested == "dynamo":
                raise UsageError(f"{self.source}: a TorchScript module can only use --exporter torchscript")
        else:
            first = requested or DEFAULT_EXPORTER
            order = [first] if requested else [first, *[e for e in EXPORTERS if e != first]]
        cast = "" if self.program is not None or _is_script(self.module) else _float32_buffers(self, names, args)
        errors: list[tuple[str, BaseException]] = []
        for exporter in order:
            try:
                self._export_with(exporter, path, inputs, args, output_names, opset)
            except Exception as exc:  # noqa: BLE001 - reported below with the operators it names
                errors.append((exporter, exc))
                path.unlink(missing_ok=True)
                continue
            provenance = {"onnxlite.exporter": exporter, "onnxlite.versions": _versions(self.versions),
                          **self.provenance}
            if cast:
                provenance["onnxlite.cast"] = cast
            if errors:
                provenance["onnxlite.fallback"] = (f"the {errors[0][0]} exporter failed "
                                                   f"({_summary(errors[0][1])}); used {exporter}")
            return provenance
        raise OnnxliteError(self._failure_message(errors, order, opset))

    def _failure_message(self, errors: list[tuple[str, BaseException]], tried: list[str], opset: int) -> str:
        ops: list[str] = []
        for _, exc in errors:
            ops.extend(op for op in unsupported_operators(exc) if op not in ops)
        hints = [f"--exporter {e}" for e in EXPORTERS if e not in tried and self.program is None
                 and not _is_script(self.module)]
        hints.append(f"another --opset (this was {opset})")
        details = "; ".join(f"{name}: {_summary(exc)}" for name, exc in errors)
        if ops:
            return (f"{self.source}: PyTorch could not export operators {', '.join(ops)} to ONNX "
                    f"(tried {', '.join(tried)}); try {' or '.join(hints)}, or replace them in the model "
                    f"[{details}]")
        return f"{self.source}: PyTorch export failed (tried {', '.join(tried)}); try {' or '.join(hints)} [{details}]"

    def _export_with(self, exporter: str, path: Path, inputs: Sequence[Any], args: tuple, output_names: list[str],
                     opset: int) -> None:
        names = [spec.name for spec in inputs]
        quiet = io.StringIO()
        # The exporters narrate (progress lines, IR dumps, registry warnings); the host shows its own progress.
        logger = logging.getLogger("torch.onnx")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), \
                    _quiet_fds():
                warnings.simplefilter("ignore")
                self._export_quietly(exporter, path, inputs, args, output_names, opset, names)
        finally:
            logger.setLevel(level)

    def _export_quietly(self, exporter: str, path: Path, inputs: Sequence[Any], args: tuple,
                        output_names: list[str], opset: int, names: list[str]) -> None:
        import torch

        if exporter == "torchscript":
            dynamic_axes = {spec.name: dict(spec.dynamic_axes) for spec in inputs if spec.dynamic_axes}
            dynamic_axes.update(getattr(self, "_output_axes", {}))
            module = self.module if _is_script(self.module) else _make_wrapper(
                self.module, names, _takes_kwargs(self.module, names))
            torch.onnx.export(module, args, str(path), input_names=names, output_names=output_names,
                              opset_version=opset, dynamo=False, dynamic_axes=dynamic_axes or None,
                              do_constant_folding=True)
            return
        dims: dict[str, Any] = {}
        shapes = tuple({axis: dims.setdefault(dim, torch.export.Dim(dim)) for axis, dim in spec.dynamic_axes.items()}
                       or None for spec in inputs)
        if self.program is not None:
            model, dynamic = self.program, None
        else:
            model = _make_wrapper(self.module, names, _takes_kwargs(self.module, names))
            dynamic = (shapes,) if any(shapes) else None
        program = torch.onnx.export(model, args, None, input_names=names, output_names=output_names,
                                    opset_version=opset, dynamo=True, dynamic_shapes=dynamic, optimize=True,
                                    verbose=False)
        if program is None:
            raise OnnxliteError("torch.onnx.export (dynamo) returned no program")
        program.save(str(path), external_data=False)


def _float32_buffers(source: TorchSource, names: Sequence[str], args: tuple) -> str:
    """Cast the module's bfloat16 buffers and parameters (rotary tables, say) to float32 when that leaves its
    outputs on the export sample bit for bit unchanged, and say so; otherwise leave them (onnxruntime then names
    the op and dtype it has no kernel for).  An exporter keeps them in bfloat16, which onnxruntime's CPU cannot run.
    """
    import torch

    module = source.module
    low = [(n, t) for n, t in [*module.named_buffers(), *module.named_parameters()] if t.dtype == torch.bfloat16]
    if not low:
        return ""
    with torch.no_grad():
        before = [t.clone() for _, t in flatten_outputs(source._call(names, args))]
        kept = {n: t.data.clone() for n, t in low}
        for _, tensor in low:
            tensor.data = tensor.data.float()
        after = [t for _, t in flatten_outputs(source._call(names, args))]
    if len(before) == len(after) and all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(before, after)):
        listed = ", ".join(n for n, _ in low[:4]) + (" ..." if len(low) > 4 else "")
        return (f"cast {len(low)} bfloat16 buffer(s)/weight(s) ({listed}) to float32 for export: onnxruntime's CPU "
                "has no bfloat16 kernels, and the outputs on the export sample are unchanged")
    for name, tensor in low:
        tensor.data = kept[name]
    return ""


def _output_axes(inputs: Sequence[Any], args: tuple, produced: list[tuple[str, Any]]) -> dict[str, dict[int, str]]:
    """Name output axes after the input dims they follow (the torchscript exporter would invent names).

    Sample sizes of distinct dims differ, so an output axis 0 of the batch size
    is the batch axis, and a later axis of a sequence size is that sequence axis.
    """
    batch_sizes: dict[int, str] = {}
    other_sizes: dict[int, str] = {}
    for spec, tensor in zip(inputs, args):
        for axis, dim in spec.dynamic_axes.items():
            (batch_sizes if axis == 0 else other_sizes).setdefault(int(tensor.shape[axis]), dim)
    axes: dict[str, dict[int, str]] = {}
    for name, tensor in produced:
        named = {}
        for axis, size in enumerate(tensor.shape):
            table = batch_sizes if axis == 0 else other_sizes
            if int(size) in table:
                named[axis] = table[int(size)]
        if named:
            axes[name] = named
    return axes


def _is_script(module: Any) -> bool:
    import torch

    return isinstance(module, (torch.jit.ScriptModule, torch.jit.ScriptFunction))


# --------------------------------------------------------------------------- loaders


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
    if loaded.program is not None or _is_script(module) or not isinstance(module, torch.nn.Module):
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


class PyTorchExporter:
    """Loads PyTorch sources."""

    def load(self, source: str, options: Mapping[str, Any]) -> TorchSource:
        return float32_weights(self._load(source, options))

    def _load(self, source: str, options: Mapping[str, Any]) -> TorchSource:
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


@hookimpl
def register_frameworks() -> list[FrameworkSpec]:
    return [FrameworkSpec(
        name="pytorch",
        description="PyTorch: nn.Module references, TorchScript, torch.export .pt2, state dicts, "
                    "transformers folders; torchscript or dynamo exporter.",
        factory=PyTorchExporter,
        requires=("torch",),
        install="onnxlite[torch]",
        options=(Option("exporter", str, None, "torch.onnx exporter (default torchscript, falls back to dynamo)",
                        choices=EXPORTERS),
                 Option("model_class", str, None, "module:Class a state dict belongs to")),
        detect=detect,
    )]
