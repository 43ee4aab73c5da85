"""Built-in strategy ``qat``: quantization-aware training with distillation, for PyTorch sources, on the CPU.

When post-training int8 loses too much, the weights themselves can learn to
live on the int8 grid.  This strategy fine-tunes a copy of the PyTorch source
(``QuantizeContext.source``: ``onnxlite.quantize(..., source_model=module)``) with
fake quantization that mimics what ``static`` then stores in onnxruntime's
scheme: symmetric per-output-channel int8 weights (``scale = max|W_c| / 127``)
and asymmetric per-tensor uint8 activations at every Conv / Linear input, their
ranges observed on the calibration data (MinMax) before training.  Rounding
passes gradients straight through.

The teacher is the fp32 source itself: the loss is the mean squared error
between the student's outputs and the teacher's, so no labels are needed.
Training runs for at most ``steps`` steps on the calibration samples, with
flips and shifts of image inputs as augmentation; ``holdout`` of the
calibration samples never train and decide an early stop: training stops once
the fake-quantized student's top-1 agreement with the teacher on them is within
``max_drop``.  The trained float weights are exported to ONNX and quantized by
``static`` (through the registry, as any plugin would), so the output is a QDQ
model that onnxruntime runs as int8.  ``details.qat`` holds the loss curve.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeContext, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .common import CalibrationReader

QMAX_W = 127

OPTIONS = (
    Option("steps", int, 150, "most training steps (about 1-3 s each for a 224x224 mobile CNN on 2 cores)"),
    Option("batch", int, 8, "samples per training step"),
    Option("lr", float, 1e-4, "Adam learning rate"),
    Option("max_drop", float, 0.02, "stop early once the held-out top-1 agreement drop is within this"),
    Option("holdout", float, 0.25, "share of the calibration samples kept out of training for the early stop"),
    Option("check_every", int, 25, "steps between held-out checks"),
    Option("augment", bool, True, "random flips and shifts of image inputs"),
    Option("format", str, "QDQ", "as static's", choices=("QDQ", "QOperator")),
    Option("calibration_samples", int, 256, "as static's"),
)


def _fake_weight(weight: Any) -> Any:
    import torch

    dims = tuple(range(1, weight.dim()))
    scale = weight.detach().abs().amax(dim=dims, keepdim=True).clamp(min=1e-12) / QMAX_W
    q = torch.clamp(torch.round(weight / scale), -QMAX_W, QMAX_W) * scale
    return weight + (q - weight).detach()


def _fake_activation(x: Any, low: float, high: float) -> Any:
    import torch

    low, high = min(low, 0.0), max(high, 0.0)
    scale = max(high - low, 1e-12) / 255
    zero = round(-low / scale)
    q = (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale
    return x + (q - x).detach()


class FakeQuant:
    """Forward pre-hooks and weight parametrizations on every Conv/Linear of a module; ``observe`` first."""

    def __init__(self, module: Any) -> None:
        import torch

        self.layers = [m for m in module.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d,
                                                                        torch.nn.Conv3d, torch.nn.Linear))]
        self.ranges: dict[int, list[float]] = {}
        self.observing = True
        self.handles = [m.register_forward_pre_hook(self._hook(i)) for i, m in enumerate(self.layers)]

    def _hook(self, index: int) -> Any:
        def hook(_module: Any, args: tuple[Any, ...]) -> Any:
            x = args[0]
            if self.observing:
                seen = self.ranges.setdefault(index, [0.0, 0.0])
                seen[0], seen[1] = min(seen[0], float(x.detach().min())), max(seen[1], float(x.detach().max()))
                return None
            low, high = self.ranges.get(index, [0.0, 0.0])
            return (_fake_activation(x, low, high), *args[1:])
        return hook

    def quantize_weights(self) -> None:
        import torch
        from torch.nn.utils import parametrize

        class Weight(torch.nn.Module):
            def forward(self, w: Any) -> Any:
                return _fake_weight(w)

        for m in self.layers:
            parametrize.register_parametrization(m, "weight", Weight())

    def remove(self) -> None:
        from torch.nn.utils import parametrize

        for handle in self.handles:
            handle.remove()
        for m in self.layers:
            if parametrize.is_parametrized(m, "weight"):
                parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)


def _augment(x: Any, generator: Any) -> Any:
    import torch

    if x.dim() != 4:
        return x
    if torch.rand(1, generator=generator).item() < 0.5:
        x = torch.flip(x, dims=(3,))
    dy, dx = (int(v) for v in torch.randint(-8, 9, (2,), generator=generator))
    return torch.roll(x, shifts=(dy, dx), dims=(2, 3))


def _first(output: Any) -> Any:
    if isinstance(output, (tuple, list)):
        return output[0]
    if isinstance(output, dict):
        return next(iter(output.values()))
    return output


def train(student: Any, teacher: Any, train_x: Any, held_x: Any, opts: Mapping[str, Any],
          say: Any = None) -> dict[str, Any]:
    """Fake-quantized distillation of ``student`` towards ``teacher``, in place; returns the curve."""
    import torch

    generator = torch.Generator().manual_seed(0)
    fake = FakeQuant(student)
    with torch.no_grad():
        teacher_held = _first(teacher(held_x)) if len(held_x) else None
        for start in range(0, len(train_x), 8):
            student(train_x[start:start + 8])                      # activation ranges: MinMax, as static
    fake.observing = False
    fake.quantize_weights()
    optim = torch.optim.Adam([p for p in student.parameters() if p.requires_grad], lr=float(opts["lr"]))
    losses: list[float] = []
    checks: list[dict[str, float]] = []
    stopped = False

    def held_drop() -> float:
        assert teacher_held is not None     # checked only with held-out samples
        with torch.no_grad():
            got = _first(student(held_x))
        return 1.0 - float((got.argmax(-1) == teacher_held.argmax(-1)).float().mean())

    if teacher_held is not None:
        checks.append({"step": 0, "heldout_drop": held_drop()})
        stopped = checks[-1]["heldout_drop"] <= float(opts["max_drop"])
    step = 0
    while not stopped and step < int(opts["steps"]):
        pick = torch.randint(0, len(train_x), (min(int(opts["batch"]), len(train_x)),), generator=generator)
        x = train_x[pick]
        if opts["augment"]:
            x = _augment(x, generator)
        with torch.no_grad():
            target = _first(teacher(x))
        loss = torch.mean((_first(student(x)) - target) ** 2)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
        step += 1
        if teacher_held is not None and step % max(1, int(opts["check_every"])) == 0:
            checks.append({"step": step, "heldout_drop": held_drop()})
            if say:
                say(f"qat: step {step} of {opts['steps']}, loss {losses[-1]:.4g}, held-out drop "
                    f"{checks[-1]['heldout_drop']:.3f}")
            stopped = checks[-1]["heldout_drop"] <= float(opts["max_drop"])
    fake.remove()
    return {"steps": step, "loss": losses, "heldout": checks, "stopped_early": stopped and step < int(opts["steps"]),
            "train_samples": int(len(train_x)), "heldout_samples": int(len(held_x))}


class QatQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any],
                 context: QuantizeContext) -> QuantizeOutcome:
        import importlib.util

        opts = {o.name: o.default for o in OPTIONS} | dict(options)
        if importlib.util.find_spec("torch") is None:
            raise UsageError("qat needs torch: pip install 'onnxlite[torch]'")
        import numpy as np
        import onnx
        import torch

        from onnxlite.registry import get_registry
        from onnxlite.specs import parse_spec_options

        if context.calibration is None:
            raise UsageError("qat needs calibration data: --calibration PATH")
        if not isinstance(context.source_model, torch.nn.Module):
            raise UsageError("qat trains the PyTorch source: call onnxlite.quantize(..., source_model=module) with the "
                             "torch.nn.Module the ONNX model was exported from")
        if int(opts["steps"]) < 1 or int(opts["batch"]) < 1 or not 0 <= float(opts["holdout"]) < 1:
            raise UsageError("qat: steps and batch must be at least 1, holdout in [0, 1)")
        proto = onnx.load(str(model), load_external_data=False)
        inputs = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
        if len(inputs) != 1:
            raise UsageError(f"qat: models with one input only (this one has {len(inputs)})")
        feeds = list(CalibrationReader(context.calibration, 1, int(opts["calibration_samples"]), names=inputs))
        x = torch.from_numpy(np.concatenate([f[inputs[0]] for f in feeds]).astype(np.float32))
        held = int(round(len(x) * float(opts["holdout"])))
        if len(x) - held < 1:
            raise UsageError("qat: the calibration data has too few samples to train on")
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        held_x, train_x = x[order[:held]], x[order[held:]]
        teacher = context.source_model.eval()
        student = copy.deepcopy(teacher).eval()     # eval: BatchNorm keeps its statistics, dropout is off
        curve = train(student, teacher, train_x, held_x, opts)
        work = Path(context.workdir) if context.workdir else Path(output).parent
        trained = work / "qat.float.onnx"
        outputs = [o.name for o in proto.graph.output]
        torch.onnx.export(student, (x[:1],), str(trained), input_names=inputs, output_names=outputs,
                          dynamic_axes={n: {0: "batch"} for n in inputs + outputs}, opset_version=17, dynamo=False)
        static = get_registry().get("quantizer", "static")
        values = parse_spec_options(static.spec, {"format": opts["format"], "per_channel": True,
                                                  "calibration_samples": opts["calibration_samples"]})
        outcome = static.create().quantize(trained, output, values, context) or QuantizeOutcome()
        outcome.details = {**outcome.details, "qat": curve}
        last = curve["heldout"][-1]["heldout_drop"] if curve["heldout"] else None
        outcome.notes = [f"QAT: {curve['steps']} step(s) on {curve['train_samples']} samples"
                         + (f", held-out top-1 drop {last:.3f} on {curve['heldout_samples']} samples"
                            + (" (stopped early: within budget)" if curve["stopped_early"] else "")
                            if last is not None else "")] + list(outcome.notes)
        return outcome


@hookimpl
def register_quantizers():
    return [QuantizerSpec(
        name="qat",
        description="quantization-aware training with distillation from the PyTorch source (fake int8 as "
                    "onnxruntime stores it, CPU, bounded steps), then static QDQ int8",
        factory=QatQuantizer,
        requires=("onnxruntime", "onnx", "torch"),
        install="onnxlite[cpu,torch]",
        options=OPTIONS,
        needs_calibration=True,
        applies_to=("conv",),
        avoid=("transformer",),
        # needs_source: a search's grid leaves it out, named or not, and runs it only as its last resort, with
        # the source at hand (onnxlite.search.last_resort; docs/quantize.md)
        needs_source=("pytorch",),
        output_format=lambda options: "qoperator" if str(options.get("format")).lower() == "qoperator" else "qdq",
    )]
