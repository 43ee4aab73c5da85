"""The partial fallback: repair an over-budget candidate by keeping its worst nodes in float
(:mod:`onnxlite.search.partial`), from bases the quick timing found fast enough on this CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Outcome, StageContext

if TYPE_CHECKING:
    from ..fallback_rule import Fast
    from ..table import CandidateTable


class FallbackStage:
    name = "partial"
    title = "the partial fallback"

    def applies(self, ctx: StageContext) -> bool:
        return ctx.searching and ctx.config.partial

    def run(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        from ..partial import fallback

        return Outcome(fallback(ctx.search, table.rows, _fast(ctx), ctx.config.max_float_nodes, ctx.config.workers))

    def not_started(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        # news only when the fallback would have had a base to repair
        from ..partial import can_exclude, fallback_bases

        search = ctx.search
        bases, _ = fallback_bases(table.rows, search.primary, search.budget, can_exclude, search.rank, _fast(ctx))
        return Outcome(None, not_started=bool(bases))


def _fast(ctx: StageContext) -> Fast:
    """Which rows may be a base: those the quick timing did not find slower than the objective allows."""
    from ..quick import fast_enough

    return fast_enough(ctx.records.get("quick"), ctx.objective)
