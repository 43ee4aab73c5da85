"""A small CNN trained on scikit-learn's digits (8x8 greyscale), ready for `onnxlite lighten`.

    python examples/digits_cnn/digits_cnn.py OUTDIR

trains for a few seconds and writes OUTDIR/digits_cnn.pt (a state dict),
OUTDIR/heldout.npz (pixels + labels never seen in training) and
OUTDIR/calibration.npz (training images), then prints the lighten command.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn


class DigitsNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        )
        self.head = nn.Linear(32 * 4 * 4, 10)

    def forward(self, pixels):
        return self.head(self.features(pixels).flatten(1))


def digits_split(seed: int = 0):
    """(train images, train labels, held-out images, held-out labels), images N x 1 x 8 x 8 in 0..1."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(images))
    train, held = order[:1300], order[1300:]
    return images[train], labels[train], images[held], labels[held]


def train(images: np.ndarray, labels: np.ndarray, epochs: int = 12, seed: int = 0) -> DigitsNet:
    torch.manual_seed(seed)
    net = DigitsNet()
    optim = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    net.train()
    for _ in range(epochs):
        for start in range(0, len(x), 64):
            optim.zero_grad()
            nn.functional.cross_entropy(net(x[start:start + 64]), y[start:start + 64]).backward()
            optim.step()
    return net.eval()


def prepare(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    train_x, train_y, held_x, held_y = digits_split()
    net = train(train_x, train_y)
    paths = {"weights": out / "digits_cnn.pt", "heldout": out / "heldout.npz", "calibration": out / "calibration.npz"}
    torch.save(net.state_dict(), paths["weights"])
    np.savez(paths["heldout"], pixels=held_x, labels=held_y)
    np.savez(paths["calibration"], pixels=train_x[:256])
    return paths


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "digits_work")
    made = prepare(target)
    here = Path(__file__)
    print(f"wrote {', '.join(str(p) for p in made.values())}\nnow run:\n"
          f"  onnxlite lighten {made['weights']} --model-class {here}:DigitsNet "
          f"--input 'pixels:float32[batch,1,8,8]' --data {made['heldout']} --calibration {made['calibration']} "
          f"--metric accuracy --max-drop 1% -o {target / 'lightened'}")
