"""Train a tiny Keras classifier on scikit-learn's digits and save it for onnxlite.

    python examples/keras_mlp/train.py [OUT_FOLDER]      # default: examples/keras_mlp/out

Writes, in a few seconds on a laptop CPU:

* ``digits_mlp.keras``  - the Keras model (input ``pixels:float32[batch,64]``, output ``probabilities``)
* ``digits_mlp_savedmodel/`` - the same model as a SavedModel (``model.export``)
* ``digits_test.npz``   - held-out samples (``pixels``) and their ``labels``, for ``--samples``/``--data``
* ``digits_calibration.npz`` - training images (``pixels`` only) for ``--calibration``, so that every
  held-out sample judges instead of part of them calibrating

The data ship with scikit-learn, so nothing is downloaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # also silences its start-up banner

CALIBRATION_SAMPLES = 256


def main(folder: str | None = None) -> Path:
    import keras
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    out = Path(folder) if folder else Path(__file__).resolve().parent / "out"
    out.mkdir(parents=True, exist_ok=True)

    digits = load_digits()
    pixels = (digits.data / 16.0).astype("float32")  # 8x8 images, 0..16 -> 0..1
    labels = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(pixels, labels, test_size=0.25, random_state=0,
                                                        stratify=labels)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((64,), name="pixels"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax", name="probabilities"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=15, batch_size=64, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)

    model.save(out / "digits_mlp.keras")
    model.export(out / "digits_mlp_savedmodel", verbose=False)
    np.savez(out / "digits_test.npz", pixels=x_test, labels=y_test)
    # Calibration comes from the training split: static quantization must not see the images it is judged on.
    np.savez(out / "digits_calibration.npz", pixels=x_train[:CALIBRATION_SAMPLES])
    print(f"test accuracy {accuracy:.3f}; wrote {out / 'digits_mlp.keras'}, {out / 'digits_mlp_savedmodel'}, "
          f"{out / 'digits_test.npz'}, {out / 'digits_calibration.npz'}")
    return out


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
