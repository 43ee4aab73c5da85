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

import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from onnxlite import FrameworkSpec, OnnxliteError, Option, UsageError, hookimpl
from onnxlite.pyref import needs_arguments

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


# --------------------------------------------------------------------------- imports


def _import_tf():
    # Set before the first import only (setdefault keeps the user's choice).
    # TF_CPP_MIN_LOG_LEVEL alone no longer hides the oneDNN banner, which TF
    # prints before its logging is set up; turning oneDNN's custom kernels off
    # also makes TF a steadier fp32 reference, and TF only serves as that here.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    import tensorflow as tf

    tf.get_logger().setLevel(logging.ERROR)
    return tf


def _import_keras():
    _import_tf()
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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _from_keras_file(path: Path) -> TensorFlowSource:
    keras = _import_keras()
    try:
        # compile=False: we only run inference, and a custom loss must not stop the export.
        model = keras.models.load_model(path, compile=False)
    except Exception as exc:
        raise UsageError(f"{path}: cannot load as a Keras model ({_one_line(exc)}); if it uses custom "
                         "layers, pass a Python reference (file.py:name) that builds or loads it") from exc
    return _keras_source(model, str(path), "keras-file")


def _from_saved_model(path: Path, signature: str) -> TensorFlowSource:
    tf = _import_tf()
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise UsageError(f"{path}: cannot load the SavedModel ({_one_line(exc)})") from exc
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
    tf = _import_tf()
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
    tf = _import_tf()
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
                                 f"failed: {_one_line(exc)}") from exc
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
        tf = _import_tf()
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


# --------------------------------------------------------------------------- source model


