"""A public calibration reader for plugin authors: feeds from a :class:`~onnxlite.data.Dataset` (or any
iterable of ``{input name: array}`` feed dicts, which is what ``QuantizeContext.calibration`` holds) in the
shape onnxruntime's ``CalibrationDataReader`` expects.

Each sample the host passes is one feed dict of batch 1 (``{"input_ids": int64[1, seq]}``); the reader
joins them into batches of ``batch_size`` when the data is a Dataset.  It imports nothing heavy: onnxruntime
reads it through ``get_next()`` (duck typing), so no onnxruntime base class is needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .errors import UsageError


class CalibrationReader:
    """An onnxruntime ``CalibrationDataReader`` over a Dataset (or any iterable of feed dicts).

    ``len`` and ``set_range`` let ``quantize_static`` calibrate in strides
    (``CalibStridedMinMax``): the calibrator collects one stride, folds it into
    its ranges or histograms and drops the activations before the next, which
    keeps memory bounded however big the calibration set is.
    """

    def __init__(self, data: Any, batch_size: int = 1, limit: int = 0, uniform: bool = False,
                 names: Iterable[str] | None = None) -> None:
        if not (hasattr(data, "take") and hasattr(data, "batches")) and iter(data) is data:
            data = list(data)  # a one-shot iterator: it is read to count it, then again to calibrate
        self.data = data
        self.batch_size = max(1, batch_size)
        self.limit = limit
        self.uniform = uniform
        self.names = list(names) if names is not None else None
        self._iter: Iterator[dict[str, Any]] | None = None
        self._pos = 0
        self._start: int = 0
        self._end: int | None = None
        self._count: int | None = None          # what len() reports; set_count pads it
        self._shapes: dict[str, tuple[int, ...]] = {}
        self.samples_seen = 0

    def _all_batches(self) -> Iterator[dict[str, Any]]:
        import numpy as np

        data = self.data
        if hasattr(data, "take") and hasattr(data, "batches"):
            if self.limit:
                data = data.take(self.limit)
            source: Iterable[Mapping[str, Any]] = data.batches(self.batch_size)
        else:
            source = data
        left = self.limit or None
        for feed in source:
            feed = {k: np.asarray(v) for k, v in feed.items()}
            if self.names is not None:
                feed = {k: feed[k] for k in self.names if k in feed}
            if left is not None:
                rows = next(iter(feed.values())).shape[0]
                if rows > left:
                    feed = {k: v[:left] for k, v in feed.items()}
                left -= min(rows, left)
            yield feed
            if left == 0:
                return

    def __len__(self) -> int:
        # quantize_static asks only when striding; a padded count (see StaticQuantizer) may be set.
        if self._count is None:
            self._count = sum(1 for _ in self._all_batches())
        return self._count

    def set_count(self, batches: int) -> None:
        """Report ``batches`` from ``len()``: ``quantize_static`` wants the count to divide by its stride, and
        the reader ends the last stride early (``get_next`` returns None) when the data runs out."""
        self._count = int(batches)

    def set_range(self, start_index: int, end_index: int | None) -> None:
        # Strides arrive in order: carry on with the same pass instead of re-reading from the start.
        if self._iter is None or start_index < self._pos:
            self._iter, self._pos = None, 0
        self._start, self._end = start_index, end_index

    def get_next(self) -> dict[str, Any] | None:
        if self._iter is None:
            self._iter, self._pos = self._all_batches(), 0
        while self._pos < self._start:
            if next(self._iter, None) is None:
                return None
            self._pos += 1
        if self._end is not None and self._pos >= self._end:
            return None
        feed = next(self._iter, None)
        if feed is None:
            return None
        self._pos += 1
        self._check_uniform(feed)
        self.samples_seen += next(iter(feed.values())).shape[0]
        return feed

    def _check_uniform(self, feed: Mapping[str, Any]) -> None:
        if not self.uniform:
            return
        for name, array in feed.items():
            seen = self._shapes.setdefault(name, tuple(array.shape))
            if tuple(array.shape) != seen:
                raise UsageError(f"calibration input {name!r}: samples of shape {list(seen)} and "
                                 f"{list(array.shape)}; histogram calibration (Entropy, Percentile, "
                                 "Distribution) needs samples of one shape (pad text to max_length), "
                                 "or use method=MinMax")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        feed = self.get_next()
        if feed is None:
            raise StopIteration
        return feed
