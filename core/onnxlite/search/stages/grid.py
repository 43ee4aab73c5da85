"""The grid stage: decide each strategy's option grid on the select part (:mod:`onnxlite.search.grids`).

It runs no model, so it runs even once the time budget is spent: later stages and the report read its choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Outcome, StageContext

if TYPE_CHECKING:
    from ..table import CandidateTable


class GridStage:
    name = "grids"
    title = "the option grids"

    def applies(self, ctx: StageContext) -> bool:
        return ctx.searching

    def run(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        from ..grids import select_on_grids

        return Outcome(select_on_grids(table.rows, ctx.search.rank))

    def not_started(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        return self.run(ctx, table)
