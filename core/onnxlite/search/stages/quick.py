"""The quick timing: every judged candidate timed briefly against fp32 (:mod:`onnxlite.search.quick`), so the
repairs start from bases that are fast on this CPU and the final benchmark times only the contenders."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Outcome, StageContext

if TYPE_CHECKING:
    from ..table import CandidateTable


class QuickStage:
    name = "quick"
    title = "the quick timing"

    def applies(self, ctx: StageContext) -> bool:
        return ctx.searching

    def run(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        from ..quick import quick_times

        return Outcome(quick_times(ctx.search, table.rows))

    def not_started(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        # an empty timing (batch 0): the later stages then rank bases by size alone; not news for the verdict
        from ..quick import QuickTimes

        return Outcome(QuickTimes())
