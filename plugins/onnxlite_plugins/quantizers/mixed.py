"""``mixed``: a scheme per layer, composed from the other strategies.

Each weighted node gets its own scheme (``assign=NODE=SCHEME``, repeatable;
``default`` for the rest):

========  ==========================================================  ===================
scheme    what                                                        by
========  ==========================================================  ===================
block4    4-bit weight blocks of 32, activations float (MatMulNBits)  ``weightonly``
block8    8-bit weight blocks of 128, activations float (MatMulNBits)  ``weightonly``
int8      int8 weights per channel, activations at run time           ``dynamic``
fp16      float16 weights and compute, Casts at the node's edges      ``fp16``
float     untouched                                                   -
========  ==========================================================  ===================

onnxruntime does every step; this strategy only runs the registered
strategies one after another, each with every node outside its own set in
its ``exclude`` option, block schemes first (they turn MatMuls into
MatMulNBits, which the int8 step then leaves alone).  fp16 comes last and is
done here: the node's weight (and Gemm bias) stored as float16, a Cast to
float16 on its input and one back on its output.  onnxruntime's float16
converter cannot do one node: with every other node blocked it still rounds
every tensor between blocked nodes through float16.  fp16 keeps a weight whose
range int8 scales cannot share (up to 65504) at half of float's bytes; on the
CPU its Casts cost time.  ``lighten`` builds the
assignment from a per-node sensitivity sweep under the accuracy budget; by
hand it reads ``--option assign=/encoder/layer.0/MatMul=float``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnxlite import Option, PerNodeSchemes, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl
from onnxlite.search.mixed_plan import BYTES_PER_WEIGHT, LIGHTEST_FIRST, weighted_nodes  # noqa: F401  (re-exported)

#: scheme -> (strategy, its options); the order is the order the steps run in
SCHEMES: dict[str, tuple[str, dict[str, Any]] | None] = {
    "block4": ("weightonly", {"bits": 4, "block_size": 32}),
    "block8": ("weightonly", {"bits": 8, "block_size": 128}),
    "int8": ("dynamic", {}),
    "fp16": ("fp16", {}),       # done by to_fp16 below, not by the fp16 strategy
    "float": None,
}
def to_fp16(model: Path, nodes: set[str], output: Path) -> int:
    """``nodes`` compute in float16 between two Casts, their constant weights stored as float16."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    proto = onnx.load(str(model))
    inits = {i.name: i for i in proto.graph.initializer}
    ordered, done = [], 0
    for node in proto.graph.node:
        if node.name not in nodes:
            ordered.append(node)
            continue
        for slot, name in enumerate(node.input):
            if name in inits and inits[name].data_type == TensorProto.FLOAT:
                half = f"{name}_fp16_{node.name}"
                values = numpy_helper.to_array(inits[name])
                proto.graph.initializer.append(numpy_helper.from_array(
                    np.clip(values, -65504, 65504).astype(np.float16), half))
                node.input[slot] = half
            elif name:
                cast = f"{name}_to_fp16_{node.name}"
                ordered.append(helper.make_node("Cast", [name], [cast], to=TensorProto.FLOAT16,
                                                name=f"{node.name}/fp16_in{slot}"))
                node.input[slot] = cast
        out = node.output[0]
        node.output[0] = f"{out}_fp16"
        ordered += [node, helper.make_node("Cast", [node.output[0]], [out], to=TensorProto.FLOAT,
                                           name=f"{node.name}/fp16_out")]
        done += 1
    del proto.graph.node[:]
    proto.graph.node.extend(ordered)
    used = {i for n in proto.graph.node for i in n.input}
    keep = [i for i in proto.graph.initializer if i.name in used]   # weights now only read as float16
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(keep)
    onnx.save(proto, str(output))
    return done


