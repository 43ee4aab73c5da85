"""Python references that ``onnxlite export`` can load: a Keras model factory and a tf.function.

    onnxlite export examples/export/keras_function.py:build_classifier -o /tmp/classifier.onnx
    onnxlite export examples/export/keras_function.py:normalize -o /tmp/normalize.onnx
    onnxlite export examples/export/keras_function.py:untyped --input x:float32[batch,8] -o /tmp/untyped.onnx

``build_classifier`` takes no arguments, so onnxlite calls it to get the model;
``normalize`` declares its inputs with ``input_signature`` (``None`` dims become
``batch``/``dim1``); ``untyped`` does not, so its inputs come from ``--input``.
"""

from __future__ import annotations

import tensorflow as tf

MEAN = tf.constant([0.5, -1.0, 2.0, 0.0, 1.0, 3.0, -2.0, 0.25])


def build_classifier():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((8,), name="features"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dropout(0.2),  # off at inference, in TF and in the ONNX graph alike
        keras.layers.Dense(3, activation="softmax", name="probabilities"),
    ])


@tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
def normalize(x):
    centered = x - MEAN
    return {"centered": centered, "norm": tf.norm(centered, axis=1)}


@tf.function
def untyped(x):
    return tf.nn.softplus(x) - MEAN
