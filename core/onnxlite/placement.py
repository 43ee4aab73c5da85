"""Where onnxruntime really runs each node, what falls back to the CPU, and what that costs.

An accelerator provider runs only the operators it has kernels for; the rest
go to the CPU provider, with device copies around them.  A quantized model
full of operators the accelerator lacks (int8 QOperator ops on CUDA,
QLinearMatMul on OpenVINO) can be slower than fp32.  We learn the placement
from onnxruntime's own profiler: every node event in the profile JSON carries
``args.provider`` and its duration.  A provider that compiles subgraphs
(OpenVINO, TensorRT) appears as one fused node per subgraph
(``OpenVINO-EP-subgraph_N``); the nodes it could not take appear one by one.

:func:`logged_placement` reads the same assignment from a second source, the
session's verbose "Node placements" log, so the two can be checked against
each other node for node (tests/test_openvino.py does, on a real EP).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError, one_line

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


@dataclass(frozen=True)
class NodeTime:
    """One node as onnxruntime ran it: provider and mean kernel time per run."""

    name: str
    op: str
    provider: str
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "provider": self.provider, "ms": round(self.ms, 4)}


@dataclass(frozen=True)
class PlacementReport:
    """Every node that ran, where, and for how long; the CPU fallback with its cost."""

    requested: str                  # onnxruntime's name of the provider asked for
    nodes: tuple[NodeTime, ...]
    run_ms: float | None            # mean ``model_run`` time of the profiled runs
    runs: int

    @property
    def fallback(self) -> tuple[NodeTime, ...]:
        """Nodes that ran on the CPU although another provider was asked for."""
        if self.requested == CPU:
            return ()
        return tuple(n for n in self.nodes if n.provider == CPU)

    @property
    def fallback_ms(self) -> float:
        return sum(n.ms for n in self.fallback)

    def fallback_ops(self) -> dict[str, int]:
        return dict(Counter(n.op for n in self.fallback).most_common())

    def summary(self) -> str | None:
        """One line for tables and reports, None when nothing fell back."""
        if not self.fallback:
            return None
        ops = ", ".join(f"{op} x{n}" for op, n in list(self.fallback_ops().items())[:4])
        more = ", ..." if len(self.fallback_ops()) > 4 else ""
        share = f" of {self.run_ms:.2f} ms a run ({self.fallback_ms / self.run_ms:.0%})" if self.run_ms else " a run"
        return (f"{len(self.fallback)} node(s) ran on the CPU instead of {self.requested} ({ops}{more}): "
                f"{self.fallback_ms:.2f} ms{share}")

    def to_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "runs": self.runs,
                "run_ms": None if self.run_ms is None else round(self.run_ms, 4),
                "fallback": {n.name: n.op for n in self.fallback}, "fallback_ms": round(self.fallback_ms, 4),
                "fallback_ops": self.fallback_ops(), "nodes": [n.to_dict() for n in self.nodes]}


def parse_profile_times(events: Iterable[Mapping[str, Any]]) -> tuple[list[NodeTime], float | None, int]:
    """Nodes with their mean kernel time, the mean ``model_run`` time and the number of runs.

    The first run pays for allocation and (on compiling providers) for
    building the engine, so it is left out of the means when there are more.
    """
    durations: dict[str, list[float]] = {}
    info: dict[str, dict[str, str]] = {}
    model_runs: list[float] = []
    for event in events:
        if event.get("name") == "model_run":
            model_runs.append(float(event.get("dur", 0)) / 1000)
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith(_KERNEL_SUFFIX):
            continue
        args = event.get("args") or {}
        if not args.get("provider"):
            continue
        name = (str(event["name"])[: -len(_KERNEL_SUFFIX)]
                or f"{args.get('op_name', 'node')}#{args.get('node_index', '?')}")
        info.setdefault(name, {"op": str(args.get("op_name", "")), "provider": str(args["provider"])})
        durations.setdefault(name, []).append(float(event.get("dur", 0)) / 1000)

    def mean(values: list[float]) -> float:
        kept = values[1:] if len(values) > 1 else values
        return sum(kept) / len(kept)

    nodes = [NodeTime(name, info[name]["op"], info[name]["provider"], mean(times)) for name, times in durations.items()]
    runs = len(model_runs)
    return nodes, (mean(model_runs) if model_runs else None), runs


#: samples of the user's data a profile runs on when it is given a whole data set
PROFILE_SAMPLES = 2

#: what the ``feeds`` of the functions below may be: one feed dict, a Dataset or a data path (the user's
#: samples, whose shapes the model takes), or None for a generated, padded batch
Feeds = Any


def sample_feeds(model_path: str | os.PathLike[str], feeds: Feeds = None) -> tuple[dict[str, np.ndarray], bool]:
    """The feed dict a profile runs, and whether it was generated.

    The user's samples whenever there are any: a feed dict as is, or the first
    :data:`PROFILE_SAMPLES` of a :class:`~onnxlite.data.Dataset` or a data path
    (read against the model's inputs, each cut on its own sample axis).  Only
    without data is a batch generated from the model's input specs, padded as
    every other check pads it.
    """
    from .inputs import make_feeds, specs_from_onnx

    if feeds is None:
        return make_feeds(specs_from_onnx(model_path), batch=2, seq=8, pad=True), True
    if isinstance(feeds, (str, os.PathLike)):
        from .data import load_data

        feeds = load_data(feeds, specs_from_onnx(model_path))
    if hasattr(feeds, "batches"):
        for batch in feeds.batches(PROFILE_SAMPLES):
            return dict(batch), False
        raise UsageError(f"{getattr(feeds, 'source', '') or 'the data'}: no samples")
    return dict(feeds), False


def first_samples(feeds: Mapping[str, np.ndarray], count: int, axes: Mapping[str, int | None] | None = None,
                  model_path: str | os.PathLike[str] | None = None) -> dict[str, np.ndarray]:
    """The first ``count`` samples of ``feeds``, each input cut on its own sample axis (``axes``, else read
    from ``model_path``'s input specs): a state ``[2, batch, 128]`` on axis 1, a scalar sample rate whole."""
    from .data.dataset import take_rows

    if axes is None and model_path is not None:
        from .inputs import batch_axes, specs_from_onnx

        axes = batch_axes(specs_from_onnx(model_path))
    return take_rows(feeds, 0, count, axes)


def _profile_events(model_path: str | os.PathLike[str], settings: SessionSettings,
                    feeds: Feeds, runs: int) -> list[dict[str, Any]]:
    from .runtime import create_session, run_session, session_options

    with tempfile.TemporaryDirectory(prefix="onnxlite-profile-") as tmp:
        options = session_options(settings)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = create_session(model_path, settings, options)
        feeds, generated = sample_feeds(model_path, feeds)
        for _ in range(max(1, runs)):
            try:
                run_session(session, feeds)
            except UsageError:
                raise
            except Exception as exc:
                shapes = ", ".join(f"{n}{list(getattr(a, 'shape', ()))}" for n, a in feeds.items())
                what = "generated samples" if generated else "the given samples"
                hint = "; give data of the sizes it takes" if generated else ""
                raise UsageError(f"{model_path}: profiling where its nodes run failed on {what} {shapes} "
                                 f"({one_line(exc, 200)}){hint}") from None
        path = session.end_profiling()
        try:
            events = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a readable onnxruntime profile ({exc})") from None
    return events.get("traceEvents", []) if isinstance(events, dict) else events


def placement_report(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                     feeds: Feeds = None, runs: int = 3) -> PlacementReport:
    """Run the model ``runs`` times with profiling on: where each node ran and what the fallback cost.

    ``feeds``: the user's samples (a feed dict, Dataset or data path: :func:`sample_feeds`) whenever there are
    any; a graph that needs particular sizes fails on invented ones."""
    from .runtime import SessionSettings

    settings = settings or SessionSettings()
    nodes, run_ms, count = parse_profile_times(_profile_events(model_path, settings, feeds, runs))
    return PlacementReport(requested=requested_provider(settings), nodes=tuple(nodes), run_ms=run_ms, runs=count)


def profile_nodes(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                  feeds: Feeds = None) -> dict[str, dict[str, str]]:
    """Run the model once with profiling on and return :func:`parse_profile` of the result."""
    from .runtime import SessionSettings

    return parse_profile(_profile_events(model_path, settings or SessionSettings(), feeds, 1))


_PLACED = re.compile(r"(All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)")
_PLACED_NODE = re.compile(r"VerifyEachNodeIsAssignedToAnEp\]\s{3}(\S+) \((.*)\)\s*$")


def parse_placement_log(text: str) -> dict[str, list[tuple[str, str]] | None]:
    """Provider -> ``[(op, node name), ...]`` from onnxruntime's verbose "Node placements" log.

    ``None`` for a provider means the log said "All nodes placed on" it without listing them.
    """
    placed: dict[str, list[tuple[str, str]] | None] = {}
    current: str | None = None
    for line in text.splitlines():
        header = _PLACED.search(line)
        if header:
            current = header.group(2)
            placed[current] = None if header.group(1) == "All nodes" else []
            continue
        node = _PLACED_NODE.search(line)
        nodes = placed.get(current) if current is not None else None
        if node and nodes is not None:
            nodes.append((node.group(1), node.group(2)))
        elif "VerifyEachNodeIsAssignedToAnEp" not in line:
            current = None
    return placed


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Send file descriptor 2 to ``path``: onnxruntime's C++ logger writes there, not to sys.stderr."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def logged_placement(model_path: str | os.PathLike[str],
                     settings: SessionSettings | None = None) -> dict[str, list[tuple[str, str]] | None]:
    """Where the session's partitioner put each node, from its verbose log (see :func:`parse_placement_log`).

    A second account of the placement, independent of the profiler, that
    costs one session creation and no run.
    """
    from dataclasses import replace

    from .runtime import SessionSettings, create_session, session_options

    settings = replace(settings or SessionSettings(), log_severity=0)
    with tempfile.TemporaryDirectory(prefix="onnxlite-placement-") as tmp:
        log = Path(tmp) / "session.log"
        with _stderr_to(log):
            create_session(model_path, settings, session_options(settings))
        return parse_placement_log(log.read_text(errors="replace"))


def node_placement(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                   feeds: Feeds = None) -> dict[str, str]:
    """Node name -> the execution provider onnxruntime ran it on (after graph optimization)."""
    return {node: info["provider"] for node, info in profile_nodes(model_path, settings, feeds).items()}


def record_fallback(rows: Iterable[Any], settings: SessionSettings,
                    feeds: Feeds) -> dict[str, dict[str, Any]]:
    """Row name -> what fell back (nodes, time, ops, one-line summary), for benchmarked rows that did.

    Empty on the CPU provider; a model that cannot be profiled is left out
    (its benchmark already said why).
    """
    found: dict[str, dict[str, Any]] = {}
    if settings.provider == "cpu":
        return found
    for row in rows:
        if getattr(row, "latency_ms", None) is None or not getattr(row, "path", None):
            continue
        try:
            report = placement_report(row.path, settings, feeds, runs=3)
        except Exception:  # noqa: BLE001 - a profile that fails must not lose the search's result
            continue
        if report.fallback:
            found[row.name] = {"nodes": len(report.fallback), "ms": round(report.fallback_ms, 3),
                               "run_ms": None if report.run_ms is None else round(report.run_ms, 3),
                               "ops": report.fallback_ops(), "summary": report.summary()}
    return found


def annotate_reasons(rows: Iterable[Any], fallback: Mapping[str, Mapping[str, Any]]) -> None:
    """Append each row's fallback summary (from :func:`record_fallback`) to its reason, for tables and reports."""
    for row in (r for r in rows if r.name in fallback):
        summary = fallback[row.name]["summary"]
        row.reason = f"{row.reason}; {summary}" if row.reason else summary


def report_fallback(rows: list[Any], settings: SessionSettings, feeds: Mapping[str, np.ndarray] | None,
                    batch: int | None = None,
                    axes: Mapping[str, int | None] | None = None) -> dict[str, dict[str, Any]]:
    """:func:`record_fallback` on the first ``batch`` samples of ``feeds``, then :func:`annotate_reasons`.

    ``axes``: each input's sample axis (the judge's ``batch_axes``); by default read from the first row's model.

    What ``lighten`` shows for each benchmarked row on a provider other than the CPU (its table and report).
    """
    if settings.provider == "cpu":
        return {}
    if feeds is not None and batch:
        # each input on its own sample axis (v[:batch] sliced a state's axis 0 and raised on a scalar)
        first = next((row.path for row in rows if getattr(row, "path", None)), None)
        feeds = first_samples(feeds, batch, axes, first)
    found = record_fallback(rows, settings, feeds)
    annotate_reasons(rows, found)
    return found


def requested_provider(settings: SessionSettings | None) -> str:
    """onnxruntime's name for the provider ``settings`` asks for."""
    from .runtime import SessionSettings, resolve_providers

    return resolve_providers(settings or SessionSettings())[0][0]


def cpu_fallback_nodes(model_path: str | os.PathLike[str], settings: SessionSettings | None = None,
                       feeds: Feeds = None) -> dict[str, str]:
    """Nodes (name -> op type) that ran on the CPU although another provider was asked for.

    Empty when the CPU provider itself was asked for: nothing fell back.
    """
    if requested_provider(settings) == CPU:
        return {}
    return {n.name: n.op for n in placement_report(model_path, settings, feeds, runs=1).fallback}


def model_format(model_path: str | os.PathLike[str]) -> str:
    """``int4``, ``qdq``, ``qoperator``, ``fp16`` or ``fp32``: the format words providers declare as fast."""
    from onnx import TensorProto

    from .modelio import load_model
    from .ops import BLOCK_OPS, is_qoperator

    model = load_model(model_path, load_external_data=False)
    ops = {node.op_type for node in model.graph.node}
    if ops & BLOCK_OPS:
        return "int4"
    # QOperator models keep a QuantizeLinear/DequantizeLinear pair at their float edges, so their
    # own ops decide first.
    if any(is_qoperator(op) for op in ops):
        return "qoperator"
    if "QuantizeLinear" in ops and "DequantizeLinear" in ops:
        return "qdq"
    if any(init.data_type == TensorProto.FLOAT16 for init in model.graph.initializer):
        return "fp16"
    return "fp32"


def format_advice(provider_name: str, fmt: str) -> str | None:
    """A one-line warning when the provider does not declare ``fmt`` among the formats it runs fast."""
    from .registry import get_registry

    spec = get_registry().get("provider", provider_name).spec
    fast = spec.fast_formats
    if not fast or fmt in fast:
        return None
    return (f"{spec.ort_name} does not run {fmt} models fast (it accelerates {', '.join(fast)}); "
            "expect CPU fallback or slow kernels")
