"""Where onnxruntime really runs each node, and what falls back to the CPU.

An accelerator provider runs only the operators it has kernels for; the rest
go to the CPU provider, with device copies around them.  A quantized model
full of operators the accelerator lacks (int8 QOperator ops on CUDA) can be
slower than fp32.  We learn the placement from onnxruntime's own profiler:
every node event in the profile JSON carries ``args.provider``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from .runtime import SessionSettings

CPU = "CPUExecutionProvider"
_KERNEL_SUFFIX = "_kernel_time"


def parse_profile(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Node name -> ``{"op": op type, "provider": provider}`` from onnxruntime profile events.

    Only ``Node`` kernel events count; a node run several times appears once.
    Unnamed nodes get ``OpType#index``.
    """
    placement: dict[str, dict[str, str]] = {}
    for event in events:
        if event.get("cat") != "Node":
            continue
        name = str(event.get("name", ""))
        if not name.endswith(_KERNEL_SUFFIX):
            continue
        args = event.get("args") or {}
        provider = args.get("provider")
        if not provider:
            continue
        node = name[: -len(_KERNEL_SUFFIX)] or f"{args.get('op_name', 'node')}#{args.get('node_index', '?')}"
        placement.setdefault(node, {"op": str(args.get("op_name", "")), "provider": str(provider)})
    return placement


def read_profile(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    try:
        events = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable onnxruntime profile ({exc})") from None
    if isinstance(events, dict):  # some tools wrap the events
        events = events.get("traceEvents", [])
    return parse_profile(events)


def profile_nodes(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                  feeds: Mapping[str, np.ndarray] | None = None) -> dict[str, dict[str, str]]:
    """Run the model once with profiling on and return :func:`parse_profile` of the result."""
    from .inputs import make_feeds, specs_from_onnx
    from .runtime import SessionSettings, create_session, run_session, session_options

    settings = settings or SessionSettings()
    with tempfile.TemporaryDirectory(prefix="onnxlite-profile-") as tmp:
        options = session_options(settings)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = create_session(model_path, settings, options)
        if feeds is None:
            feeds = make_feeds(specs_from_onnx(model_path), batch=2, seq=8)
        run_session(session, feeds)
        profile = session.end_profiling()
        return read_profile(profile)


def node_placement(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                   feeds: Mapping[str, np.ndarray] | None = None) -> dict[str, str]:
    """Node name -> the execution provider onnxruntime ran it on (after graph optimization)."""
    return {node: info["provider"] for node, info in profile_nodes(model_path, settings, feeds).items()}


def requested_provider(settings: SessionSettings | None) -> str:
    """onnxruntime's name for the provider ``settings`` asks for."""
    from .runtime import SessionSettings, resolve_providers

    return resolve_providers(settings or SessionSettings())[0][0]


def cpu_fallback_nodes(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                       feeds: Mapping[str, np.ndarray] | None = None) -> dict[str, str]:
    """Nodes (name -> op type) that ran on the CPU although another provider was asked for.

    Empty when the CPU provider itself was asked for: nothing fell back.
    """
    wanted = requested_provider(settings)
    if wanted == CPU:
        return {}
    nodes = profile_nodes(model_path, settings, feeds)
    return {node: info["op"] for node, info in nodes.items() if info["provider"] == CPU}


def model_format(model_path: str | os.PathLike[str]) -> str:
    """``int4``, ``qdq``, ``qoperator``, ``fp16`` or ``fp32``: the format words providers declare as fast."""
    from onnx import TensorProto

    from .modelio import load_model

    model = load_model(model_path, load_external_data=False)
    ops = {node.op_type for node in model.graph.node}
    if "MatMulNBits" in ops:
        return "int4"
    if "QuantizeLinear" in ops and "DequantizeLinear" in ops:
        return "qdq"
    if ops & {"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv", "DynamicQuantizeLinear",
              "QGemm", "QAttention", "DynamicQuantizeMatMul"}:
        return "qoperator"
    if any(init.data_type == TensorProto.FLOAT16 for init in model.graph.initializer):
        return "fp16"
    return "fp32"


def format_advice(provider_name: str, fmt: str) -> str | None:
    """A one-line warning when the provider does not declare ``fmt`` among the formats it runs fast."""
    from .registry import get_registry

    spec = get_registry().get("provider", provider_name).spec
    fast = getattr(spec, "fast_formats", ())
    if not fast or fmt in fast:
        return None
    return (f"{spec.ort_name} does not run {fmt} models fast (it accelerates {', '.join(fast)}); "
            "expect CPU fallback or slow kernels")
