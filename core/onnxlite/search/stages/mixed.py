"""Mixed precision: a per-node sweep of the strategy that takes per-node schemes, then the plan it implies
judged like any candidate (:mod:`onnxlite.search.mixed_stage`), within its own share of the time budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..shares import MIXED_MIN_PROBES, MIXED_SHARE, mixed_seconds, mixed_share
from .base import Outcome, StageContext

if TYPE_CHECKING:
    from ..mixed_stage import MixedPlan
    from ..table import CandidateTable

SPENT = "the --time-budget was spent"


class MixedStage:
    name = "mixed"
    title = "mixed precision"

    def applies(self, ctx: StageContext) -> bool:
        return ctx.searching

    def run(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        from ..mixed_stage import mixed_plan_for, mixed_stage

        plan = mixed_plan_for(ctx.search.fp32, ctx.config.strategies)
        why = _does_not_fit(ctx, plan, table)
        if why is not None:
            return Outcome({"tried": False, "reason": why}, not_started=True)
        # the sweep's own clock, a share of what is left now: the search's budget is never changed
        record = mixed_stage(ctx.search, plan, ctx.config.workers, mixed_share(ctx.search.trials.budget))
        # a sweep cut at its share: said as it happened, and again in the verdict
        note = record.get("sweep", {}).get("note")
        return Outcome(record, notes=(note,) if note else ())

    def not_started(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        from ..mixed_stage import mixed_plan_for

        if mixed_plan_for(ctx.search.fp32, ctx.config.strategies).wanted:
            return Outcome({"tried": False, "reason": SPENT}, not_started=True)
        return Outcome(None)


def _does_not_fit(ctx: StageContext, plan: MixedPlan, table: CandidateTable) -> str | None:
    """Under a time budget, why mixed precision's sweep cannot start (None: it may run, within its share).

    Its probes cost about what a candidate took (the median), as many at once as candidates ran; a share
    that fits fewer than :data:`MIXED_MIN_PROBES` of them (or all of them, when there are fewer) is too small.
    """
    import statistics

    from ...jobs.candidate import default_workers

    budget = ctx.search.trials.budget
    if budget.seconds is None or not plan.wanted:
        return None
    costs = [r.quantize_seconds for r in table if r.quantize_seconds]
    if not costs:
        return None
    probes = len(plan.probes)
    parallel = ctx.config.workers or default_workers(0)
    share, each = mixed_seconds(budget), statistics.median(costs)
    fit = int(share * max(1, parallel) // max(each, 1e-3))
    if fit >= min(probes, MIXED_MIN_PROBES):
        return None
    return (f"its share of the --time-budget ({share:.0f} s, {MIXED_SHARE:.0%} of what is left) fits {fit} of its "
            f"{probes} probes ({each:.1f} s each, {parallel} at once)")
