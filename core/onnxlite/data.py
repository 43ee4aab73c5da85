"""The data layer shared by calibration (``quantize``), ``compare`` and ``lighten``.

``load_data(source, inputs)`` turns what the user points at into a
:class:`Dataset`: samples keyed by input name (axis 0 is the sample axis), an
optional ``labels`` array, and checks against the model's inputs.

Formats (more arrive with the quantize work): an ``.npz`` file of arrays keyed
by input name (plus an optional ``labels`` entry).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from .inputs import InputSpec

LABELS_KEY = "labels"


@dataclass
class Dataset:
    """Samples keyed by input name; every array shares its first (sample) axis."""

    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None = None
    source: str = ""

    def __len__(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0]) if self.arrays else 0

    def batches(self, batch_size: int = 1) -> Iterator[dict[str, np.ndarray]]:
        """Feed dicts of ``batch_size`` samples each (the last may be shorter)."""
        for start in range(0, len(self), batch_size):
            yield {name: array[start:start + batch_size] for name, array in self.arrays.items()}

    def split(self, fraction: float) -> tuple[Dataset, Dataset]:
        """Two disjoint parts (first ``fraction`` and the rest), e.g. calibration and held-out."""
        cut = max(1, min(len(self) - 1, int(round(len(self) * fraction))))
        head = {k: v[:cut] for k, v in self.arrays.items()}
        tail = {k: v[cut:] for k, v in self.arrays.items()}
        labels = self.labels
        return (Dataset(head, None if labels is None else labels[:cut], self.source),
                Dataset(tail, None if labels is None else labels[cut:], self.source))


def _load_npz(path: Path) -> tuple[dict[str, Any], Any]:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:
        raise UsageError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    labels = arrays.pop(LABELS_KEY, None)
    return arrays, labels


def validate(dataset: Dataset, inputs: Sequence[InputSpec], where: str) -> None:
    """Check names, dtypes, ranks and fixed dims against the model; one line names the first mismatch."""
    import numpy as np

    if len(dataset) == 0:
        raise UsageError(f"{where}: no samples")
    for spec in inputs:
        if spec.name not in dataset.arrays:
            raise UsageError(f"{where}: no entry for input {spec.name!r} "
                             f"(found {', '.join(sorted(dataset.arrays)) or 'nothing'})")
        array = dataset.arrays[spec.name]
        if array.dtype != np.dtype(spec.dtype if spec.dtype != "bfloat16" else "float32"):
            raise UsageError(f"{where}: input {spec.name!r} is {array.dtype}, the model expects {spec.dtype}")
        if array.ndim != len(spec.shape):
            raise UsageError(f"{where}: input {spec.name!r} has rank {array.ndim} {list(array.shape)}, "
                             f"the model expects rank {len(spec.shape)} {list(spec.shape)}")
        for axis, dim in enumerate(spec.shape):
            if axis and isinstance(dim, int) and array.shape[axis] != dim:
                raise UsageError(f"{where}: input {spec.name!r} has size {array.shape[axis]} on axis {axis}, "
                                 f"the model expects {dim}")
    sizes = {name: a.shape[0] for name, a in dataset.arrays.items()}
    if len(set(sizes.values())) > 1:
        raise UsageError(f"{where}: inputs disagree on the number of samples ({sizes})")


def load_data(source: str | os.PathLike[str], inputs: Sequence[InputSpec] | None = None,
              options: Mapping[str, Any] | None = None) -> Dataset:
    """Load ``source`` and, when ``inputs`` are given, check it against them."""
    path = Path(source)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if path.suffix == ".npz":
        arrays, labels = _load_npz(path)
    else:
        raise UsageError(f"{path}: unsupported data format (expected an .npz file)")
    dataset = Dataset(arrays, labels, str(path))
    if inputs is not None:
        dataset.arrays = {spec.name: dataset.arrays.get(spec.name) for spec in inputs} | {
            k: v for k, v in dataset.arrays.items() if k not in {s.name for s in inputs}}
        dataset.arrays = {k: v for k, v in dataset.arrays.items() if v is not None}
        validate(dataset, inputs, str(path))
    return dataset
