"""What pausing idle benchmark workers is worth: the same models benchmarked with and without it.

Run:
    .venv/bin/python benchmarks/worker_isolation.py MODEL.onnx MODEL2.onnx [...] [--batch 64] [--seq-len 19]
        [--threads 2] [--runs 40]

``onnxlite.bench`` gives each model its own worker process and interleaves
their turns.  onnxruntime's intra-op threads keep spinning for a while after a
run returns; unless the idle workers are paused (SIGSTOP, the default), their
spinning threads compete with the worker being timed.  This script measures the
same models both ways, in alternating rounds so that machine drift hits both,
and prints each model's p50 and its ratio to the first model.  POSIX only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import onnxlite
from onnxlite.benchmark import workers
from onnxlite.runtime import SessionSettings


def measure(models: list[str], pause: bool, args: argparse.Namespace) -> list[float]:
    workers.PAUSE_IDLE_WORKERS = pause
    result = onnxlite.bench(models, batch=args.batch, seq_len=args.seq_len, runs=args.runs,
                            settings=SessionSettings(threads=args.threads))
    return [row.latency_ms["p50"] for row in result.rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=19)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="alternating with/without rounds")
    args = parser.parse_args()
    from onnxlite.hardware import header

    print(header(), flush=True)   # what every figure below was measured on
    if len(args.models) < 2:
        sys.exit("give at least two models: the effect comes from interleaving them")
    p50s: dict[bool, list[list[float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for pause in (False, True):
            p50s[pause].append(measure(args.models, pause, args))
    names = [Path(m).name for m in args.models]
    print(f"batch {args.batch}, seq {args.seq_len}, {args.threads} threads, {args.runs} runs per model, "
          f"{args.rounds} rounds each way; median of the rounds' p50s")
    print(f"{'model':32}{'spinning idle ms':>18}{'paused idle ms':>16}{'ratio (spin)':>14}{'ratio (paused)':>16}")
    spin = [statistics.median(r[i] for r in p50s[False]) for i in range(len(names))]
    paused = [statistics.median(r[i] for r in p50s[True]) for i in range(len(names))]
    for i, name in enumerate(names):
        print(f"{name:32}{spin[i]:18.2f}{paused[i]:16.2f}{spin[0] / spin[i]:14.2f}{paused[0] / paused[i]:16.2f}")


if __name__ == "__main__":
    main()