def _escape(name: str) -> str:
    """A node name as a glob pattern that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def parse_assignment(items: Sequence[str], default: str, nodes: set[str]) -> dict[str, str]:
    """``NODE=SCHEME`` items (the last ``=`` splits, node names may hold one) -> a scheme for every node."""
    plan = {n: default for n in nodes}
    for item in items:
        node, eq, scheme = str(item).rpartition("=")
        if not eq or not node:
            raise UsageError(f"--option assign={item}: expected NODE=SCHEME ({', '.join(SCHEMES)})")
        if scheme not in SCHEMES:
            raise UsageError(f"--option assign={item}: unknown scheme {scheme!r} (choose from {', '.join(SCHEMES)})")
        if node not in nodes:
            sample = ", ".join(sorted(nodes)[:4])
            raise UsageError(f"--option assign={item}: no weighted node {node!r} in the model (names look like: "
                             f"{sample})")
        plan[node] = scheme
    return plan


class MixedQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import onnx

        from onnxlite.registry import get_registry
        from onnxlite.specs import parse_spec_options

        proto = onnx.load(str(model), load_external_data=False)
        eligible = weighted_nodes(proto)
        plan = parse_assignment(options["assign"], str(options["default"]), eligible["float"])
        for node, scheme in plan.items():
            if node not in eligible[scheme]:
                plan[node] = "int8" if scheme.startswith("block") and node in eligible["int8"] else "float"
        registry = get_registry()
        current = Path(model)
        notes, steps = [], {}
        for scheme, how in SCHEMES.items():
            chosen = sorted(n for n, s in plan.items() if s == scheme)
            if how is None or not chosen:
                continue
            strategy, extra = how
            step = Path(context.workdir) / f"mixed.{scheme}.onnx"
            if scheme == "fp16":
                to_fp16(current, set(chosen), step)
                current, steps[scheme] = step, len(chosen)
                notes.append(f"fp16: {len(chosen)} node(s) (float16 weights and compute between Casts)")
                continue
            entry = registry.get("quantizer", strategy)
            # what an earlier step rewrote (MatMul -> MatMulNBits) is no longer this step's to exclude
            here = weighted_nodes(onnx.load(str(current), load_external_data=False))[scheme]
            others = [_escape(n) for n in sorted(here) if n not in chosen]
            values = parse_spec_options(entry.spec, {**extra, "exclude": tuple(others)})
            entry.create().quantize(current, step, values, context)
            current = step
            steps[scheme] = len(chosen)
            notes.append(f"{scheme}: {len(chosen)} node(s) ({strategy})")
        kept = sorted(n for n, s in plan.items() if s == "float")
        if kept:
            notes.append(f"float: {len(kept)} node(s)")
        if current == Path(model):
            raise UsageError(f"{model}: mixed assigns every node to float; nothing to quantize")
        written = onnx.load(str(current))
        onnx.save(written, str(output))
        return QuantizeOutcome(excluded_nodes=kept, notes=notes,
                               details={"schemes": steps, "assign": {n: s for n, s in sorted(plan.items())}})


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="mixed",
            description="A scheme per layer (block4, block8, int8, fp16 or float), composed from weightonly and "
                        "dynamic; "
                        "lighten builds the assignment from per-node sensitivity under the budget.",
            factory=MixedQuantizer,
            requires=("onnxruntime", "onnx"),
            install="onnxlite[cpu]",
            applies_to=("matmul", "transformer"),
            needs_calibration=False,
            options=(
                Option("assign", str, (), "NODE=SCHEME, repeatable (schemes: block4, block8, int8, fp16, float).",
                       multiple=True),
                Option("default", str, "int8", "Scheme for the nodes not in assign.", choices=tuple(SCHEMES)),
            ),
            # lighten's mixed-precision stage plans the assignment through these options (from weightonly's and
            # dynamic's schemes, so both must be available)
            per_node=PerNodeSchemes(assign="assign", default="default", composes=("weightonly", "dynamic")),
            # lighten builds assignments itself; a fixed grid point would only duplicate dynamic
            skip_reason=lambda model: "built by lighten's mixed-precision stage from a per-node sensitivity sweep",
        )
    ]
