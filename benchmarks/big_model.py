"""A model over 2 GB end to end: what each command holds in memory against the model's size.

Run:
    .venv/bin/python benchmarks/big_model.py [--gb 2.5] [--folder DIR] [--steps all] [--keep]

Builds a synthetic MLP whose float32 weights take ``--gb`` GiB (stored as
external data, as any model over protobuf's 2 GB limit must be), then runs the
CLI on it step by step, each step in its own process: ``export`` (ONNX
passthrough, verified), ``quantize`` with ``dynamic`` and with a block-wise
weight-only strategy (``weightonly`` where installed, else ``int4``),
``compare`` of both against the float model, ``bench`` of all three, and
``lighten`` with those two strategies.  For every step it prints the wall
time, the peak resident memory of the step's whole process tree (sampled
every 0.1 s: lighten's and bench's workers count while they run) and of its
largest single process (from the kernel's ``wait4``), and each as a multiple
of the model's size on disk.  ``onnxlite bench`` and ``lighten`` start worker
processes, so their tree figure is the one that says what the machine must
have free.

Needs disk for about five copies of the model and memory for a few; check
``free -g`` first.  The weights are written one layer at a time, so building
the model holds one layer (64 MB at the default width), never the model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1024**3


# ---------------------------------------------------------------- the model


def build_model(path: Path, weight_bytes: int, hidden: int = 4096, outputs: int = 16, seed: int = 0) -> int:
    """Write ``path`` (+ ``path.data``): x:float32[batch,hidden] -> (MatMul -> Relu) x n -> MatMul -> y[batch,outputs].

    ``n`` is chosen so the weights take at least ``weight_bytes``.  Each layer
    is generated and written on its own (He-scaled, so the activations neither
    vanish nor blow up through the stack).  Returns the bytes of weights written.
    """
    import numpy as np
    from onnx import TensorProto, helper

    layer_bytes = hidden * hidden * 4
    layers = max(1, math.ceil((weight_bytes - hidden * outputs * 4) / layer_bytes))
    rng = np.random.default_rng(seed)
    data_name = f"{path.name}.data"
    path.parent.mkdir(parents=True, exist_ok=True)
    initializers, nodes = [], []
    offset = 0
    current = "x"
    with open(path.parent / data_name, "wb") as data:
        shapes = [(hidden, hidden)] * layers + [(hidden, outputs)]
        for i, shape in enumerate(shapes):
            weight = rng.standard_normal(shape, dtype=np.float32)
            weight *= np.float32(math.sqrt(2.0 / shape[0]))
            raw = weight.tobytes()
            data.write(raw)
            tensor = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=list(shape))
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += len(raw)
            initializers.append(tensor)
            last = i == len(shapes) - 1
            out = "y" if last else f"h{i}"
            nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [out if last else f"m{i}"], name=f"fc{i}"))
            if not last:
                nodes.append(helper.make_node("Relu", [f"m{i}"], [out], name=f"relu{i}"))
            current = out
            del weight, raw
    graph = helper.make_graph(nodes, "big_mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", outputs])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="big_model.py")
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())   # a small file: every weight is in path.data
    return offset


def model_bytes(path: Path) -> int:
    """The model's size on disk, its external data included."""
    return sum(p.stat().st_size for p in path.parent.iterdir()
               if p.is_file() and (p == path or p.name.startswith(f"{path.name}.")))


# ---------------------------------------------------------------- measuring one step


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return found


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants now."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += _rss(current)
        todo.extend(_children(current))
    return total


@dataclass
class Step:
    name: str
    argv: list[str]
    rc: int = 0
    seconds: float = 0.0
    peak_tree: int = 0
    peak_process: int = 0
    tail: str = ""
    extra: dict = field(default_factory=dict)


def run_step(step: Step, env: dict[str, str] | None = None, cwd: Path | None = None) -> Step:
    """Run ``python -m onnxlite ARGV`` and record time and peak memory (tree sampled, largest process exact)."""
    command = [sys.executable, "-m", "onnxlite", *step.argv]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        peak = 0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, tree_rss(proc.pid))
                stop.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _pid, status, usage = os.wait4(proc.pid, 0)
        stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    step.rc = proc.returncode
    step.seconds = time.perf_counter() - started
    step.peak_tree = peak
    step.peak_process = usage.ru_maxrss * 1024   # KiB on Linux; the child and the descendants it reaped
    step.tail = "\n".join(output.strip().splitlines()[-6:])
    step.extra["output"] = output
    return step


