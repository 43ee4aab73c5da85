"""Mixed precision: a scheme per node, planned from measured per-node sensitivity under the budget.

The sweep measures, for every weighted node and every scheme, the drop of a
model in which *only that node* takes that scheme (the ``mixed`` strategy with
``default=float``).  The planner then treats drops as additive, which they are
to first order for small errors:

1. each node starts at the lightest scheme whose own drop fits the budget
   (float when none does);
2. while the predicted total is over ``margin * budget``, the one change of one
   node to a heavier scheme that removes the most drop per byte added is made.

The plan is only a proposal: ``lighten`` quantizes it and judges it like any
candidate, and when the real drop is over budget, the node whose measured drop
is largest moves one scheme heavier and the plan is judged again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: bytes per weight each scheme stores (scales included, roughly), for planning sizes
BYTES_PER_WEIGHT = {"block4": 0.5 + 4 / 32, "block8": 1 + 4 / 128, "int8": 1.0, "fp16": 2.0, "float": 4.0}
#: lightest first: the order a planner tries schemes in
LIGHTEST_FIRST = ("block4", "block8", "int8", "fp16", "float")


def weighted_nodes(proto: Any) -> dict[str, set[str]]:
    """Node names each scheme's strategy can take: MatMul with a constant 2-D weight (blocks), MatMul/Gemm (int8,
    fp16)."""
    inits = {i.name: len(i.dims) for i in proto.graph.initializer}
    blocks = {n.name for n in proto.graph.node if n.op_type == "MatMul" and n.name and len(n.input) > 1
              and inits.get(n.input[1]) == 2}
    int8 = {n.name for n in proto.graph.node if n.op_type in ("MatMul", "Gemm") and n.name and len(n.input) > 1
            and n.input[1] in inits}
    return {"block4": blocks, "block8": blocks, "int8": int8, "fp16": blocks | int8, "float": blocks | int8}


#: plan for this share of the budget: the sum of single-node drops underestimates interactions
MARGIN = 0.7


def plan(sensitivity: Mapping[str, Mapping[str, float]], weights: Mapping[str, int], budget: float,
         schemes: Sequence[str], bytes_per_weight: Mapping[str, float], margin: float = MARGIN) -> dict[str, str]:
    """A scheme per node.  ``sensitivity[node][scheme]`` is that node's measured drop (float: 0).

    ``schemes`` are ordered lightest first and must end with ``"float"``.
    A missing or non-finite drop counts as unusable.
    """
    def drop(node: str, scheme: str) -> float:
        if scheme == "float":
            return 0.0
        value = sensitivity.get(node, {}).get(scheme)
        return value if value is not None and math.isfinite(value) else math.inf

    def cost(node: str, scheme: str) -> float:
        return weights.get(node, 0) * bytes_per_weight[scheme]

    chosen: dict[str, str] = {}
    for node in sensitivity:
        chosen[node] = next((s for s in schemes if drop(node, s) <= budget), "float")
    target = margin * budget
    while sum(drop(n, s) for n, s in chosen.items()) > target:
        best, best_gain = None, 0.0
        for node, current in chosen.items():
            for heavier in schemes[schemes.index(current) + 1:]:
                saved = drop(node, current) - drop(node, heavier)
                if saved <= 0:
                    continue
                added = max(1e-9, cost(node, heavier) - cost(node, current))
                gain = saved / added if math.isfinite(saved) else math.inf
                if best is None or gain > best_gain:
                    best, best_gain = (node, heavier), gain
        if best is None:
            break
        chosen[best[0]] = best[1]
    return chosen


def promote(chosen: Mapping[str, str], sensitivity: Mapping[str, Mapping[str, float]],
            schemes: Sequence[str]) -> dict[str, str] | None:
    """The plan with its worst non-float node one scheme heavier (None when every node is float)."""
    def measured(node: str) -> float:
        value = sensitivity.get(node, {}).get(chosen[node], math.inf)
        return value if math.isfinite(value) else math.inf

    movable = [n for n, s in chosen.items() if s != "float"]
    if not movable:
        return None
    worst = max(movable, key=measured)
    out = dict(chosen)
    out[worst] = schemes[schemes.index(chosen[worst]) + 1]
    return out


def plan_suffix(assign: Sequence[str]) -> str:
    """What a plan keeps apart from its default, for its candidate name: ``+float1`` (one node left in float, as
    the partial fallback names it), ``+fp16x2`` (two nodes in fp16); empty when every node takes the default."""
    from collections import Counter

    counts = Counter(item.rsplit("=", 1)[1] for item in assign)
    return "".join(f"+float{n}" if scheme == "float" else f"+{scheme}x{n}"
                   for scheme, n in sorted(counts.items(), key=lambda kv: LIGHTEST_FIRST.index(kv[0])
                                           if kv[0] in LIGHTEST_FIRST else len(LIGHTEST_FIRST)))


def assignment_options(chosen: Mapping[str, str]) -> dict[str, Any]:
    """``mixed`` options for a plan: the most common scheme as ``default``, the rest as ``assign`` items."""
    from collections import Counter

    counts = Counter(chosen.values())
    default = counts.most_common(1)[0][0] if counts else "float"
    assign = tuple(f"{n}={s}" for n, s in sorted(chosen.items()) if s != default)
    return {"default": default, "assign": assign}
