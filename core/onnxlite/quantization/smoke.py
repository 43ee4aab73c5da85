"""The quantize host's smoke check: does the strategy's output load and answer sanely?

Input and output model run on the same padded batch of two on the CPU
provider.  This compares the quantized model with the *input ONNX model*, not
with the source framework, and it is not the accuracy verdict (``compare`` and
``lighten`` own that, with real data and budgets): it catches models that do
not load, that lose or reshape outputs, or that produce NaN/inf the input
model does not, and records the cosine similarity of each float output.  The
comparison is export verification's own
(:func:`onnxlite.conversion.verify.compare_outputs`), without its tolerances:
a quantized model is expected to differ a little.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import VerificationError, one_line

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from ..specs import QuantizerSpec


def sample_feeds(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    from ..inputs import make_feeds, specs_from_onnx

    return make_feeds(specs_from_onnx(proto), batch=2, seq=8, seed=0, pad=True)


def _samples_in(feeds: dict[str, np.ndarray], proto: onnx.ModelProto) -> int:
    """How many samples ``feeds`` hold, counted on each input's own sample axis (a state's axis 1, not its 2)."""
    from ..data.dataset import count_rows
    from ..inputs import batch_axes, specs_from_onnx

    return count_rows(feeds, batch_axes(specs_from_onnx(proto)))


def smoke_check(source: Path, produced: Path, spec: QuantizerSpec, warn: Callable[[str], None],
                source_proto: onnx.ModelProto | None = None,
                samples: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Run input and output on the same padded batch of two; refuse outputs that cannot be right.

    This is not the accuracy verdict (``compare`` and ``lighten`` own that,
    with real data and budgets): it catches models that do not load, that
    change output shapes, or that produce NaN/inf.  ``samples`` (the user's
    data, whose shapes the model takes) replace the generated batch: a detector
    whose graph needs particular image sizes fails on invented ones.  When the
    *input* model itself fails on generated samples, the strategy is not to
    blame: the check is skipped with a warning that asks for real data.
    """
    import onnxruntime as ort

    from ..conversion.verify import compare_outputs
    from ..modelio import load_model
    from ..runtime import run_session

    options = ort.SessionOptions()
    options.log_severity_level = 3
    reference_session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    generated = samples is None
    proto = source_proto or load_model(source, load_external_data=False)
    feeds = sample_feeds(proto) if samples is None else samples
    from ..graph_family import is_decoder

    if is_decoder(proto):   # a prompt's first pass: positions from the mask, the cache empty
        from ..decoder_inputs import with_empty_past

        feeds = with_empty_past(proto, [feeds])[0]
    try:
        session = ort.InferenceSession(str(produced), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        reason = one_line(exc, 300)
        if spec.gpu_only_gain:
            warn(f"the {spec.name} model does not load on the CPU provider here ({reason}); it targets GPUs")
            return {"ran": False, "reason": reason}
        raise VerificationError(f"strategy {spec.name!r} produced a model onnxruntime cannot load: {reason}") from None
    try:
        reference = run_session(reference_session, feeds)
    except Exception as exc:
        if not generated:
            raise
        shapes = ", ".join(f"{n}{list(a.shape)}" for n, a in feeds.items())
        reason = f"the input model itself fails on generated samples {shapes} ({one_line(exc, 200)})"
        warn(f"smoke check skipped: {reason}; give calibration data (or check data) of the sizes it takes")
        return {"ran": False, "reason": reason}
    candidate = run_session(session, feeds)
    result: dict[str, Any] = {"ran": True, "batch": _samples_in(feeds, proto),
                              "padded": generated, "samples": "generated" if generated else "user data",
                              "outputs": {}}
    lost = [name for name in reference if name not in candidate]
    if lost:
        raise VerificationError(f"strategy {spec.name!r} lost output {lost[0]!r}")
    for row in compare_outputs(reference, candidate, "smoke"):
        # a shape or NaN/inf problem is the strategy's; values that differ (integer outputs included) are not
        if row.problem and not row.exact:
            raise VerificationError(f"strategy {spec.name!r} broke output {row.output!r}: {row.problem}")
        if not row.exact:
            result["outputs"][row.output] = {"cosine_min": row.cosine_min, "cosine_mean": row.cosine_mean}
    return result