class TensorFlowSource:
    """A loaded TensorFlow model: runs in TF and exports through tf2onnx.

    ``call`` takes ``{input name: tf.Tensor}`` and returns whatever the model
    returns; :meth:`_named` flattens that to ``{output name: tensor}`` so that
    :meth:`run` and the exported ONNX graph agree on output names.
    """

    def __init__(self, call: Any, tf_specs: Mapping[str, Any] | None, source: str, kind: str,
                 description: str, output_names: Sequence[str] = (), loaded: Any = None):
        self._call = call
        self._tf_specs = dict(tf_specs) if tf_specs else None
        self.source = source
        self.kind = kind
        self.description = description
        self._output_names = list(output_names)
        # Keep the loaded object alive: a SavedModel's signature functions hold only weak references.
        self._loaded = loaded

    # -- SourceModel protocol

    def input_specs(self) -> list:
        from onnxlite.inputs import InputSpec, normalize_dtype

        if not self._tf_specs:
            raise UsageError(f"{self.source}: cannot tell the inputs of this {self.description}; "
                             "pass them with --input NAME:DTYPE[dims], e.g. --input x:float32[batch,16]")
        specs = []
        for name, spec in self._tf_specs.items():
            if spec.shape.rank is None:
                raise UsageError(f"{self.source}: input {name!r} has unknown rank; pass it with --input")
            dims = tuple(int(d) if d is not None else ("batch" if i == 0 else f"dim{i}")
                         for i, d in enumerate(spec.shape.as_list()))
            dtype = spec.dtype.name
            if dtype == "string":
                raise UsageError(f"{self.source}: input {name!r} is a string tensor; ONNX export of string "
                                 "preprocessing is not supported, export the model behind it instead")
            specs.append(InputSpec(name, normalize_dtype(dtype, f"{self.source}: input {name!r}"), dims).with_role())
        return specs

    def run(self, feeds: Mapping[str, Any]) -> dict:
        import numpy as np

        tf = _import_tf()
        tensors = {}
        for name, value in feeds.items():
            spec = (self._tf_specs or {}).get(name)
            array = np.asarray(value)
            if spec is not None and array.dtype != spec.dtype.as_numpy_dtype:
                # TF will not take int64 data for an int32 input: give it the dtype the model declares.
                array = array.astype(spec.dtype.as_numpy_dtype)
            tensors[name] = tf.convert_to_tensor(array)
        return {name: tensor.numpy() for name, tensor in self._named(self._call(tensors)).items()}

    def export(self, path: Path, inputs: Sequence[Any], sample: Mapping[str, Any], opset: int,
               options: Mapping[str, Any]) -> dict[str, str]:
        tf = _import_tf()
        import tf2onnx
        from tf2onnx import constants as tf2onnx_constants

        if options.get("exporter") not in (None, "", "tf2onnx"):
            raise UsageError(f"--exporter {options['exporter']}: TensorFlow sources are always converted "
                             "with tf2onnx; drop --exporter")
        if not inputs:
            inputs = self.input_specs()
        signature = [tf.TensorSpec([d if isinstance(d, int) else None for d in spec.shape],
                                   tf.as_dtype(spec.dtype), name=spec.name) for spec in inputs]
        names = [spec.name for spec in inputs]

        @tf.function(input_signature=signature)
        def graph_fn(*args):
            outputs = self._named(self._call(dict(zip(names, args))))
            # identity: two names for one tensor would otherwise collide in tf2onnx's renaming
            return {name: tf.identity(t) for name, t in outputs.items()}

        max_opset = max(tf2onnx_constants.OPSET_TO_IR_VERSION)
        used_opset = min(int(opset), max_opset)
        with _captured_tf2onnx_log() as errors:
            try:
                model = convert_function(graph_fn, len(signature), used_opset)
            except UsageError:
                raise
            except Exception as exc:
                raise OnnxliteError(f"{self.source}: tf2onnx failed to convert the {self.description} "
                                    f"({_one_line(exc)})") from exc
        _raise_on_unsupported(model, errors, self.source, used_opset, max_opset)
        _name_input_dims(model, inputs)
        _name_output_dims(model)

        from onnxlite.modelio import save_model

        save_model(model, path)
        import json

        import keras

        # Same keys as the PyTorch plugin, so reports read alike across frameworks.
        provenance = {
            "onnxlite.exporter": "tf2onnx",
            "onnxlite.versions": json.dumps({"tensorflow": tf.__version__, "keras": keras.__version__,
                                             "tf2onnx": tf2onnx.__version__}, sort_keys=True),
            "onnxlite.source_kind": self.kind,
            "onnxlite.conversion": (f"{self.description} -> tf.function with input signature -> "
                                    f"tf2onnx.convert.from_graph_def, opset {used_opset}"),
        }
        if used_opset != int(opset):
            provenance["onnxlite.opset_note"] = (f"opset {opset} was asked; tf2onnx {tf2onnx.__version__} "
                                                 f"converts up to {max_opset}, so {used_opset} was used")
        return provenance

    # -- helpers

    def _named(self, result: Any) -> dict:
        """Flatten a model's return value to ``{output name: tensor}``."""
        tf = _import_tf()
        hints = self._output_names
        if tf.is_tensor(result):
            return {hints[0] if len(hints) == 1 else "output": result}
        if isinstance(result, Mapping) and all(tf.is_tensor(v) for v in result.values()):
            return {str(k): v for k, v in result.items()}
        if isinstance(result, (list, tuple)) and all(tf.is_tensor(v) for v in result):
            names = hints if len(hints) == len(result) else [f"output_{i}" for i in range(len(result))]
            return dict(zip(names, result))
        named = {}
        for path, value in tf.nest.flatten_with_joined_string_paths(result):
            if not tf.is_tensor(value):
                raise OnnxliteError(f"{self.source}: the model returns a {type(value).__name__} at {path!r}; "
                                    "only tensors can be exported")
            named[f"output_{path}" if path.isdigit() else path.replace("/", ".")] = value
        return named


def convert_function(graph_fn: Any, n_inputs: int, opset: int) -> Any:
    """``tf2onnx.convert.from_function``, except that captured tensors stay constants.

    ``from_function`` makes every non-resource input of the concrete function
    an ONNX graph input, including tensors the function captured from Python
    (a module-level ``tf.constant``); those come after the real arguments, so
    we freeze with the first ``n_inputs`` only and convert the frozen graph.
    """
    import tensorflow as tf
    import tf2onnx
    from tf2onnx import tf_loader

    concrete = graph_fn.get_concrete_function()
    input_names = [t.name for t in concrete.inputs[:n_inputs]]
    if any(t.dtype == tf.dtypes.resource for t in concrete.inputs[:n_inputs]):
        raise OnnxliteError("tf2onnx: unexpected resource input among the model's inputs")
    output_names = [t.name for t in concrete.outputs if t.dtype != tf.dtypes.resource]
    renames = tf2onnx.convert.tensor_names_from_structed(concrete, input_names, output_names)
    with tf.device("/cpu:0"):
        frozen = tf_loader.from_function(concrete, input_names, output_names)
    model, _ = tf2onnx.convert.from_graph_def(frozen, name=concrete.name, input_names=input_names,
                                              output_names=output_names, opset=opset,
                                              tensors_to_rename=renames,
                                              custom_op_handlers=CUSTOM_OP_HANDLERS)
    return model


