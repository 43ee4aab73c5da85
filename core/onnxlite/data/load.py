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
* a folder of images for a single image input (see :mod:`onnxlite.data.images`);
* a ``.txt`` file, one sentence a line, with ``tokenizer=FOLDER`` (see :mod:`onnxlite.data.text`);
* a Python reference ``file.py:name`` to an iterable (or a zero-argument
  callable returning one) of feed dicts, as ``InferenceSession.run`` takes them:
  each input with its sample axis (not always the first: see
  :attr:`onnxlite.inputs.InputSpec.batch_axis`), scalars as they are.

Options (``--calibration-option key=value``) are declared in :data:`DATA_OPTIONS`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..specs import Option
from .dataset import IMAGE_SUFFIXES, LABELS_KEY, ChunkSource, Dataset, _only_inputs, validate

if TYPE_CHECKING:
    from ..inputs import InputSpec


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
    Option("window", int, None, "corpus for a decoder: tokens per window (default 512, at most the model's context)"),
    Option("stride", int, None, "corpus for a decoder: context tokens each window starts with, not scored "
           "(default: half the window)"),
    Option("prompt_tokens", int, None, "corpus for a decoder: greedy prompts are each window's first N tokens "
           "(default 32)"),
    Option("new_tokens", int, None, "corpus for a decoder: tokens each greedy continuation generates (default 32)"),
)


def parse_data_options(options: Mapping[str, Any] | None, where: str = "data") -> dict[str, Any]:
    """Typed values for :data:`DATA_OPTIONS` (defaults filled in); unknown keys are a UsageError."""
    from ..specs import parse_options

    return parse_options(DATA_OPTIONS, options, flag="data option", owner=where)


# -- checking ---------------------------------------------------------------------------------------------


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
    dataset = Dataset(arrays, None if labels is None else labels[:], str(folder))
    dataset.array_files = {f.stem: str(f) for f in files}
    return dataset


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
    dataset = Dataset(labels=labels, source=str(folder), chunks=chunks)
    dataset.chunk_names = [str(file) for file in files]   # chunk i is file i: problems name the file
    return dataset


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
        from .images import load_image_folder

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
    from .images import load_image_folder

    return load_image_folder(folder, inputs, options)


def _as_feed(item: Any, ref: str, index: int) -> dict[str, Any]:
    import numpy as np

    if not isinstance(item, Mapping):
        raise UsageError(f"{ref}: item {index + 1} is a {type(item).__name__}, "
                         "expected a dict of input name -> array (batch axis included)")
    # What InferenceSession.run takes: arrays with their sample axis where the model has one (a state
    # [2, n, 128] batches on axis 1), and scalars (a sample rate) as they are.
    return {str(key): np.asarray(value) for key, value in item.items()}


def _load_python(ref: str) -> Dataset:
    from ..pyref import load_python_ref

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
                raise UsageError(f"data {ref!r}: returned a {type(result).__name__}, expected an iterable of feed "
                                 f"dicts")
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
    from ..pyref import is_python_ref

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
        from .text import load_text

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
