"""What a stage of the search is: a name, whether it applies to this run, and ``run(ctx, table)``.

A stage takes the run's fixed facts (:class:`StageContext`: the search context, the config, the inputs, the
records the stages before it returned) and the candidates table, and returns a frozen :class:`Outcome`.  It
judges new candidates only through ``ctx.search.run`` (their rows join the table) and probes through
``ctx.search.probe`` (never rows).  The engine decides whether a stage starts: once the time budget is spent
it calls :meth:`Stage.not_started` instead, which says whether the stage had work to do (the verdict names
it as not started) and what record stands for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..config import LightenConfig
    from ..context import SearchContext
    from ..results import CandidateRow
    from ..setup import Inputs
    from ..table import CandidateTable


@dataclass(frozen=True)
class StageContext:
    """What every stage may read: the search context, the settings, the inputs, fp32's row, and the records
    of the stages that ran before it (by stage name; a stage that did not apply has none)."""

    search: SearchContext
    config: LightenConfig
    inputs: Inputs
    baseline: CandidateRow
    #: False when a recipe is replayed: only the stages that apply to a replay run
    searching: bool
    records: Mapping[str, Any] = field(default_factory=dict)

    @property
    def objective(self) -> str:
        return self.config.objective or "latency"


@dataclass(frozen=True)
class Outcome:
    """What a stage returns: its record (for the report and the later stages), whether it was wanted but
    did not start (named in the verdict's "stages not started"), and notes for the verdict."""

    record: Any = None
    not_started: bool = False
    notes: tuple[str, ...] = ()


class Stage(Protocol):
    """One step of the search after the candidates are judged (:data:`onnxlite.search.engine.STAGES`)."""

    #: the key of its record (``ctx.records``, the report's evidence)
    name: str
    #: how the verdict names it when it did not start
    title: str

    def applies(self, ctx: StageContext) -> bool:
        """Whether this run has this stage at all (a recipe replay, ``partial=False``...)."""
        ...

    def run(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        ...

    def not_started(self, ctx: StageContext, table: CandidateTable) -> Outcome:
        """The outcome when the time budget was spent before the stage could start."""
        ...
