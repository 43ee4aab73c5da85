"""A folder of images as data for a model with one image input.

Images are read with Pillow, converted to the model's channel count, resized,
scaled to 0..1 (float inputs), normalized with ``mean``/``std`` and laid out as
NCHW or NHWC.  What the user does not say is taken from the model's input
(size from its fixed dims, layout from where the 1 or 3 channels sit).
Class subfolders (``folder/cat/*.png``, ``folder/dog/*.png``) give labels: the
class index in sorted folder order; a flat folder may carry ``labels.npy``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..inputs import InputSpec

#: images decoded per chunk: enough to keep PIL busy, small enough to stream
CHUNK = 32
DEFAULT_NAME = "image"


def _image_files(folder: Path) -> tuple[list[Path], list[int] | None]:
    from .dataset import IMAGE_SUFFIXES

    def images_in(where: Path) -> list[Path]:
        return sorted(p for p in where.iterdir()
                      if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith("."))

    flat = images_in(folder)
    if flat:
        return flat, None
    files: list[Path] = []
    labels: list[int] = []
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    for index, sub in enumerate(classes):
        found = images_in(sub)
        files += found
        labels += [index] * len(found)
    if not files:
        raise UsageError(f"{folder}: no image files (looked for {', '.join(IMAGE_SUFFIXES)}, "
                         "also one level down in class folders)")
    return files, labels


def _parse_size(text: str, where: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX,]\s*(\d+))?\s*", str(text))
    if not match or int(match.group(1)) <= 0 or (match.group(2) and int(match.group(2)) <= 0):
        raise UsageError(f"{where}: data option size={text!r}: expected SIZE or HEIGHTxWIDTH, e.g. 224 or 224x224")
    height = int(match.group(1))
    return height, int(match.group(2) or height)


class _Plan:
    """How to turn one picture into the model's input."""

    def __init__(self, folder: Path, inputs: Sequence[InputSpec] | None, options: dict[str, Any]) -> None:
        where = str(folder)
        spec = None
        if inputs is not None:
            if len(inputs) != 1:
                raise UsageError(f"{where}: a folder of images feeds a model with one input; this model has "
                                 f"{len(inputs)} ({', '.join(s.name for s in inputs)})")
            spec = inputs[0]
            if len(spec.shape) not in (3, 4):
                raise UsageError(f"{where}: input {spec.name!r} has shape {list(spec.shape)}; images need "
                                 "rank 4 (NCHW or NHWC) or rank 3 (grey, N x H x W)")
        self.name = spec.name if spec else DEFAULT_NAME
        self.dtype = spec.dtype if spec else "float32"
        shape = list(spec.shape) if spec else ["batch", None, None, None]
        rank = len(shape)

        layout = options.get("layout")
        if rank == 3:
            layout = "NHW"
        elif layout is None:
            first, last = shape[1], shape[3]
            layout = "NHWC" if (last in (1, 3) and first not in (1, 3)) else "NCHW"
        self.layout = layout
        channel_dim = None if rank == 3 else shape[1 if layout == "NCHW" else 3]
        color = options.get("color")
        if color is None:
            color = "L" if (rank == 3 or channel_dim == 1) else "RGB"
        channels = 1 if color == "L" else 3
        if isinstance(channel_dim, int) and channel_dim != channels:
            raise UsageError(f"{where}: color={color} gives {channels} channel(s), input {self.name!r} "
                             f"expects {channel_dim} (shape {list(shape)})")
        self.color, self.channels = color, channels

        spatial = shape[1:3] if layout in ("NHWC", "NHW") else shape[2:4]
        if options.get("size"):
            self.size: tuple[int, int] | None = _parse_size(options["size"], where)
            fixed = [d for d in spatial if isinstance(d, int)]
            wanted = tuple(d if isinstance(d, int) else s for d, s in zip(spatial, self.size))
            if spec and fixed and wanted != self.size:
                raise UsageError(f"{where}: size={options['size']} does not fit input {self.name!r} "
                                 f"of shape {list(shape)}")
        elif isinstance(spatial[0], int) and isinstance(spatial[1], int):
            self.size = (spatial[0], spatial[1])
        else:
            self.size = None  # keep each image's size (they must then agree)

        self.scale = bool(options.get("scale", True))
        self.mean = self._per_channel(options.get("mean"), "mean", where)
        self.std = self._per_channel(options.get("std"), "std", where)
        if self.std is not None and any(s == 0 for s in self.std):
            raise UsageError(f"{where}: data option std must not contain 0")

    def _per_channel(self, values: Any, what: str, where: str) -> tuple[float, ...] | None:
        if not values:
            return None
        values = tuple(values)
        if len(values) not in (1, self.channels):
            raise UsageError(f"{where}: data option {what} has {len(values)} values; "
                             f"give 1 or {self.channels} (one per channel)")
        return values

    def convert(self, path: Path) -> Any:
        import numpy as np
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(path) as image:
                image = image.convert(self.color)
                if self.size is not None and image.size != (self.size[1], self.size[0]):
                    image = image.resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
                pixels = np.asarray(image)
        except (OSError, UnidentifiedImageError) as exc:
            raise UsageError(f"{path}: not a readable image ({type(exc).__name__}: {exc})") from None
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        target = np.dtype(self.dtype if self.dtype != "bfloat16" else "float32")
        if target.kind == "f":
            values = pixels.astype(np.float32)
            if self.scale:
                values /= 255.0
            if self.mean is not None:
                values -= np.asarray(self.mean, dtype=np.float32)
            if self.std is not None:
                values /= np.asarray(self.std, dtype=np.float32)
            values = values.astype(target)
        else:
            values = pixels.astype(target)
        if self.layout == "NCHW":
            values = values.transpose(2, 0, 1)
        elif self.layout == "NHW":
            values = values[:, :, 0]
        return values


def load_image_folder(folder: Path, inputs: Sequence[InputSpec] | None, options: dict[str, Any]):
    """A streamed :class:`~onnxlite.data.Dataset` over the images in ``folder``."""
    import numpy as np

    from .dataset import LABELS_KEY, Dataset

    try:
        import PIL  # noqa: F401
    except ImportError:
        raise UsageError(f"{folder}: reading images needs Pillow: pip install 'onnxlite[images]'") from None
    files, class_labels = _image_files(folder)
    plan = _Plan(folder, inputs, options)
    labels = None
    if class_labels is not None:
        labels = np.asarray(class_labels, dtype=np.int64)
    elif (folder / f"{LABELS_KEY}.npy").is_file():
        labels = np.load(folder / f"{LABELS_KEY}.npy", allow_pickle=False)

    def chunks() -> Iterator[dict[str, Any]]:
        for start in range(0, len(files), CHUNK):
            pictures = [plan.convert(f) for f in files[start:start + CHUNK]]
            shapes = {p.shape for p in pictures}
            if len(shapes) > 1:
                raise UsageError(f"{folder}: images differ in size ({', '.join(map(str, sorted(shapes)))}); "
                                 "give data option size=HxW")
            yield {plan.name: np.stack(pictures)}

    return Dataset(labels=labels, source=str(folder), chunks=chunks, length=len(files))
