"""Build a small two-input Keras model, save it as a .keras file and a SavedModel.

    python examples/export/keras_savedmodel.py /tmp/keras_demo
    onnxlite export /tmp/keras_demo/text.keras -o /tmp/keras_demo/text_from_keras.onnx
    onnxlite export /tmp/keras_demo/text_savedmodel -o /tmp/keras_demo/text_from_savedmodel.onnx

The model takes token ids and an attention mask of any length, so the export
keeps ``batch`` and the sequence length dynamic and is checked on padded rows.
Weights are random: this shows the export, not a trained model.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # also silences its start-up banner


def build():
    import keras
    from keras import ops

    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    mask = keras.Input((None,), dtype="int32", name="attention_mask")
    hidden = keras.layers.Embedding(1000, 32)(ids)
    weights = ops.expand_dims(ops.cast(mask, "float32"), -1)
    # Mean over real tokens only: padding must not change the answer.
    pooled = ops.sum(hidden * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)
    pooled = keras.layers.Dense(32, activation="tanh", name="pooled")(pooled)
    logits = keras.layers.Dense(4, name="logits")(pooled)
    return keras.Model([ids, mask], {"logits": logits, "pooled": pooled})


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model = build()
    model.save(out / "text.keras")
    model.export(out / "text_savedmodel", verbose=False)
    print(f"wrote {out / 'text.keras'} and {out / 'text_savedmodel'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "keras_demo")
