"""A TensorFlow or Keras model behind one call, ready to run on numpy inputs and to convert with tf2onnx."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnxlite import OnnxliteError, UsageError

from .tf_convert import (
    captured_tf2onnx_log,
    convert_function,
    first_line,
    import_tf,
    name_input_dims,
    name_output_dims,
    raise_on_unsupported,
)


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

        tf = import_tf()
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
        tf = import_tf()
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
        with captured_tf2onnx_log() as errors:
            try:
                model = convert_function(graph_fn, len(signature), used_opset)
            except UsageError:
                raise
            except Exception as exc:
                raise OnnxliteError(f"{self.source}: tf2onnx failed to convert the {self.description} "
                                    f"({first_line(exc)})") from exc
        raise_on_unsupported(model, errors, self.source, used_opset, max_opset)
        name_input_dims(model, inputs)
        name_output_dims(model)

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
        tf = import_tf()
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

