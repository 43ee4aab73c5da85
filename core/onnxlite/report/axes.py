"""Chart axes a person can read: ticks at round values (1, 2, 2.5 or 5 times a power of ten) that include
zero whenever the data straddles or touches it, and tick labels with no more digits than the step needs.

Both charts (``report/html.py``'s size/latency scatter and ``report/lighten_page.py``'s trade-off) use it, so
every axis of every report is labelled the same way.
"""

from __future__ import annotations

import math


def nice_step(span: float, target: int = 5) -> float:
    """The round step that cuts ``span`` into about ``target`` intervals."""
    raw = span / max(1, target)
    if not math.isfinite(raw) or raw <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * magnitude * (1 + 1e-9):
            return mult * magnitude
    return 10 * magnitude


def nice_ticks(low: float, high: float, target: int = 5) -> list[float]:
    """Round tick values covering [low, high]: the first at or below ``low``, the last at or above ``high``.

    Every value is a whole multiple of the step, so 0 is a tick whenever ``low <= 0 <= high``.
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        high = low + (abs(low) or 1.0)
    step = nice_step(high - low, target)
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    # rounding to the step's own digits keeps 0.30000000000000004 out of the labels
    digits = max(0, -math.floor(math.log10(step)) + 2)
    return [round(i * step, digits) + 0.0 for i in range(first, last + 1)]


def tick_label(value: float, step: float) -> str:
    """``value`` with as many decimals as ``step`` needs (0, 0.005, 0.01; 1.5 MB; 250 ms)."""
    if value == 0:
        return "0"
    if step >= 1 and float(value).is_integer():
        return f"{value:.0f}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if round(step * 10**decimals, 6) % 1:           # 2.5e-3 needs one digit more than 1e-3
        decimals += 1
    if decimals > 4:
        return f"{value:.1e}".replace("e-0", "e-")
    return f"{value:.{decimals}f}"


def tick_labels(ticks: list[float]) -> list[str]:
    """Labels for a list from :func:`nice_ticks`."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else (abs(ticks[0]) or 1.0)
    return [tick_label(t, step) for t in ticks]
