"""The data layer shared by calibration (``quantize``), ``compare`` and ``lighten``.

``load_data(source, inputs, options)`` turns what the user points at into a
:class:`Dataset`: samples keyed by input name (axis 0 is the sample axis), an
optional ``labels`` array kept apart for accuracy metrics, and checks against
the model's inputs made before anything runs.

Formats:

* an ``.npz`` file of arrays keyed by input name (plus an optional ``labels`` entry);
* a folder of ``.npy`` files, one per input (the file stem is the input name,
  ``labels.npy`` holds labels); they are memory-mapped, never read whole;
* a folder of ``.npz`` files, each holding one or more samples (streamed file by file);
* a folder of images for a single image input (see :mod:`onnxlite.data_images`);
* a ``.txt`` file, one sentence a line, with ``tokenizer=FOLDER`` (see :mod:`onnxlite.data_text`);
* a Python reference ``file.py:name`` to an iterable (or a zero-argument
  callable returning one) of feed dicts, batch axis included.

Options (``--calibration-option key=value``) are declared in :data:`DATA_OPTIONS`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .specs import Option

if TYPE_CHECKING:
    import numpy as np

    from .inputs import InputSpec

LABELS_KEY = "labels"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")

#: Options every format understands (each format reads the ones it needs).
DATA_OPTIONS: tuple[Option, ...] = (
    Option("size", str, None, "images: resize to SIZE or HxW (default: the model's fixed dims)"),
    Option("mean", float, None, "images: per-channel mean subtracted after scaling (one value or one per channel)",
           multiple=True),
    Option("std", float, None, "images: per-channel std divided by after the mean (one value or one per channel)",
           multiple=True),
    Option("layout", str, None, "images: NCHW or NHWC (default: guessed from the model's input shape)",
           choices=("NCHW", "NHWC")),
    Option("scale", bool, True, "images: divide pixel values by 255 (float inputs only)"),
    Option("color", str, None, "images: L (grey) or RGB (default: from the model's channel count)",
           choices=("L", "RGB")),
    Option("tokenizer", str, None, "text: folder of a Hugging Face tokenizer (loaded offline)"),
    Option("max_length", int, 128, "text: truncate sentences to this many tokens"),
    Option("padding", str, "longest", "text: pad to the longest line of the file or to max_length",
           choices=("longest", "max_length")),
)

ChunkSource = Callable[[], Iterable[Mapping[str, Any]]]


def parse_data_options(options: Mapping[str, Any] | None, where: str = "data") -> dict[str, Any]:
    """Typed values for :data:`DATA_OPTIONS` (defaults filled in); unknown keys are a UsageError."""
    from .specs import parse_options

    return parse_options(DATA_OPTIONS, options, flag="data option", owner=where)


def _rows(chunk: Mapping[str, Any]) -> int:
    return int(next(iter(chunk.values())).shape[0]) if chunk else 0


def _same_layout(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k].shape[1:] == b[k].shape[1:] and a[k].dtype == b[k].dtype for k in a)


def _concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _rebatch(chunks: Iterable[Mapping[str, Any]], size: int) -> Iterator[dict[str, Any]]:
    """Re-cut a stream of chunks into batches of ``size`` samples.

    Samples of different shapes (variable-length feeds from a Python
    reference) never share a batch: a shape change ends the batch early.
    """
    pending: list[dict[str, Any]] = []
    count = 0
    for chunk in chunks:
        total, start = _rows(chunk), 0
        while start < total:
            if pending and not _same_layout(pending[0], chunk):
                yield _concat(pending)
                pending, count = [], 0
            take = min(size - count, total - start)
            pending.append({k: v[start:start + take] for k, v in chunk.items()})
            count += take
            start += take
            if count == size:
                yield _concat(pending)
                pending, count = [], 0
    if pending:
        yield _concat(pending)


def _window(chunks: Iterable[Mapping[str, Any]], start: int, stop: int | None) -> Iterator[dict[str, Any]]:
    """Rows ``start:stop`` of a chunk stream, without reading past ``stop``."""
    offset = 0
    for chunk in chunks:
        if stop is not None and offset >= stop:
            return
        total = _rows(chunk)
        lo, hi = max(start - offset, 0), total if stop is None else min(stop - offset, total)
        if lo < hi:
            yield {k: v[lo:hi] for k, v in chunk.items()}
        offset += total


class Dataset:
    """Samples keyed by input name; every array shares its first (sample) axis.

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
            if any(not _same_layout(parts[0], p) for p in parts[1:]):
                raise UsageError(f"{self.source}: samples differ in shape, so they cannot be stacked; "
                                 "read them with .batches()")
            self._arrays = _concat(parts) if parts else {}
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
            return _rows(self._arrays)
        if self._length is None:
            self._length = sum(_rows(c) for c in self.chunks())
        return self._length

    def batches(self, batch_size: int = 1) -> Iterator[dict[str, np.ndarray]]:
        """Feed dicts of ``batch_size`` samples each (the last may be shorter)."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self._arrays is not None:
            for start in range(0, len(self), batch_size):
                yield {name: array[start:start + batch_size] for name, array in self._arrays.items()}
            return
        yield from _rebatch(self.chunks(), batch_size)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """One feed dict per sample (batch axis of 1 kept)."""
        return self.batches(1)

    def slice(self, start: int, stop: int | None = None) -> Dataset:
        """Samples ``start:stop`` as a new dataset (still streamed if this one is)."""
        labels = None if self.labels is None else self.labels[start:stop]
        if self._arrays is not None:
            return Dataset({k: v[start:stop] for k, v in self._arrays.items()}, labels, self.source)
        length = None
        if self._length is not None:
            end = self._length if stop is None else min(stop, self._length)
            length = max(0, end - start)
        return Dataset(labels=labels, source=self.source, length=length,
                       chunks=lambda: _window(self.chunks(), start, stop))

    def take(self, count: int) -> Dataset:
        """The first ``count`` samples (all of them if there are fewer)."""
        return self if count >= len(self) else self.slice(0, count)

    def split(self, fraction: float) -> tuple[Dataset, Dataset]:
        """Two disjoint parts (first ``fraction`` and the rest), e.g. calibration and held-out."""
        cut = max(1, min(len(self) - 1, int(round(len(self) * fraction))))
        return self.slice(0, cut), self.slice(cut)


# -- checking ---------------------------------------------------------------------------------------------

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
    sizes = {spec.name: chunk[spec.name].shape[0] for spec in inputs}
    if len(set(sizes.values())) > 1:
        raise UsageError(f"{where}: inputs disagree on the number of samples ({sizes})")


def validate(dataset: Dataset, inputs: Sequence[InputSpec], where: str) -> None:
    """Check names, dtypes, ranks and fixed dims against the model; one line names the first mismatch.

    A streamed set is read once, chunk by chunk, so a bad sample is found
    before calibration starts rather than in the middle of it.
    """
    if dataset.streamed:
        count = 0
        for index, chunk in enumerate(dataset.chunks()):
            _check_chunk(chunk, inputs, f"{where} (chunk {index + 1})" if index else where)
            count += _rows(chunk)
        dataset._length = count
    elif len(dataset):
        _check_chunk(dataset.arrays, inputs, where)
    if len(dataset) == 0:
        raise UsageError(f"{where}: no samples")
    if dataset.labels is not None and len(dataset.labels) != len(dataset):
        raise UsageError(f"{where}: {len(dataset.labels)} labels for {len(dataset)} samples")


def _only_inputs(dataset: Dataset, inputs: Sequence[InputSpec]) -> Dataset:
    """Keep the model's inputs only (in the model's order): extra entries would make onnxruntime fail."""
    wanted = [s.name for s in inputs]
    if not dataset.streamed:
        dataset.arrays = {name: dataset.arrays[name] for name in wanted}
        return dataset
    outer = dataset._chunks
    assert outer is not None
    dataset._chunks = lambda: ({name: c[name] for name in wanted} for c in outer())
    return dataset


# -- formats ----------------------------------------------------------------------------------------------

def _load_npz(path: Path) -> tuple[dict[str, Any], Any]:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:
        raise UsageError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    labels = arrays.pop(LABELS_KEY, None)
    return arrays, labels


def _load_npy(path: Path) -> Any:
    import numpy as np

    try:
        # Memory-mapped: slicing a batch reads only that batch from disk.
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as exc:
        raise UsageError(f"{path}: not a readable .npy file ({type(exc).__name__}: {exc})") from None


def _load_npy_folder(folder: Path, files: list[Path]) -> Dataset:
    arrays = {f.stem: _load_npy(f) for f in files}
    labels = arrays.pop(LABELS_KEY, None)
    if not arrays:
        raise UsageError(f"{folder}: only labels.npy, no input arrays")
    return Dataset(arrays, None if labels is None else labels[:], str(folder))


def _load_npz_folder(folder: Path, files: list[Path]) -> Dataset:
    import numpy as np

    def chunks() -> Iterator[dict[str, Any]]:
        for file in files:
            arrays, _ = _load_npz(file)   # labels are read once for the whole folder, below
            yield arrays

    label_parts = []
    for file in files:
        with np.load(file, allow_pickle=False) as npz:
            if LABELS_KEY in npz.files:
                label_parts.append(npz[LABELS_KEY])
    if label_parts and len(label_parts) != len(files):
        raise UsageError(f"{folder}: some .npz files have a {LABELS_KEY!r} entry and some do not")
    labels = np.concatenate(label_parts) if label_parts else None
    return Dataset(labels=labels, source=str(folder), chunks=chunks)


def _load_folder(folder: Path, inputs: Sequence[InputSpec] | None, options: dict[str, Any]) -> Dataset:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    by_kind = {
        "npy": [p for p in files if p.suffix == ".npy"],
        "npz": [p for p in files if p.suffix == ".npz"],
        "image": [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES],
    }
    if by_kind["image"] and [p.name for p in by_kind["npy"]] == [f"{LABELS_KEY}.npy"]:
        by_kind["npy"] = []   # a flat image folder's labels, which load_image_folder reads
    class_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if class_dirs and not any(by_kind.values()):
        from .data_images import load_image_folder

        return load_image_folder(folder, inputs, options)
    present = [k for k, v in by_kind.items() if v]
    if not present:
        raise UsageError(f"{folder}: empty folder (expected .npy, .npz or image files)")
    if len(present) > 1:
        raise UsageError(f"{folder}: mixes {' and '.join(present)} files; keep one kind per folder")
    if present == ["npy"]:
        return _load_npy_folder(folder, by_kind["npy"])
    if present == ["npz"]:
        return _load_npz_folder(folder, by_kind["npz"])
    from .data_images import load_image_folder

    return load_image_folder(folder, inputs, options)


def _as_feed(item: Any, ref: str, index: int) -> dict[str, Any]:
    import numpy as np

    if not isinstance(item, Mapping):
        raise UsageError(f"{ref}: item {index + 1} is a {type(item).__name__}, "
                         "expected a dict of input name -> array (batch axis included)")
    feed = {}
    for key, value in item.items():
        array = np.asarray(value)
        if array.ndim == 0:
            raise UsageError(f"{ref}: item {index + 1}: entry {key!r} is a scalar; "
                             "feeds need a batch axis (shape [n, ...])")
        feed[str(key)] = array
    return feed


def _load_python(ref: str) -> Dataset:
    from .pyref import load_python_ref

    obj = load_python_ref(ref, "data")
    if isinstance(obj, Dataset):
        return obj
    if callable(obj) and not isinstance(obj, Iterable):
        def produce() -> Iterable[Any]:
            try:
                result = obj()
            except Exception as exc:
                raise UsageError(f"data {ref!r}: calling it failed: {type(exc).__name__}: {exc}") from exc
            if not isinstance(result, Iterable) or isinstance(result, (str, bytes, Mapping)):
                raise UsageError(f"data {ref!r}: returned a {type(result).__name__}, expected an iterable of feed dicts")
            return result
    elif isinstance(obj, Mapping):
        produce = lambda: [obj]  # noqa: E731 - one feed dict holding every sample
    elif isinstance(obj, Iterable) and not isinstance(obj, (str, bytes)):
        if iter(obj) is obj:
            # A one-shot iterator cannot be read twice (check, then calibrate): keep what it yields.
            items = list(obj)
            produce = lambda: items  # noqa: E731
        else:
            produce = lambda: obj  # noqa: E731
    else:
        raise UsageError(f"data {ref!r}: is a {type(obj).__name__}, expected an iterable of feed dicts "
                         "or a zero-argument function returning one")

    def chunks() -> Iterator[dict[str, Any]]:
        for index, item in enumerate(produce()):
            yield _as_feed(item, f"data {ref!r}", index)

    labels = _collect_labels(chunks)
    return Dataset(labels=labels, source=ref, chunks=chunks)


def _collect_labels(chunks: ChunkSource) -> Any:
    import numpy as np

    parts = [c[LABELS_KEY] for c in chunks() if LABELS_KEY in c]
    return np.concatenate(parts) if parts else None


def load_data(source: str | os.PathLike[str], inputs: Sequence[InputSpec] | None = None,
              options: Mapping[str, Any] | None = None) -> Dataset:
    """Load ``source`` and, when ``inputs`` are given, check it against them.

    ``options`` are the :data:`DATA_OPTIONS` as strings (from the command line)
    or Python values.  With ``inputs``, the dataset holds exactly the model's
    inputs, in the model's order; anything wrong is a one-line :class:`UsageError`.
    """
    from .pyref import is_python_ref

    text = os.fspath(source)
    parsed = parse_data_options(options, text)
    path = Path(text)
    if is_python_ref(text):
        dataset = _load_python(text)
    elif not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    elif path.is_dir():
        dataset = _load_folder(path, inputs, parsed)
    elif path.suffix == ".npz":
        arrays, labels = _load_npz(path)
        dataset = Dataset(arrays, labels, str(path))
    elif path.suffix == ".npy":
        raise UsageError(f"{path}: a single .npy file has no input name; put it in a folder as <input name>.npy, "
                         "or use an .npz file keyed by input name")
    elif path.suffix.lower() in {".txt", ".text"}:
        from .data_text import load_text

        dataset = load_text(path, inputs, parsed)
    else:
        raise UsageError(f"{path}: unsupported data format (expected an .npz file, a .txt file, a folder of "
                         ".npy/.npz/image files, or a Python reference file.py:name)")
    if inputs is not None:
        validate(dataset, inputs, dataset.source or text)
        dataset = _only_inputs(dataset, inputs)
    elif len(dataset) == 0:
        raise UsageError(f"{text}: no samples")
    return dataset
