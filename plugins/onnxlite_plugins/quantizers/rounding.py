"""Choosing int8 weights better than round-to-nearest: AdaRound and bias correction, on a conv's calibration inputs.

Both work on onnxruntime's own weight grid: symmetric per-output-channel int8,
``scale = max|W_c| / 127`` (``compute_scale_zp`` with ``qmin, qmax = -127, 127``).
The chosen weights are written back into the float model already on that grid
(``W' = q * scale``), so ``static`` quantizes them to exactly ``q``: the
channel's largest weight keeps its round-to-nearest value, so the scale is the
same.

- **AdaRound** (Nagel et al., 2020, arXiv:2004.10568) learns, per weight,
  whether to round down or up: ``W~ = s * (floor(W / s) + h(V))`` with the
  rectified sigmoid ``h``, minimising ``||conv(X, W~) - conv(X, W)||^2`` on the
  layer's calibration inputs X plus a regulariser that pushes ``h`` to 0 or 1
  (its exponent annealed from 20 to 2).  torch does the optimisation (imported
  here, lazily); the source framework is not needed.
- **Bias correction** (Nagel et al., 2019, section 4.2) subtracts the expected
  output shift the rounding causes, ``E[conv(x, W' - W)]``, from the bias: per
  output channel ``sum((W' - W) * E[x])`` with the per-channel input means of
  the calibration data (padding ignored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

QMAX = 127
ZETA, GAMMA = 1.1, -0.1          # the rectified sigmoid's stretch (AdaRound, eq. 23)


@dataclass(frozen=True)
class LayerRounding:
    """What the rounding did to one conv: its output error (MSE on the calibration inputs) before and after."""

    node: str
    nearest_error: float
    chosen_error: float
    flipped: int            # weights rounded the other way than to nearest


def weight_scale(weight: Any) -> Any:
    """onnxruntime's symmetric per-output-channel int8 scale for ``weight`` (axis 0), shaped to broadcast."""
    import numpy as np

    absmax = np.abs(weight).reshape(weight.shape[0], -1).max(axis=1)
    scale = np.where(absmax > 0, absmax / QMAX, 1.0)
    return scale.reshape(-1, *[1] * (weight.ndim - 1))


def nearest(weight: Any) -> Any:
    """The integer weights round-to-nearest gives (what ``static`` would store)."""
    import numpy as np

    return np.clip(np.round(weight / weight_scale(weight)), -QMAX, QMAX)


def conv_args(node: Any) -> dict[str, Any]:
    """torch.nn.functional.conv2d keyword arguments of an ONNX Conv (symmetric pads only)."""
    attrs: dict[str, Any] = {a.name: list(a.ints) if a.ints else a.i for a in node.attribute}
    pads = attrs.get("pads", [0, 0, 0, 0])
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", 0) or pads[:2] != pads[2:]:
        raise ValueError("asymmetric or automatic padding")
    return {"stride": tuple(attrs.get("strides", [1, 1])), "padding": tuple(pads[:2]),
            "dilation": tuple(attrs.get("dilations", [1, 1])), "groups": int(attrs.get("group", 1))}


def layer_error(inputs: Any, weight: Any, chosen: Any, args: Mapping[str, Any]) -> float:
    """MSE between the conv's output with ``chosen`` weights and with ``weight``, on ``inputs`` (torch, no grad)."""
    import torch

    with torch.no_grad():
        x = torch.from_numpy(inputs).float()
        want = torch.nn.functional.conv2d(x, torch.from_numpy(weight).float(), **args)
        got = torch.nn.functional.conv2d(x, torch.from_numpy(chosen).float(), **args)
        return float(torch.mean((got - want) ** 2))