def _erfc(ctx: Any, node: Any, name: str, args: Any) -> None:
    """TF ``Erfc`` as ONNX ``1 - Erf(x)``.

    TensorFlow's exact GELU (Keras ``activation="gelu"``) became
    ``0.5 * x * erfc(-x / sqrt(2))``, and tf2onnx 1.17 has no mapping for
    ``Erfc`` (onnx/tensorflow-onnx#2347, the rewriter in #2463 is unmerged and
    needs opset 20).  ONNX has ``Erf`` since opset 9.  ``1 - erf`` loses the
    tiny tail ``erfc`` keeps for large arguments, but GELU multiplies that tail
    by ``0.5 * x`` next to the other branch, so the output moves by float32
    rounding only; the export check against TensorFlow says so on every export.
    """
    import numpy as np
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.output[0]))
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype=dtype))
    # Consumers of the Erf node now read 1 - Erf(x).
    ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name(f"{name}_one_minus"),
                                  inputs=[one.output[0], node.output[0]])


#: tf2onnx's old-style handlers, ``{tf op: (function, args)}``, for ops it cannot convert itself.
CUSTOM_OP_HANDLERS: dict[str, tuple[Any, list[Any]]] = {"Erfc": (_erfc, [])}


@contextmanager
def _captured_tf2onnx_log():
    """Collect tf2onnx's error log lines (unsupported ops, failed nodes) instead of printing them."""
    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                errors.append(record.getMessage().splitlines()[0])

    logger = logging.getLogger("tf2onnx")
    handler = Collect()
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.ERROR)
    try:
        yield errors
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = saved[0], saved[1]


def _raise_on_unsupported(model: Any, errors: Sequence[str], source: str, opset: int, max_opset: int) -> None:
    """tf2onnx continues past ops it cannot map and leaves them in the graph; refuse such a model."""
    import collections

    import onnx

    from onnxlite.subgraphs import iter_graphs

    left: collections.Counter = collections.Counter()
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
                left[node.op_type] += 1
    failed = [line for line in errors if line.startswith("Failed to convert node")]
    if not left and not failed:
        return
    parts = []
    if left:
        parts.append("unsupported TensorFlow ops " + ", ".join(f"{op} (x{n})" if n > 1 else op
                                                             for op, n in sorted(left.items())))
    if failed:
        parts.append(f"{len(failed)} node(s) failed to convert: {failed[0]}")
    other = f" another --opset (up to {max_opset})," if opset < max_opset else ""
    raise OnnxliteError(f"{source}: tf2onnx cannot convert {'; '.join(parts)} at opset {opset}; "
                        f"try{other} rewriting the model without them, or a framework plugin "
                        "with tf2onnx custom-op handlers")


def _name_input_dims(model: Any, inputs: Sequence[Any]) -> None:
    """tf2onnx names unknown dims ``unk__N``; use the input specs' names (``batch``, ``dim1``)."""
    by_name = {spec.name: spec for spec in inputs}
    for value in model.graph.input:
        spec = by_name.get(value.name)
        if spec is None:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) != len(spec.shape):
            continue
        for dim, want in zip(dims, spec.shape):
            if isinstance(want, str):
                dim.ClearField("dim_value")
                dim.dim_param = want


def _name_output_dims(model: Any) -> None:
    """Replace tf2onnx's ``unk__N`` output dims with what ONNX shape inference derives from the inputs.

    The input dims carry the spec names by now, so inference usually finds
    ``batch`` for the outputs' first axis; any dim it cannot tell stays as it was.
    """
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    # Stale tf2onnx shapes would win over the inferred ones.
    del probe.graph.value_info[:]
    for value in probe.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param.startswith("unk__"):
                dim.ClearField("dim_param")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe)
    except Exception:  # noqa: BLE001 - names are cosmetic; the model itself is unchanged
        return
    found = {value.name: value for value in inferred.graph.output}
    for value in model.graph.output:
        better = found.get(value.name)
        if better is None:
            continue
        dims, new = value.type.tensor_type.shape.dim, better.type.tensor_type.shape.dim
        if len(dims) != len(new):
            continue
        for dim, other in zip(dims, new):
            if dim.dim_param.startswith("unk__") and (other.dim_param or other.dim_value > 0):
                if other.dim_param:
                    dim.dim_param = other.dim_param
                else:
                    dim.ClearField("dim_param")
                    dim.dim_value = other.dim_value
