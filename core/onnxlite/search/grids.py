"""Option grids, decided on the select part: of one strategy's candidates that differ only in options that
leave the size alone (smoothquant's alpha, static's calibration method), the one with the smallest drop on
the *select* part stays and the others are set aside.  The figures reported are the confirm part's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import CandidateRow

#: sizes within this fraction are one option grid point (the grid's options left the weights alone)
GRID_SIZE_TIE = 0.01


def select_on_grids(rows: Sequence[CandidateRow], rank: str) -> list[str]:
    """Within each option grid (same strategy and kept-float nodes, sizes within 1%), keep the select part's best.

    The others that passed are set aside (status ``lost its grid``) with the reason; the
    winner's own figures stay the confirm part's.  Returns one note per grid decided.
    """
    from .results import LOST_GRID

    notes: list[str] = []
    groups: dict[tuple[str, tuple[str, ...]], list[CandidateRow]] = {}
    for row in rows:
        if row.status in {"ok", "rejected"} and row.size_bytes and rank in row.select_drops \
                and (row.status == "ok" or row.over_budget):
            groups.setdefault((row.strategy, tuple(row.keep_float)), []).append(row)
    for (strategy, _), members in groups.items():
        members.sort(key=lambda r: r.size_bytes or 0)
        clusters: list[list[CandidateRow]] = []
        for row in members:
            if clusters and (row.size_bytes or 0) <= (clusters[-1][0].size_bytes or 0) * (1 + GRID_SIZE_TIE):
                clusters[-1].append(row)
            else:
                clusters.append([row])
        for cluster in clusters:
            if len(cluster) < 2:
                continue

            def on_select(r: CandidateRow) -> float:
                value = r.select_drops.get(rank)
                return value if value is not None and math.isfinite(value) else math.inf

            best = min(cluster, key=on_select)
            aside = 0
            for row in cluster:
                if row is best or row.status != "ok":
                    continue
                row.status = LOST_GRID
                row.reason = (f"lost {strategy}'s option grid on the select part: {rank} drop "
                              f"{on_select(row):.4g} vs {on_select(best):.4g} for {best.name}")
                aside += 1
            if aside:
                notes.append(f"{strategy}: {best.name} chosen on the select part over {aside} other setting(s) "
                             f"of the same size")
    return notes
