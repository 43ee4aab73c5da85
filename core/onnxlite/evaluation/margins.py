"""Near-ties of a classifier: samples whose answer any rounding may flip.

A sample is a *near-tie* when the reference's top-1 probability leads its runner-up by less than a margin
(:data:`DEFAULT_MARGIN`, in probability); the rest are *confident*.  A changed answer on a near-tie says
little about a candidate (fp16-rounded weights can flip it), one on a confident sample says it broke
something.  :func:`changed_answers` counts a candidate's changed answers in the two groups, for the
verdict and the tables; the ``top1_agreement_confident`` metric budgets only the confident ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: the probability lead below which a sample is a near-tie: two classes within 0.1 of each other are a
#: coin toss the model itself is unsure of (a photo of no class it knows), not an answer a user relies on
#: (docs/metrics.md, "Near-ties")
DEFAULT_MARGIN = 0.1
#: more than this share of near-ties and an agreement budget may be unreachable: the verdict warns
NEAR_TIE_WARNING = 1 / 3


def classifier_outputs(outputs: Mapping[str, Any], metrics: Sequence[Any],
                       context: Callable[[str], Any]) -> tuple[str, ...]:
    """The outputs that are classification logits (:func:`~onnxlite.evaluation.metrics.output_kind`) and are
    judged by some metric: their changed answers are worth counting."""
    from .metrics import output_kind

    judged = {m.output for m in metrics}
    return tuple(name for name, value in outputs.items()
                 if name in judged and output_kind(name, value, context(name)) == "classification logits")


def confident(output: Any, margin: float = DEFAULT_MARGIN) -> np.ndarray:
    """The samples whose top-1 leads by at least ``margin`` (a boolean mask)."""
    from ..numerics import top1_lead

    return top1_lead(output) >= margin


@dataclass(frozen=True)
class Changes:
    """A candidate's changed top-1 answers on one output, near-ties and confident samples apart."""

    margin: float
    near_ties: int
    near_tie_changes: int
    confident: int
    confident_changes: int

    @property
    def samples(self) -> int:
        return self.near_ties + self.confident

    def text(self) -> str:
        """``1 of 12 confident, 3 of 12 near-ties``."""
        return (f"{self.confident_changes} of {self.confident} confident, "
                f"{self.near_tie_changes} of {self.near_ties} near-ties")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def changed_answers(reference: Any, candidate: Any, margin: float = DEFAULT_MARGIN,
                    index: Sequence[int] | np.ndarray | None = None) -> Changes:
    """The candidate's changed top-1 answers on the samples ``index`` (default: all), in the two groups."""
    import numpy as np

    ref = np.asarray(reference).reshape(reference.shape[0], -1)
    cand = np.asarray(candidate).reshape(ref.shape)
    if index is not None:
        rows = np.asarray(index, dtype=np.int64)
        ref, cand = ref[rows], cand[rows]
    sure = confident(ref, margin)
    changed = np.argmax(ref, axis=1) != np.argmax(cand, axis=1)
    changed |= ~np.all(np.isfinite(cand), axis=1)
    return Changes(float(margin), int(np.sum(~sure)), int(np.sum(changed & ~sure)), int(np.sum(sure)),
                   int(np.sum(changed & sure)))


def near_tie_note(output: str, reference: Any, samples: Sequence[int] | np.ndarray | None = None,
                  margin: float = DEFAULT_MARGIN, warn: bool = True) -> str:
    """The verdict's line on an output's near-ties among the judging samples, with a warning above a third
    when ``warn`` (a budget counts every changed answer)."""
    import numpy as np

    ref = np.asarray(reference)
    if samples is not None:
        ref = ref[np.asarray(samples, dtype=np.int64)]
    ties = int(np.sum(~confident(ref, margin)))
    total = int(ref.shape[0])
    text = (f"{output}: {ties} of {total} judging samples are near-ties (the reference's top-1 leads the "
            f"runner-up by < {margin:g} in probability)")
    if warn and total and ties / total > NEAR_TIE_WARNING:
        text += ("; more than a third: a top1_agreement budget may be unreachable for any quantized model, "
                 "as rounding flips near-ties; top1_agreement_confident judges the confident ones only")
    return text
