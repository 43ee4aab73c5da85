"""``lighten``'s mixed-precision stage: each weighted node gets its own scheme, from a sweep of per-node,
per-scheme drops planned under the budget (:mod:`onnxlite.mixed_plan`), then judged like any candidate.

The strategy it plans for is the one whose spec declares ``per_node`` (:class:`onnxlite.specs.PerNodeSchemes`;
built in: ``mixed``): the search names no strategy itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..specs import QuantizerSpec
    from .context import SearchContext
    from .trials import TimeBudget

#: the most probe models the sweep runs unless the strategy is named in --strategies
MIXED_MAX_PROBES = 48
#: rounds of "judge the plan, promote its worst node"
MIXED_ROUNDS = 3


@dataclass(frozen=True)
class MixedPlan:
    """Whether the stage runs (``reason``: why not), for which strategy, over which nodes and probes."""

    spec: QuantizerSpec | None
    nodes: Mapping[str, int]
    probes: Sequence[tuple[str, str]]
    reason: str = ""

    @property
    def wanted(self) -> bool:
        return self.spec is not None and not self.reason


def per_node_spec() -> tuple[QuantizerSpec | None, str]:
    """The quantizer that takes a scheme per node, and why the stage cannot run with it ("" when it can): it and
    every strategy it composes must be available."""
    from ..registry import get_registry

    registry = get_registry()
    names = registry.names("quantizer")
    for name in names:
        spec = registry.get("quantizer", name).spec
        if spec.per_node is not None:
            missing = next((n for n in (name, *spec.per_node.composes)
                            if n not in names or not registry.get("quantizer", n).available), None)
            return spec, f"strategy {missing!r} is not available" if missing else ""
    return None, "no strategy takes a scheme per node"


def mixed_plan_for(model: Any, strategies: Sequence[str] | None) -> MixedPlan:
    """Whether the mixed-precision stage runs on ``model`` (given ``--strategies``), and why not."""
    spec, why = per_node_spec()
    named = bool(strategies) and spec is not None and spec.name in (strategies or ())
    if strategies and not named:
        return MixedPlan(None, {}, (), "not among --strategies")
    if spec is None or why:
        return MixedPlan(None, {}, (), why)
    nodes = mixed_nodes(model)
    if len(nodes) < 2:
        return MixedPlan(spec, nodes, (), "fewer than two MatMul/Gemm nodes with a constant weight: a uniform "
                                          "scheme is all there is")
    probes = mixed_probes(model, nodes)
    if len(probes) > MIXED_MAX_PROBES and not named:
        return MixedPlan(spec, nodes, probes, f"its sweep needs {len(probes)} probe models ({len(nodes)} nodes, one "
                                              f"per scheme each can take); name {spec.name} in --strategies to run it")
    return MixedPlan(spec, nodes, probes)


def mixed_probes(model: Any, nodes: Mapping[str, int]) -> list[tuple[str, str]]:
    """(node, scheme) pairs worth measuring, heaviest node first: block schemes only where MatMulNBits can take
    the node."""
    import onnx

    from .mixed_plan import LIGHTEST_FIRST, weighted_nodes

    eligible = weighted_nodes(onnx.load(str(model), load_external_data=False))
    heaviest = sorted(nodes, key=lambda n: -nodes[n])   # a sweep cut by its time share measured what weighs most
    return [(n, s) for n in heaviest for s in LIGHTEST_FIRST if s != "float" and n in eligible[s]]


def mixed_nodes(model: Any) -> dict[str, int]:
    """Weighted nodes a per-node scheme can apply to, with their weight counts."""
    import math

    import onnx

    from .mixed_plan import weighted_nodes

    proto = onnx.load(str(model), load_external_data=False)
    names = weighted_nodes(proto)["float"]
    dims = {i.name: list(i.dims) for i in proto.graph.initializer}
    return {n.name: int(math.prod(dims.get(n.input[1], [0]))) for n in proto.graph.node if n.name in names}


def mixed_stage(ctx: SearchContext, plan: MixedPlan, workers: int | None, share: TimeBudget) -> dict[str, Any]:
    """Sweep every node x scheme within its time ``share`` (:func:`onnxlite.search.shares.mixed_share`), plan
    under the budget from what was measured, then judge the plan (promoting its worst node if need be).

    Returns the stage's record (``tried``, ``sensitivity``, ``rounds``, ``sweep``: the share and what it
    measured); the plans judged are rows of the table.
    """
    from . import mixed_plan
    from .candidates import Candidate, candidate_name
    from .context import probe_drop
    from .mixed_plan import BYTES_PER_WEIGHT, LIGHTEST_FIRST
    from .shares import MIXED_SWEEP, sweep_record

    if plan.spec is None or plan.spec.per_node is None or plan.reason:
        return {"tried": False, "reason": plan.reason}
    strategy, keys = plan.spec.name, plan.spec.per_node

    def options(default: str, assign: tuple[str, ...]) -> dict[str, Any]:
        return {keys.default: default, keys.assign: assign}

    rank = ctx.primary
    probes = [Candidate(f"{strategy}[{n}={s}]", strategy, options("float", (f"{n}={s}",))) for n, s in plan.probes]
    # measured on the select part's judge: the samples confirming the plan never reach its probes; no probe
    # starts once the share is spent, and one not measured is infinitely bad (its node stays float)
    before = len(ctx.trials.ledger.trials)
    results = ctx.probe(probes, workers, MIXED_SWEEP, judge=ctx.select_judge(), until=share)
    sweep = sweep_record(share, ctx.trials.ledger.trials[before:], ctx.trials.budget.seconds is not None)
    if "note" in sweep:
        ctx.emit("note", {"message": sweep["note"]})
    sensitivity: dict[str, dict[str, float]] = {n: {} for n in plan.nodes}
    for (node, scheme), result in zip(plan.probes, results):
        sensitivity[node][scheme] = probe_drop(result, rank)
    chosen = mixed_plan.plan(sensitivity, plan.nodes, ctx.budget, LIGHTEST_FIRST, BYTES_PER_WEIGHT)
    record: dict[str, Any] = {"tried": True, "rank_metric": rank, "sensitivity": sensitivity, "rounds": [],
                              "sweep": sweep}
    for _round in range(MIXED_ROUNDS):
        if all(s == "float" for s in chosen.values()):
            break
        planned = mixed_plan.assignment_options(chosen)
        default, assign = str(planned["default"]), tuple(planned["assign"])
        # named by what it keeps apart from its default (``+float1``), not by a bare count (``+1``)
        name = candidate_name(strategy, {keys.default: default}) + mixed_plan.plan_suffix(assign)
        row = ctx.run(workers, [Candidate(name, strategy, options(default, assign))])[0]
        record["rounds"].append({"name": row.name, "status": row.status, "plan": dict(chosen),
                                 "drop": row.drops.get(rank)})
        if row.status != "rejected" or not row.over_budget:
            break
        promoted = mixed_plan.promote(chosen, sensitivity, LIGHTEST_FIRST)
        if promoted is None:
            break
        chosen = promoted
    return record
