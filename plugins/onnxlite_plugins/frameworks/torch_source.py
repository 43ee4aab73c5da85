"""A PyTorch model ready to run on numpy inputs and to export with either ``torch.onnx`` exporter."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnxlite import OnnxliteError, UsageError

from .torch_messages import error_summary, quiet_fds, unsupported_operators

EXPORTERS = ("torchscript", "dynamo")
DEFAULT_EXPORTER = "torchscript"


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
        cast = "" if self.program is not None or is_script(self.module) else _float32_buffers(self, names, args)
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
                                                   f"({error_summary(errors[0][1])}); used {exporter}")
            return provenance
        raise OnnxliteError(self._failure_message(errors, order, opset))

    def _failure_message(self, errors: list[tuple[str, BaseException]], tried: list[str], opset: int) -> str:
        ops: list[str] = []
        for _, exc in errors:
            ops.extend(op for op in unsupported_operators(exc) if op not in ops)
        hints = [f"--exporter {e}" for e in EXPORTERS if e not in tried and self.program is None
                 and not is_script(self.module)]
        hints.append(f"another --opset (this was {opset})")
        details = "; ".join(f"{name}: {error_summary(exc)}" for name, exc in errors)
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
                    quiet_fds():
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
            module = self.module if is_script(self.module) else _make_wrapper(
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


def is_script(module: Any) -> bool:
    import torch

    return isinstance(module, (torch.jit.ScriptModule, torch.jit.ScriptFunction))

