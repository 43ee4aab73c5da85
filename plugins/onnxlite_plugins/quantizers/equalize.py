"""Cross-layer equalization (CLE) of consecutive convolutions, with BatchNorm folded first: numpy on the ONNX graph.

Per-channel int8 gives each output channel of a weight its own scale, but the
activation between two convolutions has one scale for all its channels, and a
depthwise convolution's channels can differ in range by 100x (MobileNet,
EfficientNet-Lite).  Nagel et al. (2019, arXiv:1906.04721) rescale channel i of
the pair: conv1's output channel i is divided by ``s_i = sqrt(r1_i / r2_i)``
and conv2's input channel i multiplied by it, where r1 and r2 are the two
weights' ranges for that channel.  Both ranges become ``sqrt(r1_i * r2_i)``.
ReLU is positively homogeneous, so the float model computes the same thing.

ReLU6 (``Clip(0, 6)``) is not: ``clip6(x / s) != clip6(x) / s``.  With
``clip6="bounded"`` (the default) the calibration data decides: channel i of the
pre-activation x is scaled only as far as ``x / s_i`` stays below 6 wherever x
did (``s_i >= max(x_i) / 6``), and a channel that does reach 6 is not scaled,
so the Clip computes the same thing on the calibration data.  Like AIMET and
Quark, ``clip6="relu"`` replaces the Clip between an equalized pair by a ReLU
instead (the float outputs change wherever an activation went above 6: on
EfficientNet-Lite0 that cost 25 of 32 answers), and ``clip6="skip"`` leaves
such pairs alone.  BatchNormalization after a conv is
folded into its weights and bias first (onnxruntime's pre-processing does the
same; a model that skipped it still gets it here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: a range below this is a dead channel: it is left as it is
EPS = 1e-8


@dataclass(frozen=True)
class EqualizedPair:
    """One equalized pair and its per-channel weight ranges before and after (max over channels / min)."""

    first: str
    second: str
    through: str            # "" (direct), "Relu", or "Clip" (replaced by a Relu)
    spread_before: float    # max/min per-channel range ratio of the first conv's weight
    spread_after: float


def _inits(model: Any) -> dict[str, Any]:
    return {i.name: i for i in model.graph.initializer}


def _array(model: Any, name: str) -> Any:
    from onnx import numpy_helper

    return numpy_helper.to_array(_inits(model)[name]).astype("float64")


def _set(model: Any, name: str, value: Any) -> None:
    """Replace initializer ``name`` in place (same name, float32)."""
    from onnx import numpy_helper

    tensor = _inits(model)[name]
    tensor.CopyFrom(numpy_helper.from_array(value.astype("float32"), name))


def _users(model: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for n in model.graph.node:
        for i in n.input:
            found.setdefault(i, []).append(n)
    return found


def _attr(node: Any, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return a.i if a.type == a.INT else a.f
    return default


def ensure_bias(model: Any, conv: Any, channels: int) -> str:
    """The name of ``conv``'s bias initializer, added as zeros when it has none."""
    import numpy as np
    from onnx import numpy_helper

    if len(conv.input) > 2 and conv.input[2]:
        return str(conv.input[2])
    name = f"{conv.name or conv.output[0]}_bias"
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(channels, np.float32), name))
    if len(conv.input) == 2:
        conv.input.append(name)
    else:
        conv.input[2] = name
    return name


def _shared(model: Any, name: str) -> bool:
    """Whether initializer ``name`` feeds more than one node (rescaling it would change the others)."""
    return sum(1 for n in model.graph.node for i in n.input if i == name) > 1


