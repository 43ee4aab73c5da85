"""The two data sets of a ``lighten`` run: calibration samples, and held-out samples that judge.

Given only one set, it is split so that no sample both calibrates and judges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError


@dataclass(frozen=True)
class DataSets:
    """The run's calibration samples and held-out samples, and how they were come by, in words."""

    calibration: Any          # Dataset, a path, or None
    held_out: Any             # Dataset or None (generated samples)
    description: str


def hf_tokenizer_default(source: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Text data for a transformers folder needs no tokenizer option: the folder has one."""
    options = dict(options or {})
    folder = Path(source)
    if "tokenizer" not in options and folder.is_dir() and (folder / "tokenizer_config.json").exists():
        options["tokenizer"] = str(folder)
    return options


def split_data(data: Any, calibration: Any, specs: Sequence[Any], data_options: Mapping[str, Any],
                calibration_options: Mapping[str, Any], split: float) -> DataSets:
    from ..data import load_data

    if data is not None and calibration is not None:
        held = load_data(data, specs, data_options)
        return DataSets(load_data(calibration, specs, calibration_options), held,
                     f"judged on {len(held)} samples of {data}; calibrated on {calibration}")
    if data is None and calibration is None:
        return DataSets(None, None, "judged on generated samples (pass --data for real ones); no calibration data")
    path, options = (data, data_options) if data is not None else (calibration, calibration_options)
    dataset = load_data(path, specs, options)
    if len(dataset) < 2:
        raise UsageError(f"{path}: needs at least 2 samples to split into calibration and held-out parts")
    calib, held = dataset.split(split)
    return DataSets(calib, held, f"{path}: {len(calib)} samples calibrate, the other {len(held)} judge (held out)")


def write_calibration(dataset: Any, target: Path) -> Path:
    import numpy as np

    arrays = dict(dataset.arrays)
    np.savez(target, **arrays)
    return target


#: generated samples that calibrate the strategies that may (``calibrates_on_generated``) when no data is given
GENERATED_CALIBRATION = 64
#: their seed, far from the judge's generated batches (seeds 1, 2, ...), so no sample both calibrates and judges
GENERATED_SEED = 10_000


def generated_calibration(specs: Sequence[Any], target: Path, seq: int) -> Path:
    """Write generated, padded samples for the strategies whose calibration only finds structure."""
    import numpy as np

    from ..inputs import make_feeds

    feeds = make_feeds(specs, batch=GENERATED_CALIBRATION, seq=seq, seed=GENERATED_SEED, pad=True)
    np.savez(target, **feeds)  # type: ignore[arg-type]  # numpy's stub: '**' read as allow_pickle
    return target


#: held-out samples the export check runs on when the user gave data
EXPORT_SAMPLES = 4


def export_samples(held_out: Any, specs: Sequence[Any]) -> Any:
    """The first held-out samples, for the export check; None when the data is generated.

    The user's data holds the sizes the model really takes: a detector whose graph needs
    particular image sizes fails on invented ones (``Add ... broadcast``).  A fixed batch axis
    (an Ultralytics export's 1) caps the count.
    """
    if held_out is None:
        return None
    fixed = [s.shape[0] for s in specs if s.shape and isinstance(s.shape[0], int)]
    return held_out.take(min([EXPORT_SAMPLES, *fixed]))
