"""ONNX Runtime sessions, built through the provider plugins.

A provider that the user asks for and that is not available is an error with
the install hint, never a silent fall back to the CPU.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import UsageError, one_line

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime as ort

GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
EXECUTION_MODES = ("sequential", "parallel")


@dataclass(frozen=True)
class SessionSettings:
    """How to run a model: provider, intra-op threads, graph optimization level, execution mode."""

    provider: str = "cpu"
    threads: int | None = None
    graph_optimization: str = "all"
    execution_mode: str = "sequential"
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    log_severity: int = 3

    def to_dict(self) -> dict[str, Any]:
        """Plain values (for JSON, reports and other processes); ``SessionSettings(**d)`` rebuilds it."""
        return {"provider": self.provider, "threads": self.threads, "graph_optimization": self.graph_optimization,
                "execution_mode": self.execution_mode, "provider_options": dict(self.provider_options),
                "log_severity": self.log_severity}


NO_RUNTIME = ("no onnxruntime build is installed: pip install 'onnxlite[cpu]' "
              "(or onnxlite[gpu], onnxlite[openvino], onnxlite[directml] for that build)")


def require_onnxruntime() -> None:
    """One clear line when no onnxruntime build is installed; looks without importing it (fast)."""
    import importlib.util

    from .errors import MissingDependencyError

    if importlib.util.find_spec("onnxruntime") is None:
        raise MissingDependencyError(NO_RUNTIME)


def session_options(settings: SessionSettings) -> ort.SessionOptions:
    import onnxruntime as ort

    if settings.graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
        raise UsageError(f"--graph-optimization: expected one of {', '.join(GRAPH_OPTIMIZATION_LEVELS)}, "
                         f"got {settings.graph_optimization!r}")
    if settings.execution_mode not in EXECUTION_MODES:
        raise UsageError(f"--execution-mode: expected one of {', '.join(EXECUTION_MODES)}, got "
                         f"{settings.execution_mode!r}")
    options = ort.SessionOptions()
    if settings.threads:
        if settings.threads < 0:
            raise UsageError(f"--threads: must be positive, got {settings.threads}")
        options.intra_op_num_threads = settings.threads
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[settings.graph_optimization]
    options.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if settings.execution_mode == "parallel"
                              else ort.ExecutionMode.ORT_SEQUENTIAL)
    options.log_severity_level = settings.log_severity
    return options


def resolve_providers(settings: SessionSettings) -> list[tuple[str, dict[str, Any]]]:
    """The ``providers=`` list for onnxruntime, after checking the provider is really usable here."""
    from .registry import get_registry

    entry = get_registry().get("provider", settings.provider)
    provider = entry.create()
    reason = provider.check()
    if reason:
        raise UsageError(f"--provider {settings.provider}: not available here: {reason}")
    return provider.session_providers(dict(settings.provider_options))


_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'")


def missing_kernel_hint(path: str | os.PathLike[str], message: str, provider: str = "cpu") -> str:
    """``; Neg node '/model/Neg' takes bfloat16, which the cpu provider has no kernel for``: the op and the
    dtype behind onnxruntime's "Could not find an implementation", which names neither cause."""
    found = _NO_KERNEL.search(message)
    if not found:
        return ""
    import onnx

    op, name = found.groups()
    try:
        model = onnx.load(str(path), load_external_data=False)
        types = {i.name: i.data_type for i in model.graph.initializer}
        inferred = onnx.shape_inference.infer_shapes(model)
        for info in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            types.setdefault(info.name, info.type.tensor_type.elem_type)
        node = next(n for n in model.graph.node if n.name == name)
    except Exception:  # noqa: BLE001 - a hint must never hide the error it explains
        return ""
    dtypes = sorted({onnx.helper.tensor_dtype_to_np_dtype(types[i]).name if types[i] != onnx.TensorProto.BFLOAT16
                     else "bfloat16" for i in node.input if types.get(i)})
    if not dtypes:
        return ""
    advice = ("; the source model computes in bfloat16 there (a .to(torch.bfloat16) in its forward, say): make it "
              "compute in float32 before exporting" if "bfloat16" in dtypes else "")
    return f"; {op} node {name!r} takes {', '.join(dtypes)}, which the {provider} provider has no kernel for{advice}"


def create_session(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                   options: ort.SessionOptions | None = None) -> ort.InferenceSession:
    """An InferenceSession on the requested provider; refuses to run elsewhere."""
    import onnxruntime as ort

    from .modelio import check_exists

    settings = settings or SessionSettings()
    path = check_exists(model_path)
    providers = resolve_providers(settings)
    try:
        session = ort.InferenceSession(str(path), options or session_options(settings), providers=providers)
    except Exception as exc:
        hint = missing_kernel_hint(path, str(exc), settings.provider)
        raise UsageError(f"{path}: onnxruntime cannot load it ({one_line(exc, 300)}){hint}") from None
    wanted = providers[0][0]
    if wanted not in session.get_providers():
        raise UsageError(f"--provider {settings.provider}: onnxruntime did not enable {wanted} "
                         f"(got {', '.join(session.get_providers())})")
    return session


def run_session(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run with the feeds the session takes (extra entries such as ``labels`` are ignored).

    float32 data goes to float16 inputs as float16: an fp16 model without float32
    input/output casts takes the same samples as its float source.
    """
    inputs = session.get_inputs()
    names = [i.name for i in inputs]
    missing = [n for n in names if n not in feeds]
    if missing:
        raise UsageError(f"data has no input {missing[0]!r} (the model takes {', '.join(names)})")
    ready = {}
    for item in inputs:
        value = feeds[item.name]
        if item.type == "tensor(float16)" and getattr(value, "dtype", None) == "float32":
            value = value.astype("float16")
        ready[item.name] = value
    outputs = session.run(None, ready)
    return {o.name: value for o, value in zip(session.get_outputs(), outputs)}


@contextlib.contextmanager
def quiet_root_logging(level: int = logging.ERROR, *names: str) -> Iterator[None]:
    """Silence onnxruntime's tooling while it runs: it logs generic advice on the root logger
    ("consider pre-processing") and per-node INFO lines on its own loggers (``names``)."""
    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in names]
    previous = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, old in zip(loggers, previous):
            lg.setLevel(old)