def fold_batchnorm(model: Any) -> int:
    """Fold every BatchNormalization that follows a Conv (whose only user it is) into the conv. Returns how many."""
    import numpy as np

    inits = _inits(model)
    users = _users(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    folded = []
    for bn in model.graph.node:
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1:
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or len(users.get(conv.output[0], [])) != 1 \
                or conv.input[1] not in inits or _shared(model, conv.input[1]) \
                or not all(i in inits for i in bn.input[1:5]):
            continue
        scale, shift, mean, var = (_array(model, i) for i in bn.input[1:5])
        factor = scale / np.sqrt(var + _attr(bn, "epsilon", 1e-5))
        weight = _array(model, conv.input[1])
        bias_name = ensure_bias(model, conv, weight.shape[0])
        _set(model, conv.input[1], weight * factor.reshape(-1, *[1] * (weight.ndim - 1)))
        _set(model, bias_name, (_array(model, bias_name) - mean) * factor + shift)
        conv.output[0] = bn.output[0]
        folded.append(bn)
    for bn in folded:
        model.graph.node.remove(bn)
    return len(folded)


def _pairs(model: Any, clip6: str) -> list[tuple[Any, Any, Any | None]]:
    """(conv1, conv2, activation or None) for every conv whose output reaches exactly one conv through at most
    one Relu (or Clip(0, 6) unless ``clip6="skip"``); both weights constant, unshared, conv or depthwise."""
    inits = _inits(model)
    users = _users(model)
    found = []
    for first in model.graph.node:
        if first.op_type != "Conv" or first.input[1] not in inits:
            continue
        act, nxt = None, users.get(first.output[0], [])
        if len(nxt) == 1 and nxt[0].op_type in ("Relu", "Clip"):
            act = nxt[0]
            if act.op_type == "Clip" and (clip6 == "skip" or not _is_relu6(model, act)):
                continue
            nxt = users.get(act.output[0], [])
        if len(nxt) != 1 or nxt[0].op_type != "Conv" or nxt[0].input[0] != (act or first).output[0]:
            continue
        second = nxt[0]
        if second.input[1] not in inits or _shared(model, first.input[1]) or _shared(model, second.input[1]):
            continue
        w1, w2 = inits[first.input[1]].dims, inits[second.input[1]].dims
        g1, g2 = _attr(first, "group", 1), _attr(second, "group", 1)
        channels = w1[0]
        if (g1 != 1 and g1 != channels) or (g2 != 1 and g2 != channels):
            continue            # grouped, not depthwise: channels mix within groups only
        if g2 == 1 and w2[1] != channels:
            continue
        found.append((first, second, act))
    return found


def _clip_bounds(model: Any, clip: Any) -> tuple[float | None, float | None]:
    """A Clip's constant (low, high), None where it is missing or not an initializer or Constant."""
    from onnx import numpy_helper

    values = {i.name: i for i in model.graph.initializer}
    constants = {n.output[0]: n.attribute[0].t for n in model.graph.node
                 if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    found: list[float | None] = []
    for name in list(clip.input[1:3]) + [""] * (3 - len(clip.input)):
        tensor = values.get(name) or constants.get(name)
        found.append(float(numpy_helper.to_array(tensor)) if tensor is not None else None)
    return found[0], found[1]


def _is_relu6(model: Any, clip: Any) -> bool:
    low, high = _clip_bounds(model, clip)
    return low == 0.0 and high is not None and high > 0


def clip_inputs(model: Any) -> list[str]:
    """The input tensors of the Relu6 Clips between conv pairs (whose maxima ``clip6="bounded"`` needs)."""
    return [act.input[0] for _first, _second, act in _pairs(model, "relu") if act is not None and act.op_type == "Clip"]


def _ranges(weight: Any, axis: int) -> Any:
    import numpy as np

    return np.abs(np.moveaxis(weight, axis, 0)).reshape(weight.shape[axis], -1).max(axis=1)


def equalize(model: Any, clip6: str = "bounded", iterations: int = 2,
             maxima: dict[str, Any] | None = None, margin: float = 4.0) -> list[EqualizedPair]:
    """Equalize every conv pair of ``model`` in place (fold BatchNorm first with :func:`fold_batchnorm`).

    ``iterations``: passes over the pairs (a conv in two pairs, as the second of one and the first of the
    next, moves again when its neighbour does; two passes settle a chain closely enough).
    ``maxima``: for ``clip6="bounded"``, the per-channel maximum of each Clip's input on the calibration
    data, by tensor name (:func:`clip_inputs` names them); a Clip without one is skipped.  ``margin``: how many
    times its calibration maximum a channel may reach on other data before the Clip cuts it where it did not.
    """
    import numpy as np

    maxima = maxima or {}
    pairs = [p for p in _pairs(model, "skip" if clip6 == "skip" else "relu")
             if clip6 != "bounded" or p[2] is None or p[2].op_type != "Clip" or p[2].input[0] in maxima]
    total: dict[str, Any] = {}
    before: dict[str, float] = {}
    done: dict[tuple[str, str], str] = {}
    for _ in range(max(1, iterations)):
        for first, second, act in pairs:
            w1, w2 = _array(model, first.input[1]), _array(model, second.input[1])
            channels = w1.shape[0]
            r1 = _ranges(w1, 0)
            if _attr(second, "group", 1) == 1:
                r2 = _ranges(w2, 1)
            else:                                   # depthwise: input channel i feeds outputs i*m..(i+1)*m
                r2 = np.abs(w2).reshape(channels, -1).max(axis=1)
            before.setdefault(first.name, _spread(r1))
            live = (r1 > EPS) & (r2 > EPS)
            s = np.ones(channels)
            s[live] = np.sqrt(r1[live] / r2[live])
            if clip6 == "bounded" and act is not None and act.op_type == "Clip":
                # the scale so far times this one must keep x / scale under the bound wherever x was
                high = _clip_bounds(model, act)[1] or 6.0      # a Relu6 pair has a constant high bound
                peak = np.asarray(maxima[act.input[0]], dtype=np.float64)
                wanted = total.get(first.name, np.ones(channels)) * s
                # a channel quiet on the calibration data may not be on other data: assume it reaches 1/8 of it
                floor = margin * np.maximum(peak, high / 8)
                wanted = np.where(floor <= high, np.maximum(wanted, floor / high), 1.0)
                s = wanted / total.get(first.name, np.ones(channels))
                total[first.name] = wanted
            bias = ensure_bias(model, first, channels)
            _set(model, first.input[1], w1 / s.reshape(-1, *[1] * (w1.ndim - 1)))
            _set(model, bias, _array(model, bias) / s)
            if _attr(second, "group", 1) == 1:
                _set(model, second.input[1], w2 * s.reshape(1, -1, *[1] * (w2.ndim - 2)))
            else:
                m = w2.shape[0] // channels
                _set(model, second.input[1], w2 * np.repeat(s, m).reshape(-1, *[1] * (w2.ndim - 1)))
            done.setdefault((first.name, second.name), act.op_type if act is not None else "")
            if act is not None and act.op_type == "Clip" and clip6 == "relu":
                act.op_type = "Relu"                # relu6 -> relu (see the module docstring)
                del act.input[1:]
    result = []
    for first, second, _act in pairs:
        after = _spread(_ranges(_array(model, first.input[1]), 0))
        result.append(EqualizedPair(first.name, second.name, done[(first.name, second.name)],
                                    before[first.name], after))
    return result


def _spread(ranges: Any) -> float:

    live = ranges[ranges > EPS]
    return float(live.max() / live.min()) if live.size else 1.0
