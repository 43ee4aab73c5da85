"""The fallback rule: which over-budget candidate is worth repairing by keeping nodes in float.

Partial quantization repairs a light over-budget candidate that is not slower than fp32 here (quick timing,
:mod:`onnxlite.search.quick`); with one passing already, only a clearly lighter one (docs/lighten.md,
"The fallback rule").  :mod:`onnxlite.search.partial` runs the repair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .results import CandidateRow

#: "clearly lighter": an over-budget candidate at most this fraction of the best passing one's size is repaired
CLEARLY_LIGHTER = 0.8


class Fast(Protocol):
    """May a row be a repair's base, by its speed here (:class:`onnxlite.search.quick.BaseSpeed`)."""

    def __call__(self, row: CandidateRow, /) -> bool:
        """Not slower than fp32 here."""

    def outpaced(self, row: CandidateRow, passing: Sequence[CandidateRow], /) -> str | None:
        """The passing candidate ``row`` cannot catch on speed once repaired, or None."""


def fallback_base(rows: Sequence[CandidateRow], primary: str, budget: float, can_exclude: Callable[[str], bool],
                  fast: Fast | None = None) -> tuple[CandidateRow | None, str]:
    """The over-budget candidate to repair, and why (``(None, reason)`` when there is none worth it).

    With nothing passing: the lightest candidate within 3x of the budget, else the
    closest.  With a passing one: only candidates at most ``CLEARLY_LIGHTER`` of its size.
    ``fast(row)`` (:func:`onnxlite.search.quick.fast_enough`) says whether a row is no slower than fp32
    here: a slower one is never a base, and a slower passing one never stops a fast one's repair.
    ``fast.outpaced`` leaves out a base already slower than a passing candidate that beats fp32: under the
    latency objective its repair could not win.
    """
    from .quick import BaseSpeed

    fast = fast or BaseSpeed()   # without quick figures every row may be a base, chosen by size
    usable = [r for r in rows if r.over_budget and r.path and primary in r.drops and not r.same_as
              and math.isfinite(r.drops[primary]) and can_exclude(r.strategy)]
    if usable and not any(fast(r) for r in usable):
        return None, "every over-budget candidate is slower than fp32 on this machine (--objective size repairs them)"
    usable = [r for r in usable if fast(r)]
    passing = [r for r in rows if r.status in {"ok", "winner"} and r.size_bytes and fast(r)]
    if passing:
        lightest = min(r.size_bytes or 0 for r in passing)
        usable = [r for r in usable if (r.size_bytes or 0) <= CLEARLY_LIGHTER * lightest]
        if not usable:
            return None, (f"no over-budget candidate is clearly lighter (<= {CLEARLY_LIGHTER:.0%} of the size) "
                          "than the lightest one within budget")
        ahead = [fast.outpaced(r, passing) for r in usable]
        if all(ahead):
            return None, (f"every clearly lighter over-budget candidate is slower here than {ahead[0]}, which is "
                          "within budget, and keeping nodes in float would not make it faster")
        usable = [r for r, faster in zip(usable, ahead) if faster is None]
    if not usable:
        return None, "no quantized candidate can keep nodes in float"
    close = [r for r in usable if r.drops[primary] <= 3 * budget]
    base = (min(close, key=lambda r: (r.size_bytes or 0, r.drops[primary])) if close
            else min(usable, key=lambda r: r.drops[primary]))
    if passing:
        best = min(passing, key=lambda r: r.size_bytes or 0)
        why = (f"{base.name} is over budget but {(best.size_bytes or 0) / (base.size_bytes or 1):.2f}x lighter than "
               f"{best.name}, the lightest within budget")
    else:
        why = "no candidate fits the budget"
    return base, why
