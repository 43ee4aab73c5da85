"""The last resort: the training strategies, only when no post-training candidate is light enough within
budget and the source can be trained (:mod:`onnxlite.search.last_resort`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Outcome, StageContext

if TYPE_CHECKING:
    from ..table import CandidateTable


class LastResortStage:
    name = "last_resort"
    title = "the last resort"

    def applies(self, ctx: StageContext) -> bool:
        return ctx.searching

    def run(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        from ..last_resort import last_resort

        # it asks the time budget itself, after deciding whether it is wanted: a spent budget is news only then
        found = last_resort(ctx.search, table.rows, ctx.baseline, ctx.inputs, ctx.config)
        return Outcome(found, not_started=found.cut_short)

    def not_started(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        return self.run(ctx, table)
