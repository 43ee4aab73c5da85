"""Built-in plugin: TensorFlow and Keras sources, converted to ONNX with tf2onnx.

Sources: a SavedModel folder, a Keras ``.keras``/``.h5`` file, or a Python
reference (``file.py:name``) to a Keras model or a ``tf.function``.

Every source is converted the same way: we wrap it in a ``tf.function`` with
an explicit input signature that returns a dict of named outputs and hand that
to ``tf2onnx.convert.from_function``.  ``from_keras`` is broken on Keras 3
(``KeyError: 'keras_tensor_...'``), and the dict return makes tf2onnx name the
ONNX outputs exactly as :meth:`run` names them, which the host relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import FrameworkSpec, Option, UsageError, hookimpl
from onnxlite.pyref import needs_arguments

from .tf_convert import convert_function, first_line, import_tf
from .tf_source import TensorFlowSource

#: ``convert_function`` is the tf2onnx entry tests call directly
__all__ = ["TensorFlowExporter", "TensorFlowSource", "convert_function", "detect", "register_frameworks"]

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
DEFAULT_SIGNATURE = "serving_default"


def detect(source: str) -> bool:
    """Claim SavedModel folders and Keras files by their look alone (no TensorFlow import)."""
    path = Path(str(source))
    if path.is_dir():
        return any((path / name).is_file() for name in SAVED_MODEL_FILES)
    return path.suffix.lower() in KERAS_SUFFIXES


@hookimpl
def register_frameworks():
    return [
        FrameworkSpec(
            name="tensorflow",
            description="TensorFlow/Keras: SavedModel folder, .keras/.h5 file, or file.py:name "
                        "(Keras model or tf.function), converted with tf2onnx",
            factory=TensorFlowExporter,
            requires=("tensorflow", "tf2onnx"),
            install="onnxlite[tensorflow]",
            detect=detect,
            options=(
                Option("signature", str, DEFAULT_SIGNATURE,
                       help="SavedModel signature to export"),
            ),
        )
    ]


def _import_keras():
    import_tf()
    import keras

    return keras


# --------------------------------------------------------------------------- exporter


class TensorFlowExporter:
    """Loads TensorFlow sources into :class:`TensorFlowSource` objects."""

    def load(self, source: str, options: Mapping[str, Any]) -> TensorFlowSource:
        from onnxlite.pyref import is_python_ref, load_python_ref

        obj = options.get("python_object")
        if obj is None and is_python_ref(str(source)):
            obj = load_python_ref(str(source), "source")
        if obj is not None:
            return _from_object(obj, str(source))

        path = Path(str(source))
        if not path.exists():
            raise UsageError(f"{source}: no such file or folder")
        if path.is_dir():
            if not any((path / name).is_file() for name in SAVED_MODEL_FILES):
                raise UsageError(f"{source}: not a SavedModel folder (no saved_model.pb in it)")
            return _from_saved_model(path, options.get("signature") or DEFAULT_SIGNATURE)
        if path.suffix.lower() in KERAS_SUFFIXES:
            return _from_keras_file(path)
        raise UsageError(f"{source}: not a TensorFlow source; expected a SavedModel folder, "
                         f"a {'/'.join(KERAS_SUFFIXES)} file or file.py:name")



def _from_keras_file(path: Path) -> TensorFlowSource:
    keras = _import_keras()
    try:
        # compile=False: we only run inference, and a custom loss must not stop the export.
        model = keras.models.load_model(path, compile=False)
    except Exception as exc:
        raise UsageError(f"{path}: cannot load as a Keras model ({first_line(exc)}); if it uses custom "
                         "layers, pass a Python reference (file.py:name) that builds or loads it") from exc
    return _keras_source(model, str(path), "keras-file")


def _from_saved_model(path: Path, signature: str) -> TensorFlowSource:
    tf = import_tf()
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise UsageError(f"{path}: cannot load the SavedModel ({first_line(exc)})") from exc
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if signature not in signatures:
        have = ", ".join(sorted(signatures)) or "none"
        hint = ("pick one with --option signature=NAME (framework_options={'signature': NAME} in Python)"
                if signatures else
                "save it with tf.saved_model.save(obj, path, signatures=...) or Keras model.export(path)")
        raise UsageError(f"{path}: the SavedModel has no {signature!r} signature (signatures: {have}); {hint}")
    concrete = signatures[signature]
    _, kwargs = concrete.structured_input_signature
    # The signature's keyword names are what callers (and we) use; TensorSpec.name may differ.
    tf_specs = {key: spec for key, spec in kwargs.items()}

    def call(feeds: Mapping[str, Any]) -> Any:
        if set(feeds) != set(tf_specs):
            raise UsageError(f"{path}: inputs {', '.join(feeds)} do not match the {signature!r} signature's "
                             f"inputs {', '.join(tf_specs)}")
        return concrete(**feeds)

    return TensorFlowSource(call, tf_specs, str(path), "saved-model",
                            f"SavedModel signature {signature!r}", loaded=loaded)


def _keras_source(model: Any, source: str, kind: str) -> TensorFlowSource:
    keras = _import_keras()
    if keras.backend.backend() != "tensorflow":
        raise UsageError(f"{source}: Keras runs on the {keras.backend.backend()!r} backend; "
                         "set KERAS_BACKEND=tensorflow to export it with tf2onnx")
    tf_specs = None
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError):  # subclassed models that were never called have no inputs
        inputs = []
    tf = import_tf()
    if inputs:
        tf_specs = {t.name: tf.TensorSpec(tuple(t.shape), t.dtype, name=t.name) for t in inputs}
    try:
        output_names = list(model.output_names or [])
    except AttributeError:
        # Sequential has no output_names; Keras names a functional model's outputs after their layers.
        layers = getattr(model, "layers", None) or []
        output_names = [layers[-1].name] if layers and len(getattr(model, "outputs", None) or []) == 1 else []
    single = len(inputs) <= 1

    def call(feeds: Mapping[str, Any]) -> Any:
        if single and len(feeds) == 1:
            return model(next(iter(feeds.values())), training=False)
        if tf_specs is not None and set(feeds) != set(tf_specs):
            raise UsageError(f"{source}: inputs {', '.join(feeds)} do not match the model's inputs "
                             f"{', '.join(tf_specs)}")
        return model(dict(feeds), training=False)

    return TensorFlowSource(call, tf_specs, source, kind, f"Keras model {type(model).__name__}",
                            output_names=output_names, loaded=model)


def _from_object(obj: Any, source: str) -> TensorFlowSource:
    """A Python object: a Keras model, a tf.function, a plain TF function, or a zero-argument factory of one."""
    import inspect

    keras = _import_keras()
    tf = import_tf()
    if isinstance(obj, keras.Model) or isinstance(obj, keras.layers.Layer):
        return _keras_source(obj, source, "python")
    if isinstance(obj, (tf.types.experimental.PolymorphicFunction, tf.types.experimental.GenericFunction)):
        return _function_source(obj, source)
    if inspect.isclass(obj) or callable(obj):
        if inspect.isclass(obj) or not needs_arguments(obj):
            # A factory (class or function without arguments) that builds the model.
            try:
                built = obj()
            except Exception as exc:
                raise UsageError(f"source {source!r}: calling {getattr(obj, '__name__', obj)}() "
                                 f"failed: {first_line(exc)}") from exc
            if isinstance(built, keras.Model) or isinstance(built, tf.types.experimental.GenericFunction):
                return _from_object(built, source)
            raise UsageError(f"source {source!r}: {getattr(obj, '__name__', obj)}() returned "
                             f"{type(built).__name__}, not a Keras model or tf.function")
        return _function_source(tf.function(obj), source)
    raise UsageError(f"source {source!r}: {type(obj).__name__} is not a Keras model or tf.function")


def _function_source(fn: Any, source: str) -> TensorFlowSource:
    import inspect

    signature = getattr(fn, "input_signature", None)
    python_fn = getattr(fn, "python_function", fn)
    try:
        params = [p.name for p in inspect.signature(python_fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    tf_specs = None
    if signature:
        tf = import_tf()
        flat = tf.nest.flatten(signature)
        if len(flat) != len(signature):
            raise UsageError(f"source {source!r}: nested input_signature is not supported; "
                             "give the function one TensorSpec per argument")
        tf_specs = {}
        for i, spec in enumerate(flat):
            name = params[i] if i < len(params) else (spec.name or f"input_{i}")
            tf_specs[name] = spec
    order = list(tf_specs) if tf_specs else params

    def call(feeds: Mapping[str, Any]) -> Any:
        if set(feeds) <= set(params):
            return fn(**feeds)
        # Names the user chose with --input that are not parameter names: bind by position.
        if order and set(feeds) == set(order):
            return fn(*(feeds[name] for name in order))
        return fn(*feeds.values())

    return TensorFlowSource(call, tf_specs, source, "python", f"tf.function {getattr(python_fn, '__name__', '')}")

