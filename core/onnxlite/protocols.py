"""The small interfaces behind the specs.

Third parties implement these structurally: any object with the right methods
will do, nothing needs to subclass a class of ours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from .inputs import InputSpec

Feeds = Mapping[str, "np.ndarray"]


@runtime_checkable
class SourceModel(Protocol):
    """A model loaded by a framework plugin, ready to run and to export."""

    def input_specs(self) -> Sequence[InputSpec]:
        """The model's inputs as derived from the model itself.

        Raise :class:`~onnxlite.errors.UsageError` when they cannot be derived
        and the user must pass ``--input``.
        """
        ...

    def run(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """Run the source framework on numpy inputs; outputs keyed by the names the export will use."""
        ...

    def export(self, path: Path, inputs: Sequence[InputSpec], sample: Feeds, opset: int,
               options: Mapping[str, Any]) -> Mapping[str, str]:
        """Write an ONNX model to ``path`` and return provenance to record in its metadata."""
        ...


@runtime_checkable
class Exporter(Protocol):
    """Loads sources of one framework."""

    def load(self, source: str, options: Mapping[str, Any]) -> SourceModel:
        ...


@dataclass
class QuantizeContext:
    """What the host hands a quantizer besides the model and options (docs/plugins.md, "The contracts a
    quantizer relies on")."""

    #: Calibration samples: an iterable of feed dicts ``{input name: numpy array}``, one sample each with a batch
    #: axis of 1 (``input_ids`` as ``int64[1, seq]``), re-iterable, with ``len()``; None when the strategy does
    #: not ``needs_calibration``.  :class:`onnxlite.calibration.CalibrationReader` batches them for onnxruntime.
    calibration: Any = None
    #: Scratch folder the quantizer may use; removed afterwards.
    workdir: Path | None = None
    #: Report a non-fatal concern to the user.
    warn: Callable[[str], None] = print
    #: The loaded source-framework model the ONNX file was exported from (a ``torch.nn.Module`` for
    #: PyTorch), when the caller has it (``onnxlite.quantize(..., source_model=module)``); None for a
    #: plain ONNX file.  Strategies that train (``qat``) need it; the others ignore it.
    source_model: Any = None


@dataclass
class QuantizeOutcome:
    """What a quantizer may report back (everything optional)."""

    excluded_nodes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Quantizer(Protocol):
    """Turns one ONNX model into a lighter one."""

    def quantize(self, model: Path, output: Path, options: Mapping[str, Any],
                 context: QuantizeContext) -> QuantizeOutcome | None:
        """Read ``model`` (never modify it) and write the result to ``output``."""
        ...


@runtime_checkable
class Provider(Protocol):
    """Builds the onnxruntime ``providers=`` argument for one execution provider."""

    def check(self) -> str | None:
        """Return None when usable here, else a one-line reason with the install hint."""
        ...

    def session_providers(self, options: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The ``(name, options)`` pairs to pass to ``onnxruntime.InferenceSession``."""
        ...


@dataclass
class MetricContext:
    """What a metric may look at besides the two arrays it scores.

    ``feeds`` are all the inputs the outputs were computed from (samples on
    axis 0, concatenated over batches), ``labels`` the data's ``labels`` entry
    (or None), ``reference_outputs`` every reference output by name.
    """

    #: Name of the output being scored.
    output: str
    feeds: Mapping[str, Any] = field(default_factory=dict)
    labels: Any = None
    reference_outputs: Mapping[str, Any] = field(default_factory=dict)

    def attention_mask(self, leading_shape: Sequence[int]) -> Any:
        """The 0/1 mask input whose shape is ``leading_shape`` (``(batch, tokens)``), or None."""
        from .inputs import guess_role

        for name, array in self.feeds.items():
            if guess_role(name) == "mask" and tuple(getattr(array, "shape", ())) == tuple(leading_shape):
                return array
        return None


@runtime_checkable
class Metric(Protocol):
    """Scores candidate outputs against reference outputs.

    ``compute(reference, reference, context)`` is the reference's own score
    (1 for similarities and agreements, 0 for differences, the reference's
    accuracy for label metrics); the *drop* of a candidate is how far its
    score falls from that, in the direction given by the spec's
    ``higher_is_better``.  Return NaN when the candidate's outputs are not
    finite: a NaN drop always fails a budget.

    Two optional attributes shape the drop's confidence interval: ``quantile``
    (a float in (0, 1)) marks a low-quantile metric, bounded with order
    statistics; ``judged(reference, context)`` returns a boolean mask of the
    samples the metric judges (the others never count, in the score or the interval).
    """

    def applies(self, reference: np.ndarray, context: MetricContext) -> bool:
        """Whether this metric makes sense for this output (``context.output`` names it).

        Metrics whose spec says ``default=True`` are used on every output they
        apply to when the user names none.
        """
        ...

    def compute(self, reference: np.ndarray, candidate: np.ndarray, context: MetricContext) -> float:
        ...
