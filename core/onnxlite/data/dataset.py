"""The :class:`Dataset`: samples keyed by input name, streamed in chunks, re-cut into batches.

Every format that :func:`onnxlite.data.load_data` reads ends here; ``validate``
checks a dataset against a model's inputs before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from ..inputs import InputSpec


LABELS_KEY = "labels"


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


ChunkSource = Callable[[], Iterable[Mapping[str, Any]]]


#: each input's sample axis, by name; an input not named batches on axis 0, a scalar (0-d array) not at all
Axes = Mapping[str, "int | None"]


def axis_of(name: str, array: Any, axes: Axes | None) -> int | None:
    """The sample axis of input ``name`` (None: a scalar or constant, passed whole with every batch)."""
    if getattr(array, "ndim", 0) == 0:
        return None
    axis = (axes or {}).get(name, 0)
    return axis if axis is None or axis < array.ndim else None


def take_rows(chunk: Mapping[str, Any], start: int, stop: int | None, axes: Axes | None = None) -> dict[str, Any]:
    """Samples ``start:stop`` of every input, each on its own sample axis; scalars and constants whole."""
    out = {}
    for name, array in chunk.items():
        axis = axis_of(name, array, axes)
        if axis is None:
            out[name] = array
        else:
            index = [slice(None)] * array.ndim
            index[axis] = slice(start, stop)
            out[name] = array[tuple(index)]
    return out


def pick_rows(chunk: Mapping[str, Any], index: Sequence[int], axes: Axes | None = None) -> dict[str, Any]:
    """Samples ``index`` (any order, any subset) of every input, each on its own sample axis; scalars whole."""
    import numpy as np

    picked = np.asarray(index, dtype=np.int64)
    out = {}
    for name, array in chunk.items():
        axis = axis_of(name, array, axes)
        out[name] = array if axis is None else np.take(array, picked, axis=axis)
    return out


def count_rows(chunk: Mapping[str, Any], axes: Axes | None = None) -> int:
    """Samples in a feed dict: the size of the first batched input's sample axis (1 if every input is a scalar)."""
    for name, array in chunk.items():
        axis = axis_of(name, array, axes)
        if axis is not None:
            return int(array.shape[axis])
    return 1 if chunk else 0


def concat_rows(parts: Sequence[Mapping[str, Any]], axes: Axes | None = None) -> dict[str, Any]:
    """Feed dicts joined on each input's sample axis (a scalar or constant is kept once)."""
    import numpy as np

    if len(parts) == 1:
        return dict(parts[0])
    out = {}
    for name, first in parts[0].items():
        axis = axis_of(name, first, axes)
        out[name] = first if axis is None else np.concatenate([p[name] for p in parts], axis=axis)
    return out


_rows = count_rows


def _same_layout(a: Mapping[str, Any], b: Mapping[str, Any], axes: Axes | None = None) -> bool:
    def rest(name: str, array: Any) -> tuple:
        axis = axis_of(name, array, axes)
        return tuple(d for i, d in enumerate(array.shape) if i != axis)

    return a.keys() == b.keys() and all(rest(k, a[k]) == rest(k, b[k]) and a[k].dtype == b[k].dtype for k in a)


def _concat(parts: list[dict[str, Any]], axes: Axes | None = None) -> dict[str, Any]:
    return concat_rows(parts, axes)


def _rebatch(chunks: Iterable[Mapping[str, Any]], size: int, axes: Axes | None = None) -> Iterator[dict[str, Any]]:
    """Re-cut a stream of chunks into batches of ``size`` samples.

    Samples of different shapes (variable-length feeds from a Python
    reference) never share a batch: a shape change ends the batch early.
    """
    pending: list[dict[str, Any]] = []
    count = 0
    for chunk in chunks:
        total, start = _rows(chunk, axes), 0
        while start < total:
            if pending and not _same_layout(pending[0], chunk, axes):
                yield _concat(pending, axes)
                pending, count = [], 0
            take = min(size - count, total - start)
            pending.append(take_rows(chunk, start, start + take, axes))
            count += take
            start += take
            if count == size:
                yield _concat(pending, axes)
                pending, count = [], 0
    if pending:
        yield _concat(pending, axes)


def _window(chunks: Iterable[Mapping[str, Any]], start: int, stop: int | None,
            axes: Axes | None = None) -> Iterator[dict[str, Any]]:
    """Rows ``start:stop`` of a chunk stream, without reading past ``stop``."""
    offset = 0
    for chunk in chunks:
        if stop is not None and offset >= stop:
            return
        total = _rows(chunk, axes)
        lo, hi = max(start - offset, 0), total if stop is None else min(stop - offset, total)
        if lo < hi:
            yield take_rows(chunk, lo, hi, axes)
        offset += total


