"""Where EfficientNet-Lite0's int8 flips come from, and the best any fast int8 model could do on these views.

Run (docs/benchmarks.md, "Where the flips come from"):
    .venv/bin/python benchmarks/recovery_ceiling.py [--workdir DIR] [--threads 2] [--json out.json]

Issue 23 asks for >= 96% top-1 agreement (31 of 32 evaluation views) at >= 3x smaller and >= 1.3x faster than
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
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default=str(REPO / "cnn_work" / "recovery"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
