"""The verdict of ``lighten``: one line rendered from the search's records once every stage has returned.

Its head says what won and by how much (or why nothing did); then, in order, what it holds for: the ISA it
was judged and timed on, what the export and the stages noted, what the budget's worst case promises, what the
cache and the time budget did.  Nothing is appended to it after the result is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .text import size_change, speed_change


class Timed(Protocol):
    """What the verdict reads of a row: its name, its size and its p50."""

    name: str
    size_bytes: int | None

    @property
    def p50(self) -> float: ...


def ratio_text(before: float | None, after: float | None) -> str:
    """``3.15x smaller`` or ``1.01x larger`` (never "0.99x smaller")."""
    return size_change(before, after)


def speed_text(before: float, after: float) -> str:
    """``2.10x faster than``, ``1.23x slower than`` (never "0.81x faster") or ``the same speed as``."""
    change = speed_change(before, after)
    return "the same speed as" if change == "same speed" else change + " than"


@dataclass(frozen=True)
class WinnerFigures:
    """The figures the head of a won search names: the drop on the primary metric against its budget, and
    the winner's quick-timing ratio over fp32 (None: not quick-timed)."""

    primary: str
    drop: float
    budget: float
    quick_ratio: float | None = None


def winner_head(winner: Timed, baseline: Timed, figures: WinnerFigures) -> str:
    """``winner: NAME: 3.9x smaller, 1.2x faster than fp32 (1.25x in the quick timing), acc drop 0.001 ...``"""
    early = figures.quick_ratio
    said = f" ({1 / early:.2f}x in the quick timing)" if early else ""
    return (f"winner: {winner.name}: {ratio_text(baseline.size_bytes, winner.size_bytes)}, "
            f"{speed_text(baseline.p50, winner.p50)} fp32{said}, {figures.primary} drop {figures.drop:.4g} "
            f"(budget {figures.budget:.4g})")


@dataclass(frozen=True)
class Verdict:
    """The head and the notes that follow it, in the order they are said."""

    head: str
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        return self.head + "".join(f"; {note}" for note in self.notes)

    def with_notes(self, notes: Sequence[str]) -> Verdict:
        return Verdict(self.head, (*self.notes, *notes))
