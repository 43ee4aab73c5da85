"""Checks an ONNX model against the source framework on the same inputs.

Every output of every feed set gets one row: the largest absolute difference,
the per-sample cosine similarity (mean and min) and whether it is within
``atol + rtol * max |reference|`` everywhere.  The relative part is taken of the
output's scale, not of each element: a float32 graph that sums in another order
differs by about the same absolute amount at every element of a tensor (the
49,152 logits of a language model, largest ~20, differ by ~1e-3), so an
element-wise bound refuses a correct export wherever a value is near zero.
Outputs without floats (argmax ids, masks) must match exactly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..protocols import SourceModel
    from ..runtime import SessionSettings

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3


@dataclass
class VerificationRow:
    """One output on one feed set."""

    output: str
    feed_set: str
    shape: tuple[int, ...]
    max_abs_diff: float | None
    cosine_mean: float | None
    cosine_min: float | None
    exact: bool
    passed: bool
    problem: str = ""
    #: the reference's largest magnitude, which ``rtol`` scales
    scale: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verification:
    """All rows, the tolerances used, and the verdict."""

    rows: list[VerificationRow] = field(default_factory=list)
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(row.passed for row in self.rows)

    def failures(self) -> list[VerificationRow]:
        return [row for row in self.rows if not row.passed]

    def per_output(self) -> list[dict[str, Any]]:
        """One summary per output over all feed sets (worst difference, mean and min cosine)."""
        summary: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            entry = summary.setdefault(row.output, {"output": row.output, "max_abs_diff": 0.0, "cosines": [],
                                                    "cosine_min": None, "exact": row.exact, "passed": True})
            if row.max_abs_diff is not None:
                entry["max_abs_diff"] = max(entry["max_abs_diff"], row.max_abs_diff)
            if row.cosine_mean is not None:
                entry["cosines"].append(row.cosine_mean)
                entry["cosine_min"] = row.cosine_min if entry["cosine_min"] is None else min(entry["cosine_min"],
                                                                                              row.cosine_min)
            entry["passed"] = entry["passed"] and row.passed
        out = []
        for entry in summary.values():
            cosines = entry.pop("cosines")
            entry["cosine_mean"] = sum(cosines) / len(cosines) if cosines else None
            out.append(entry)
        return out

    def message(self) -> str:
        """One line describing what failed, with the numbers."""
        parts = []
        for row in self.failures()[:4]:
            if row.problem:
                parts.append(f"{row.output} [{row.feed_set}]: {row.problem}")
            elif row.exact:
                parts.append(f"{row.output} [{row.feed_set}]: values differ (non-float output must match exactly)")
            else:
                allowed = self.atol + self.rtol * (row.scale or 0.0)
                parts.append(f"{row.output} [{row.feed_set}]: max |diff| {row.max_abs_diff:.3g} > {allowed:.3g} "
                             f"(atol {self.atol:g} + rtol {self.rtol:g} x max |reference| {row.scale or 0.0:.3g}), "
                             f"cosine mean {row.cosine_mean:.6f} min {row.cosine_min:.6f}")
        more = len(self.failures()) - len(parts)
        return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "atol": self.atol, "rtol": self.rtol,
                "outputs": self.per_output(), "rows": [row.to_dict() for row in self.rows]}


def describe_feeds(feeds: Mapping[str, np.ndarray]) -> str:
    """A short label for a feed set: ``batch=2 seq=8`` for token inputs, else ``batch=2 shape=[2, 3, 16, 16]``."""
    import numpy as np

    first = next(iter(feeds.values()), None)
    if first is None:
        return "empty"
    shape = tuple(np.shape(first))
    if not shape:
        return "scalar"
    if len(shape) == 2 and np.issubdtype(np.asarray(first).dtype, np.integer):
        return f"batch={shape[0]} seq={shape[1]}"
    return f"batch={shape[0]} shape={list(shape)}"


def compare_outputs(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], feed_set: str,
                    atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL) -> list[VerificationRow]:
    """Rows for one feed set.  Outputs are matched by name, else by position when the counts agree."""
    import numpy as np

    from ..numerics import cosine_per_sample, is_floating, max_abs_diff

    pairs: list[tuple[str, Any, Any]] = []
    if set(reference) <= set(candidate):
        pairs = [(name, reference[name], candidate[name]) for name in reference]
    elif len(reference) == len(candidate):
        pairs = [(c_name, r, c) for (_, r), (c_name, c) in zip(reference.items(), candidate.items())]
    else:
        missing = sorted(set(reference) - set(candidate))
        return [VerificationRow(name, feed_set, tuple(np.shape(reference[name])), None, None, None, False, False,
                                f"the ONNX model has no output {name!r} (it has {', '.join(candidate)})")
                for name in missing]
    rows = []
    for name, ref, cand in pairs:
        ref, cand = np.asarray(ref), np.asarray(cand)
        if ref.shape != cand.shape:
            rows.append(VerificationRow(name, feed_set, tuple(ref.shape), None, None, None, False, False,
                                        f"shape {list(cand.shape)}, expected {list(ref.shape)}"))
            continue
        if not (is_floating(ref) or is_floating(cand)):
            equal = bool(np.array_equal(ref, cand))
            mismatched = 0 if equal else int(np.sum(ref != cand))
            rows.append(VerificationRow(name, feed_set, tuple(ref.shape), float(mismatched), None, None, True, equal,
                                        "" if equal else f"{mismatched} of {ref.size} values differ"))
            continue
        finite = bool(np.all(np.isfinite(cand)) or np.array_equal(np.isfinite(ref), np.isfinite(cand)))
        diff = max_abs_diff(np.nan_to_num(ref), np.nan_to_num(cand))
        if ref.ndim and ref.size:
            cosines = cosine_per_sample(np.nan_to_num(ref), np.nan_to_num(cand))
            cos_mean, cos_min = float(np.mean(cosines)), float(np.min(cosines))
        else:
            cos_mean = cos_min = 1.0 if diff <= atol else 0.0
        finite_ref = np.abs(ref[np.isfinite(ref)]) if ref.size else np.zeros(1)
        scale = float(finite_ref.max()) if finite_ref.size else 0.0
        close = finite and diff <= atol + rtol * scale
        rows.append(VerificationRow(name, feed_set, tuple(ref.shape), diff, cos_mean, cos_min, False, close,
                                    "" if finite else "non-finite values where the reference has none", scale))
    return rows


def verify(source_model: SourceModel | None, onnx_path: str | os.PathLike[str],
           feeds_list: Sequence[Mapping[str, np.ndarray]], atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL,
           settings: SessionSettings | None = None,
           references: Sequence[Mapping[str, np.ndarray]] | None = None) -> Verification:
    """Run ``onnx_path`` in onnxruntime on every feed set and compare with the source framework.

    ``references`` (one output dict per feed set) may be computed beforehand,
    e.g. from a freshly loaded model before exporting; otherwise
    ``source_model.run`` computes them now.
    """
    from ..runtime import create_session, run_session

    if references is None:
        if source_model is None:
            raise ValueError("verify() needs a source model or precomputed references")
        references = [source_model.run(feeds) for feeds in feeds_list]
    session = create_session(onnx_path, settings)
    result = Verification(atol=atol, rtol=rtol)
    for feeds, reference in zip(feeds_list, references):
        candidate = run_session(session, feeds)
        result.rows.extend(compare_outputs(reference, candidate, describe_feeds(feeds), atol, rtol))
    return result