def block_strategy() -> str:
    """The block-wise weight-only strategy this install has: ``weightonly``, else ``int4``."""
    from onnxlite.registry import get_registry

    names = get_registry().names("quantizer")
    for name in ("weightonly", "int4"):
        if name in names:
            return name
    raise SystemExit(f"no block-wise weight-only strategy installed (have {', '.join(names)})")


def plan(model: Path, out: Path, steps: set[str], block: str) -> list[Step]:
    fp32, dyn, wo = out / "fp32.onnx", out / "dynamic.onnx", out / f"{block}.onnx"
    every = [
        Step("export (passthrough)", ["export", str(model), "-o", str(fp32)]),
        Step("quantize dynamic", ["quantize", str(fp32), "-o", str(dyn), "-s", "dynamic"]),
        Step(f"quantize {block}", ["quantize", str(fp32), "-o", str(wo), "-s", block]),
        Step("compare", ["compare", str(fp32), str(dyn), str(wo), "--samples", "8", "--batch-size", "4"]),
        Step("bench", ["bench", str(fp32), str(dyn), str(wo), "--runs", "5", "--warmup", "1", "--batch", "1"]),
        Step(f"lighten (dynamic,{block})", ["lighten", str(model), "-o", str(out / "lightened"), "--strategies",
                                          f"dynamic,{block}", "--max-drop", "5%", "--runs", "5", "--workers", "1",
                                          "--no-partial"]),
    ]
    keys = ["export", "dynamic", "block", "compare", "bench", "lighten"]
    return [s for k, s in zip(keys, every) if "all" in steps or k in steps]


def human(count: float) -> str:
    return f"{count / GIB:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.5, help="GiB of float32 weights (default 2.5)")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--folder", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--steps", default="all",
                        help="comma-separated: export,dynamic,block,compare,bench,lighten (default all)")
    parser.add_argument("--keep", action="store_true", help="keep the models afterwards")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    folder = args.folder or Path(tempfile.mkdtemp(prefix="onnxlite-big-"))
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "big.onnx"
    try:
        started = time.perf_counter()
        written = build_model(model, int(args.gb * GIB), hidden=args.hidden)
        size = model_bytes(model)
        print(f"built {model}: {human(written)} of float32 weights, {human(size)} on disk "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        import onnxruntime

        block = block_strategy()
        steps = plan(model, folder / "out", {s.strip() for s in args.steps.split(",")}, block)
        (folder / "out").mkdir(exist_ok=True)
        load = os.getloadavg()
        print(f"onnxruntime {onnxruntime.__version__}, {os.cpu_count()} cores, load {load[0]:.2f}; "
              f"memory as a multiple of the model's {human(size)}", flush=True)
        print(f"{'step':28}{'rc':>4}{'seconds':>9}{'peak (tree)':>14}{'multiple':>10}{'largest process':>17}"
              f"{'multiple':>10}", flush=True)
        rows = []
        for step in steps:
            run_step(step)
            print(f"{step.name:28}{step.rc:>4}{step.seconds:>9.1f}{human(step.peak_tree):>14}"
                  f"{step.peak_tree / size:>9.2f}x{human(step.peak_process):>17}{step.peak_process / size:>9.2f}x",
                  flush=True)
            if step.rc not in (0, 1):
                print(f"  {step.name} failed:\n  " + step.tail.replace("\n", "\n  "), flush=True)
            rows.append({"step": step.name, "argv": step.argv, "rc": step.rc, "seconds": round(step.seconds, 1),
                         "peak_tree_bytes": step.peak_tree, "peak_process_bytes": step.peak_process,
                         "tree_multiple": round(step.peak_tree / size, 2),
                         "process_multiple": round(step.peak_process / size, 2)})
        if args.json:
            args.json.write_text(json.dumps({"model_bytes": size, "weights_bytes": written, "load": load[0],
                                             "onnxruntime": onnxruntime.__version__, "steps": rows}, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
