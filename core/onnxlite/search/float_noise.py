"""The float model's own noise: a harmless float variant judged beside fp32, as a yardstick for budgets.

Every float initializer is rounded through float16 and back, the compute stays fp32: a change no user would
call a loss of accuracy.  What it changes (answers on near-ties, a cosine's last digits) is what any
rounding changes, so a budget tighter than it cannot be met by a quantized model, and a quantized candidate
whose drops are near it lost nothing that rounding alone would not.  docs/lighten.md says how to read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..evaluation.judge import Judge
    from .results import CandidateRow

#: the row's name in the tables
NAME = "float noise"
#: models above this size are not copied for the yardstick (a large language model's second fp32 copy
#: costs more than the row is worth)
MAX_BYTES = 1 << 30
#: float16's largest finite value: larger weights keep their fp32 value rather than become inf
FP16_MAX = 65504.0


def fp16_rounded(fp32: Path, out: Path) -> Path | None:
    """``fp32`` with every float initializer rounded through float16 and back, written to ``out``; None for a
    model with external data or above :data:`MAX_BYTES` (no yardstick then)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if fp32.stat().st_size > MAX_BYTES:
        return None
    from ..modelio import read_header

    # a copy of the parse the judge already made (read_header's is shared: never edited in place)
    model = onnx.ModelProto()
    model.CopyFrom(read_header(fp32))
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        return None
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for index, tensor in enumerate(graph.initializer):
            if tensor.data_type != onnx.TensorProto.FLOAT:
                continue
            values = numpy_helper.to_array(tensor)
            # clipped before the cast so that no value overflows; those beyond fp16's range keep their own
            cast = np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16).astype(np.float32)
            rounded = np.where(np.abs(values) <= FP16_MAX, cast, values)
            graph.initializer[index].CopyFrom(numpy_helper.from_array(rounded.astype(np.float32), tensor.name))
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    graphs.append(attribute.g)
                elif attribute.type == onnx.AttributeProto.GRAPHS:
                    graphs.extend(attribute.graphs)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    return out


def float_noise_row(judge: Judge, fp32: Path, work: Path) -> CandidateRow | None:
    """The yardstick's row: fp32 with fp16-rounded weights, judged like any candidate (None when skipped)."""
    from ..figures import figures_of
    from .results import CandidateRow

    path = fp16_rounded(fp32, work / "float_noise.onnx")
    if path is None:
        return None
    verdict = judge.evaluate(path, NAME)
    return CandidateRow(name=NAME, strategy="none", options={}, status="noise", path=str(path),
                        reason="fp32 with every weight rounded through fp16 (fp32 compute): the float model's own "
                               "noise, a yardstick for the budgets",
                        **figures_of(verdict, "size_bytes", "metrics", "drops", "intervals", "changes"))


def noise_notes(row: CandidateRow | None, budgets: Mapping[str, float]) -> list[str]:
    """What the yardstick says about the budgets: answers rounding alone changes, budgets rounding alone misses."""
    if row is None:
        return []
    notes = []
    for output, found in (row.changes or {}).items():
        changed = int(found.get("confident_changes", 0)) + int(found.get("near_tie_changes", 0))
        if changed:
            notes.append(f"float noise: fp16-rounded weights alone change {changed} answer(s) of {output} "
                         f"({found.get('confident_changes')} confident, {found.get('near_tie_changes')} near-ties): "
                         "an agreement budget that allows fewer changes cannot be met by any quantized model")
    for key, budget in budgets.items():
        drop = row.drops.get(key)
        if drop is not None and drop > budget:
            notes.append(f"float noise: fp16-rounded weights alone drop {key} by {drop:.4g}, over its {budget:.4g} "
                         "budget: no quantized model can be expected to meet it")
    return notes


def noise_record(row: CandidateRow | None) -> dict[str, Any] | None:
    """The row as the JSON result holds it."""
    return row.to_dict() if row is not None else None
