"""The PP-OCR mobile v2.0 text direction classifier shipped in ``rapidocr-onnxruntime==1.4.4``, on rendered text lines.

The network is the ``.onnx`` file inside the wheel (Apache-2.0): a Paddle2ONNX export of a MobileNetV3-style
depthwise CNN that tells a text line the right way up from one turned 180 degrees (2 classes, a Softmax at
the end).  Install the wheel without its dependencies (opencv, shapely, pyclipper): onnxlite reads the file
only and never imports the package.  The lines are rendered with Pillow in the DejaVu fonts and
pre-processed as rapidocr's ``TextClassifier`` does (BGR, [-1, 1], 48 high, right-padded to 192), every
other one turned 180 degrees; the renderer is ``benchmarks/real_models/models.py``'s, so the figures
compare with ``benchmarks/recovery.py``'s.  Calibration, held-out and evaluation lines come from different
seeds, and calibration shares no word with the other two.

    pip install --no-deps rapidocr-onnxruntime==1.4.4
    python examples/ppocr_cls/ppocr_cls.py WORKDIR        # writes calibration/heldout/evaluation .npz
    onnxlite lighten "$(python examples/ppocr_cls/ppocr_cls.py --model)" \\
        --calibration WORKDIR/calibration.npz --data WORKDIR/heldout.npz \\
        --metric top1_agreement_confident --max-drop 3% -o WORKDIR/lightened
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

#: the input name inside the shipped graph
INPUT = "x"
MEMBER = "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
#: text lines per part: the budget is judged on the held-out lines, the figures on the evaluation lines
COUNTS = {"calibration": 64, "heldout": 32, "evaluation": 128}
#: the renderer's split of each part (its evaluation seeds are ``heldout2``)
SPLITS = {"calibration": "calibration", "heldout": "heldout", "evaluation": "heldout2"}
# what benchmarks/cnn_real.py --model reads from each CNN example
NAME = "PP-OCR mobile v2.0 text direction classifier (rapidocr-onnxruntime 1.4.4, 2 classes)"
INPUT_SPEC = None       # an ONNX file: its own input
MODEL_CLASS = None
IMAGES = sum(COUNTS.values())
EVALUATION_IMAGES = COUNTS["evaluation"]
REQUIRES = {"rapidocr_onnxruntime": "pip install --no-deps rapidocr-onnxruntime==1.4.4",
            "PIL": "pip install pillow"}


@functools.cache
def _renderer():
    # the text lines benchmarks/recovery.py judges the same file on (loaded once)
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "real_models" / "models.py"
    spec = importlib.util.spec_from_file_location("real_models_for_ppocr_cls", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def source() -> str:
    """The ``.onnx`` file inside the installed ``rapidocr_onnxruntime`` package (found, not imported)."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("rapidocr-onnxruntime is not installed: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    path = Path(list(spec.submodule_search_locations)[0]) / MEMBER
    if not path.is_file():
        raise SystemExit(f"{path}: not in the installed rapidocr-onnxruntime (1.4.4 ships it)")
    return str(path)


def parts() -> dict[str, "np.ndarray"]:  # noqa: F821
    """``x`` [N, 3, 48, 192] float32 per part; odd-numbered lines are turned 180 degrees."""
    return {part: _renderer().ocr_cls_data(SPLITS[part], count) for part, count in COUNTS.items()}


def write(folder: str | Path) -> dict[str, Path]:
    import numpy as np

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for part, array in parts().items():
        paths[part] = folder / f"{part}.npz"
        np.savez(paths[part], **{INPUT: array})
    return paths


if __name__ == "__main__":
    if sys.argv[1:] == ["--model"]:
        print(source())
    elif len(sys.argv) == 2:
        for part, path in write(sys.argv[1]).items():
            print(f"{part}: {path}")
    else:
        raise SystemExit(__doc__)
