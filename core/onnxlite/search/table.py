"""The candidates table: every candidate judged in one ``lighten`` run, in the order it was judged.

It is the one state the stages share.  A stage adds rows only through :meth:`CandidateTable.add` (the engine's
``run`` judges them and adds them) and reads the rest; rows are never removed or reordered, so a row's place
numbers its files and the report lists them as they ran.  The figures a row carries are filled in by the
final benchmark and the choice of winner, which the engine does after every stage has returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import CandidateRow


class CandidateTable:
    """Append-only rows of candidates, and the rows settled while a batch still runs (Ctrl-C keeps those too)."""

    def __init__(self) -> None:
        self._rows: list[CandidateRow] = []
        #: rows of the batch now running, as each finishes (name: row); emptied when a new batch starts
        self.settled: dict[str, CandidateRow] = {}

    def add(self, rows: Iterable[CandidateRow]) -> None:
        self._rows.extend(rows)

    @property
    def rows(self) -> list[CandidateRow]:
        """The rows so far (a copy: adding to it does not add to the table)."""
        return list(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[CandidateRow]:
        return iter(list(self._rows))
