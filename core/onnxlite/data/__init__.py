"""Calibration and evaluation data (docs/calibration.md): ``load_data(source, inputs, options)`` -> :class:`Dataset`.

``dataset`` holds the record, ``load`` the formats and options, ``images`` and
``text`` the two formats that need a decoder (Pillow, a tokenizer).
"""

from .dataset import IMAGE_SUFFIXES, LABELS_KEY, Dataset, validate
from .load import DATA_OPTIONS, load_data, parse_data_options

__all__ = ["DATA_OPTIONS", "IMAGE_SUFFIXES", "LABELS_KEY", "Dataset", "load_data", "parse_data_options", "validate"]
