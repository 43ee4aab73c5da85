"""The plain onnxruntime recipes on real models shipped in PyPI wheels: size, speed and task fidelity against fp32.

    .venv/bin/python benchmarks/real_models/baseline.py [--models ppocr_rec,silero_vad] [--threads 1]
        [--calibration 8] [--runs 15] [--json out.json] [--write-data DIR]

For each model of ``models.MODELS`` (the file as shipped in its wheel) it makes:

* ``dynamic``: ``quantize_dynamic(weight_type=QInt8)``;
* ``static``: ``quantize_static`` QDQ, per-channel, MinMax, on ``--calibration``
  samples made like the wheel's own preprocessing.  Calibration keeps every
  intermediate output of every sample in memory: onnxruntime's
  ``CalibMaxIntermediateOutputs`` would bound that, but in onnxruntime 1.32
  ``MinMaxCalibrater.collect_data`` clears the collected outputs when the bound
  is reached without computing their ranges first (so ranges come from the
  last ``n % bound`` samples only, and ``No data is collected`` when that is 0);
* ``fp16``: ``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)``.

A recipe that fails on the file as shipped is recorded with its error.  Where
``onnxlite.normalize.normalize(model)`` changes the model (Constant weights
lifted to initializers, opset raised to 13), every recipe is also run on the
normalised model and shown as ``recipe+norm``.  Each model
is judged by its task metric (``models.MODELS[key].task``) on held-out data
that shares no word, photo, sentence or voice with the calibration data, and on
a second domain where there is one (other fonts for OCR, louder low-passed
noise for VAD).  Latency is the p50 of ``--runs`` interleaved runs (fp32,
candidate, fp32, candidate...) of one typical call, at ``--threads``.

``--write-data DIR`` also writes ``DIR/KEY/calibration.npz`` and
``heldout.npz``, keyed by input name as a user would hand them to ``onnxlite``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models as M  # noqa: E402


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


# --------------------------------------------------------------------------- tasks: data, answers, scores


class Task:
    """Data and the task metric of one model.  ``answers(session, data)`` decodes; ``score`` compares to fp32."""

    key: str

    def calibration(self, count: int) -> list[dict]: ...
    def heldout(self) -> dict[str, object]: ...      # domain name -> data
    def answers(self, session, data): ...
    def score(self, reference, candidate) -> float: ...
    def timing_feed(self) -> dict: ...


class OcrRec(Task):
    key = "ppocr_rec"

    def __init__(self):
        self.characters = M.ctc_characters(M.model_path(self.key))

    def calibration(self, count):
        x, _ = M.ocr_rec_data("calibration", count)
        return [{"x": x[i:i + 8]} for i in range(0, count, 8)]

    def heldout(self):
        return {"heldout": M.ocr_rec_data("heldout", 48), "fonts2": M.ocr_rec_data("heldout2", 24)}

    def answers(self, session, data):
        x, _ = data
        return sum((M.ctc_greedy(session.run(None, {"x": x[i:i + 6]})[0], self.characters)
                    for i in range(0, len(x), 6)), [])

    def score(self, reference, candidate):
        return M.string_agreement(reference, candidate)

    def truth(self, data, answers):
        return M.string_agreement(data[1], answers)

    def timing_feed(self):
        return {"x": M.ocr_rec_data("heldout", 6)[0]}   # rapidocr's rec_batch_num


class OcrDet(Task):
    key = "ppocr_det"

    def calibration(self, count):
        x = M.ocr_det_data("calibration", count)
        return [{"x": x[i:i + 1]} for i in range(count)]

    def heldout(self):
        return {"heldout": M.ocr_det_data("heldout", 12)}

    def answers(self, session, data):
        return [M.db_boxes(session.run(None, {"x": data[i:i + 1]})[0][0, 0]) for i in range(len(data))]

    def score(self, reference, candidate):
        return M.f1([M.match_counts(r, c) for r, c in zip(reference, candidate)])

    def timing_feed(self):
        return {"x": M.ocr_det_data("heldout", 1)}


class Yolo(Task):
    key = "yolo_doclaynet"

    def calibration(self, count):
        x = M.yolo_data("calibration", count)
        return [{"images": x[i:i + 1]} for i in range(count)]

    def heldout(self):
        return {"heldout": M.yolo_data("heldout", 12), "scanned2": M.yolo_data("heldout2", 8)}

    def answers(self, session, data):
        return [M.yolo_detections(session.run(None, {"images": data[i:i + 1]})[0][0]) for i in range(len(data))]

    def score(self, reference, candidate):
        return M.f1([M.match_counts(r[0], c[0], ref_classes=r[1], cand_classes=c[1])
                     for r, c in zip(reference, candidate)])

    def timing_feed(self):
        return {"images": M.yolo_data("heldout", 1)}


class Vad(Task):
    key = "silero_vad"

    def __init__(self):
        self._fp32 = None

    def calibration(self, count):
        streams = M.vad_streams("calibration", 4)
        _, feeds = M.vad_run(_session(M.model_path(self.key), 1), streams, collect_feeds=True)
        # Steps spread over the streams, with the states the fp32 model really had there.
        picks = np.linspace(4, len(feeds) - 1, count).astype(int)
        return [feeds[i] for i in picks]

    def heldout(self):
        return {"heldout": M.vad_streams("heldout", 8), "noise2": M.vad_streams("heldout2", 8)}

    def answers(self, session, data):
        probabilities, _ = M.vad_run(session, data)
        return probabilities >= 0.5

    def score(self, reference, candidate):
        return float(np.mean(reference == candidate))

    def timing_feed(self):
        return {"input": np.zeros((1, M.VAD_CHUNK + M.VAD_CONTEXT), np.float32) + 0.01,
                "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(M.VAD_RATE, dtype=np.int64)}


class Vad16k(Vad):
    key = "silero_vad_16k"


TASKS = {t.key: t for t in (OcrRec, OcrDet, Yolo, Vad, Vad16k)}


# --------------------------------------------------------------------------- recipes


def recipe_dynamic(source: Path, out: Path, calibration) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8)


def recipe_static(source: Path, out: Path, calibration) -> None:
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(calibration)

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(source), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    calibrate_method=CalibrationMethod.MinMax)


def recipe_fp16(source: Path, out: Path, calibration) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), str(out))


RECIPES = {"dynamic": recipe_dynamic, "static": recipe_static, "fp16": recipe_fp16}


def _quantized_ops(path: Path) -> int:
    import onnx

    quantized = {"DynamicQuantizeLinear", "QuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearConv",
                 "QLinearMatMul", "DynamicQuantizeMatMul"}
    return sum(n.op_type in quantized for n in onnx.load(str(path), load_external_data=False).graph.node)


def _latency(sessions: dict, feed: dict, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for session in sessions.values():
        session.run(None, feed)   # warm-up
    for _ in range(runs):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(None, feed)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def run_model(key: str, work: Path, args) -> dict:
    import onnx

    from onnxlite.normalize import normalize

    task = TASKS[key]()
    shipped = M.model_path(key)
    row: dict = {"model": key, "package": M.MODELS[key].wheel.requirement, "file": M.MODELS[key].member,
                 "task": M.MODELS[key].task, "candidates": {}}
    calibration = task.calibration(args.calibration)
    normalized = work / f"{key}.norm.onnx"
    norm = normalize(onnx.load(str(shipped)))
    onnx.save(norm.model, str(normalized))
    row["normalize"] = norm.summary()
    paths = {"fp32": shipped}
    for name, recipe in RECIPES.items():
        out = work / f"{key}.{name}.onnx"
        try:
            recipe(shipped, out, calibration)
            _session(out, 1)
            paths[name] = out
            row["candidates"][name] = {"quantized_ops": _quantized_ops(out) if name != "fp16" else None}
            if name != "fp16" and not row["candidates"][name]["quantized_ops"]:
                row["candidates"][name]["note"] = "nothing quantized"
        except Exception as exc:
            row["candidates"][name] = {"error": _first_line(exc)}
        if not norm.changed:
            continue
        out = work / f"{key}.{name}+norm.onnx"
        try:
            recipe(normalized, out, calibration)
            _session(out, 1)
            paths[f"{name}+norm"] = out
            row["candidates"][f"{name}+norm"] = {"quantized_ops": _quantized_ops(out) if name != "fp16" else None}
        except Exception as exc:
            row["candidates"][f"{name}+norm"] = {"error": _first_line(exc)}
    sessions = {name: _session(path, args.threads) for name, path in paths.items()}
    domains = task.heldout()
    reference = {domain: task.answers(sessions["fp32"], data) for domain, data in domains.items()}
    if hasattr(task, "truth"):
        row["fp32_ground_truth"] = {d: task.truth(data, reference[d]) for d, data in domains.items()}
    latency = _latency(sessions, task.timing_feed(), args.runs)
    fp32_size = os.path.getsize(shipped)
    for name, path in paths.items():
        entry = row["candidates"].setdefault(name, {})
        entry["size_mb"] = os.path.getsize(path) / 1e6
        entry["size_ratio"] = os.path.getsize(path) / fp32_size
        entry["latency_ms"] = latency[name] * 1e3
        entry["speedup"] = latency["fp32"] / latency[name]
        entry["fidelity"] = {d: task.score(reference[d], task.answers(sessions[name], data))
                             for d, data in domains.items()}
    if args.write_data:
        write_data(key, Path(args.write_data) / key, calibration, domains)
    return row


def write_data(key: str, folder: Path, calibration: list[dict], domains: dict) -> None:
    """The same data as onnxlite ``--calibration``/``--data`` files: one ``.npz`` keyed by input name."""
    folder.mkdir(parents=True, exist_ok=True)
    if key.startswith("silero_vad"):
        # What a user holds: the feed dicts of the stream, state [2, batch, 128] and sr a scalar.
        _, feeds = M.vad_run(_session(M.model_path(key), 1), domains["heldout"][:4], collect_feeds=True)
        for name, items in (("calibration", calibration), ("heldout", feeds[::6])):
            np.savez(folder / f"{name}.npz", input=np.concatenate([f["input"] for f in items]),
                     state=np.concatenate([f["state"] for f in items], axis=1), sr=np.array(M.VAD_RATE, np.int64))
        return
    (input_name,) = calibration[0].keys()
    np.savez(folder / "calibration.npz", **{input_name: np.concatenate([c[input_name] for c in calibration])})
    data = domains["heldout"]
    np.savez(folder / "heldout.npz", **{input_name: data[0] if isinstance(data, tuple) else data})


def _table(rows: list[dict]) -> str:
    lines = ["| model | recipe | size MB | size ratio | p50 ms | speedup | task fidelity | note |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for row in rows:
        for name, c in row["candidates"].items():
            if "error" in c:
                lines.append(f"| {row['model']} | {name} | | | | | failed | {c['error'][:120]} |")
                continue
            fidelity = ", ".join(f"{d} {v:.3f}" for d, v in c["fidelity"].items())
            note = c.get("note", "")
            if c.get("quantized_ops") is not None:
                note = (note + "; " if note else "") + f"{c['quantized_ops']} quantize nodes"
            lines.append(f"| {row['model']} | {name} | {c['size_mb']:.2f} | {c['size_ratio']:.2f}x | "
                         f"{c['latency_ms']:.1f} | {c['speedup']:.2f}x | {fidelity} | {note} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(M.MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json")
    parser.add_argument("--write-data")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models.split(","):
            started = time.time()
            rows.append(run_model(key, Path(tmp), args))
            rows[-1]["seconds"] = time.time() - started
            print(f"{key}: {rows[-1]['seconds']:.0f} s; normalize: {rows[-1]['normalize'] or 'nothing to do'}; "
                  f"fp32 vs ground truth: {rows[-1].get('fp32_ground_truth', '-')}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print(f"load average {os.getloadavg()[0]:.2f} at the end; {args.threads} thread(s); fp32 = the file as shipped")
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