class Dataset:
    """Samples keyed by input name; every array shares its sample axis (the first, unless
    :attr:`batch_axes` says otherwise for an input; scalars and constants go whole with every batch).

    Small sets hold their ``arrays`` in memory.  Big ones are *streamed*: the
    dataset keeps a zero-argument callable that yields chunks (feed dicts of a
    few samples each) and reads them again on every pass, so calibration never
    holds more than a chunk.  ``arrays`` still works on a streamed set (it
    concatenates everything), but ``batches`` is the way to read one.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray] | None = None, labels: np.ndarray | None = None,
                 source: str = "", *, chunks: ChunkSource | None = None, length: int | None = None) -> None:
        if arrays is None and chunks is None:
            arrays = {}
        self._arrays = dict(arrays) if arrays is not None else None
        self._chunks = chunks
        self._length = length
        self.labels = labels
        self.source = source
        #: the file each streamed chunk comes from, and each in-memory input's file, where known (for messages)
        self.chunk_names: list[str] | None = None
        self.array_files: dict[str, str] | None = None
        #: each input's sample axis where it is not 0 or the input is a constant (set from the model's specs)
        self.batch_axes: dict[str, int | None] = {}

    def __repr__(self) -> str:
        kind = "streamed" if self.streamed else "in memory"
        return f"Dataset({self.source!r}, {len(self)} samples, {kind})"

    @property
    def streamed(self) -> bool:
        return self._arrays is None

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """All samples as arrays (reads a streamed set whole, so only for small ones)."""
        if self._arrays is None:
            parts = list(self.chunks())
            if any(not _same_layout(parts[0], p, self.batch_axes) for p in parts[1:]):
                raise UsageError(f"{self.source}: samples differ in shape, so they cannot be stacked; "
                                 "read them with .batches()")
            self._arrays = _concat(parts, self.batch_axes) if parts else {}
            self._chunks = None
        return self._arrays

    @arrays.setter
    def arrays(self, value: Mapping[str, np.ndarray]) -> None:
        self._arrays, self._chunks, self._length = dict(value), None, None

    def chunks(self) -> Iterator[dict[str, Any]]:
        """The samples as the source holds them: one dict for an in-memory set, several for a streamed one."""
        if self._arrays is not None:
            if self._arrays:
                yield self._arrays
            return
        assert self._chunks is not None
        for chunk in self._chunks():
            yield {k: v for k, v in chunk.items() if k != LABELS_KEY}

    def __len__(self) -> int:
        if self._arrays is not None:
            return _rows(self._arrays, self.batch_axes)
        if self._length is None:
            self._length = sum(_rows(c, self.batch_axes) for c in self.chunks())
        return self._length

    def batches(self, batch_size: int = 1) -> Iterator[dict[str, np.ndarray]]:
        """Feed dicts of ``batch_size`` samples each (the last may be shorter)."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self._arrays is not None:
            for start in range(0, len(self), batch_size):
                yield take_rows(self._arrays, start, start + batch_size, self.batch_axes)
            return
        yield from _rebatch(self.chunks(), batch_size, self.batch_axes)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """One feed dict per sample (batch axis of 1 kept)."""
        return self.batches(1)

    def slice(self, start: int, stop: int | None = None) -> Dataset:
        """Samples ``start:stop`` as a new dataset (still streamed if this one is)."""
        labels = None if self.labels is None else self.labels[start:stop]
        if self._arrays is not None:
            part = Dataset(take_rows(self._arrays, start, stop, self.batch_axes), labels, self.source)
        else:
            length = None
            if self._length is not None:
                end = self._length if stop is None else min(stop, self._length)
                length = max(0, end - start)
            part = Dataset(labels=labels, source=self.source, length=length,
                           chunks=lambda: _window(self.chunks(), start, stop, self.batch_axes))
        part.batch_axes = dict(self.batch_axes)
        return part

    def take(self, count: int) -> Dataset:
        """The first ``count`` samples (all of them if there are fewer)."""
        return self if count >= len(self) else self.slice(0, count)

    def split(self, fraction: float) -> tuple[Dataset, Dataset]:
        """Two disjoint parts (first ``fraction`` and the rest), e.g. calibration and held-out."""
        cut = max(1, min(len(self) - 1, int(round(len(self) * fraction))))
        return self.slice(0, cut), self.slice(cut)