def adaround(inputs: Any, weight: Any, args: Mapping[str, Any], steps: int = 300, batch: int = 4,
             reg: float = 1.0, lr: float = 0.05, seed: int = 0, crop: int = 32) -> Any:
    """Integer weights (float array of ints in [-127, 127]) learned on ``inputs`` (N x C x H x W), AdaRound.

    Each step fits ``batch`` random ``crop`` x ``crop`` patches of the inputs (target and candidate on the
    same patch): a 112x112 feature map costs a twelfth as much per step, and the weights see more places.
    """
    import numpy as np
    import torch

    torch.manual_seed(seed)
    scale = weight_scale(weight)
    base = np.floor(weight / scale)
    rest = weight / scale - base
    s_t, base_t = torch.from_numpy(scale).float(), torch.from_numpy(base).float()
    w_t = torch.from_numpy(weight).float()
    # V such that h(V) is the fractional part: rounding starts where the float weight is
    start = np.clip((rest - GAMMA) / (ZETA - GAMMA), 1e-4, 1 - 1e-4)
    v = torch.nn.Parameter(torch.from_numpy(np.log(start / (1 - start))).float())
    optim = torch.optim.Adam([v], lr=lr)
    x_all = torch.from_numpy(inputs).float()
    with torch.no_grad():
        target_all = torch.nn.functional.conv2d(x_all, w_t, **args)
        # the regulariser is weighed against round-to-nearest's own error, so one ``reg`` suits every layer
        reference = float(torch.mean((torch.nn.functional.conv2d(
            x_all, s_t * torch.from_numpy(np.clip(np.round(weight / scale), -QMAX, QMAX)).float(), **args)
            - target_all) ** 2)) or 1e-12
    warmup = steps // 5

    def h(p: Any) -> Any:
        return torch.clamp(torch.sigmoid(p) * (ZETA - GAMMA) + GAMMA, 0, 1)

    height, width = x_all.shape[2], x_all.shape[3]
    for step in range(steps):
        pick = torch.randint(0, x_all.shape[0], (min(batch, x_all.shape[0]),))
        soft = s_t * torch.clamp(base_t + h(v), -QMAX, QMAX)
        if height > crop or width > crop:
            top = int(torch.randint(0, max(1, height - crop + 1), (1,)))
            left = int(torch.randint(0, max(1, width - crop + 1), (1,)))
            x = x_all[pick][:, :, top:top + crop, left:left + crop]
            with torch.no_grad():
                target = torch.nn.functional.conv2d(x, w_t, **args)
        else:
            x, target = x_all[pick], target_all[pick]
        loss = torch.mean((torch.nn.functional.conv2d(x, soft, **args) - target) ** 2)
        if step >= warmup:
            beta = 20 - (20 - 2) * (step - warmup) / max(1, steps - warmup)
            loss = loss + reg * reference * torch.mean(1 - torch.abs(2 * h(v) - 1) ** beta)
        optim.zero_grad()
        loss.backward()
        optim.step()
    with torch.no_grad():
        chosen = np.clip(base + (h(v).numpy() >= 0.5), -QMAX, QMAX)
    # the channel's largest weight keeps its nearest value, so onnxruntime computes the same scale
    flat_w, flat_c = weight.reshape(weight.shape[0], -1), chosen.reshape(weight.shape[0], -1)
    top = np.abs(flat_w).argmax(axis=1)
    rows = np.arange(weight.shape[0])
    flat_c[rows, top] = np.clip(np.round(flat_w[rows, top] / scale.reshape(-1)), -QMAX, QMAX)
    return flat_c.reshape(weight.shape)


def bias_shift(weight: Any, chosen: Any, input_mean: Any, groups: int) -> Any:
    """Per output channel, the expected shift ``sum((W' - W) * E[x])`` that rounding to ``chosen`` adds."""
    import numpy as np

    delta = (chosen - weight).reshape(weight.shape[0], weight.shape[1], -1).sum(axis=2)     # C_out x C_in/g
    per_group = weight.shape[0] // groups
    means = input_mean.reshape(groups, -1)                                                   # g x C_in/g
    return np.einsum("oc,oc->o", delta, np.repeat(means, per_group, axis=0))


def collect(model: Any, tensors: Sequence[str], feeds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The values of ``tensors`` (samples concatenated on axis 0) on ``feeds``: one onnxruntime run per feed
    of the model with those tensors added as outputs."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    present = {o.name for o in probe.graph.output}
    for tensor in sorted(set(tensors) - present):
        probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(tensor))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {i.name for i in session.get_inputs()}
    collected: dict[str, list[Any]] = {t: [] for t in set(tensors)}
    for feed in feeds:
        values = dict(zip(names, session.run(None, {k: v for k, v in feed.items() if k in inputs})))
        for tensor in collected:
            collected[tensor].append(values[tensor])
    return {tensor: np.concatenate(parts) for tensor, parts in collected.items()}


def conv_inputs(model: Any, nodes: Sequence[Any], feeds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each conv's input on ``feeds``, by node name (:func:`collect`)."""
    found = collect(model, [n.input[0] for n in nodes], feeds)
    return {n.name: found[n.input[0]] for n in nodes}