def _check_chunk(chunk: Mapping[str, Any], inputs: Sequence[InputSpec], where: str) -> None:
    import numpy as np

    for spec in inputs:
        if spec.name not in chunk:
            raise UsageError(f"{where}: no entry for input {spec.name!r} "
                             f"(found {', '.join(sorted(chunk)) or 'nothing'})")
        array = chunk[spec.name]
        if array.dtype != np.dtype(spec.dtype if spec.dtype != "bfloat16" else "float32"):
            raise UsageError(f"{where}: input {spec.name!r} is {array.dtype}, the model expects {spec.dtype}")
        if array.ndim != len(spec.shape):
            raise UsageError(f"{where}: input {spec.name!r} has rank {array.ndim} {list(array.shape)}, "
                             f"the model expects rank {len(spec.shape)} {list(spec.shape)}")
        for axis, dim in enumerate(spec.shape):
            if axis and isinstance(dim, int) and array.shape[axis] != dim:
                raise UsageError(f"{where}: input {spec.name!r} has size {array.shape[axis]} on axis {axis}, "
                                 f"the model expects {dim} (model shape {list(spec.shape)})")
    axes = {spec.name: spec.batch_axis for spec in inputs}
    sizes = {spec.name: chunk[spec.name].shape[found] for spec in inputs
             if (found := axis_of(spec.name, chunk[spec.name], axes)) is not None}
    if len(set(sizes.values())) > 1:
        raise UsageError(f"{where}: inputs disagree on the number of samples ({sizes})")


#: bytes of one input checked for NaN/inf at a time (memory-mapped .npy inputs are never read whole)
FINITE_BLOCK_BYTES = 64 * 1024**2


def check_finite(chunk: Mapping[str, Any], inputs: Sequence[InputSpec], where: str, offset: int = 0,
                 files: Mapping[str, str] | None = None) -> None:
    """Refuse NaN or inf in the floating-point inputs of ``chunk``, naming the file, the input and the sample.

    One non-finite calibration sample makes every scale it touches NaN (static
    quantization then dies in an assertion, SmoothQuant quietly writes a model
    that maps every input to one answer), and one in evaluation data makes
    every metric NaN.  ``offset`` is the index of the chunk's first sample in
    the whole set; ``files`` names the file each input came from, where that
    is not ``where`` itself.
    """
    import numpy as np

    for spec in inputs:
        array = chunk.get(spec.name)
        if array is None or not np.issubdtype(array.dtype, np.floating):
            continue
        if array.ndim == 0:
            array = array.reshape(1)
        elif (spec.batch_axis or 0) < array.ndim:
            array = np.moveaxis(array, spec.batch_axis or 0, 0)   # a view: "sample N" counts on the sample axis
        rows = int(array.shape[0])
        row_bytes = max(1, array[:1].nbytes)
        step = max(1, FINITE_BLOCK_BYTES // row_bytes)
        for start in range(0, rows, step):
            block = np.asarray(array[start:start + step])
            finite = np.isfinite(block)
            if finite.all():
                continue
            bad_rows = np.flatnonzero(~finite.reshape(len(block), -1).all(axis=1))
            sample = int(bad_rows[0])
            value = block[sample][~finite[sample]].flat[0]
            what = "NaN" if np.isnan(value) else ("inf" if value > 0 else "-inf")
            place = (files or {}).get(spec.name, where)
            raise UsageError(f"{place}: input {spec.name!r} holds {what} in sample {offset + start + sample} "
                             "(counting from 0); non-finite calibration or evaluation data makes every scale "
                             "and metric it touches meaningless: fix or drop that sample")


def validate(dataset: Dataset, inputs: Sequence[InputSpec], where: str) -> None:
    """Check names, dtypes, ranks and fixed dims against the model, and that float inputs hold no
    NaN or inf; one line names the first mismatch.

    A streamed set is read once, chunk by chunk, so a bad sample is found
    before calibration starts rather than in the middle of it.
    """
    dataset.batch_axes = {s.name: s.batch_axis for s in inputs if s.batch_axis != 0}
    if dataset.streamed:
        count = 0
        for index, chunk in enumerate(dataset.chunks()):
            _check_chunk(chunk, inputs, f"{where} (chunk {index + 1})" if index else where)
            names = dataset.chunk_names
            check_finite(chunk, inputs, names[index] if names and index < len(names) else where, count)
            count += _rows(chunk, dataset.batch_axes)
        dataset._length = count
    elif len(dataset):
        _check_chunk(dataset.arrays, inputs, where)
        check_finite(dataset.arrays, inputs, where, 0, dataset.array_files)
    if len(dataset) == 0:
        raise UsageError(f"{where}: no samples")
    if dataset.labels is not None and len(dataset.labels) != len(dataset):
        raise UsageError(f"{where}: {len(dataset.labels)} labels for {len(dataset)} samples")


def _only_inputs(dataset: Dataset, inputs: Sequence[InputSpec]) -> Dataset:
    """Keep the model's inputs only (in the model's order): extra entries would make onnxruntime fail."""
    wanted = [s.name for s in inputs]
    dataset.batch_axes = {s.name: s.batch_axis for s in inputs if s.batch_axis != 0}
    if not dataset.streamed:
        dataset.arrays = {name: dataset.arrays[name] for name in wanted}
        return dataset
    outer = dataset._chunks
    assert outer is not None
    dataset._chunks = lambda: ({name: c[name] for name in wanted} for c in outer())
    return dataset
