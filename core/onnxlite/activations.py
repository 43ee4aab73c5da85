"""Reading a model's intermediate tensors: what partial quantization and SmoothQuant measure.

The tensors are exposed as extra graph outputs of a copy of the model, and
the copy runs with graph optimizations off, since fusions could remove the
very tensors we ask for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx


def expose(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the tensors ``names``."""
    import onnx
    from onnx import helper

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in present:
            exposed.graph.output.append(helper.make_empty_tensor_value_info(name))
    return exposed


#: Weights above this many bytes go through a temporary file with external data:
#: a serialized protobuf cannot exceed 2 GB.
INLINE_LIMIT = 1_800_000_000


def iter_activations(model: onnx.ModelProto, names: Sequence[str], feeds: Iterable[Mapping[str, np.ndarray]],
                     threads: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """For each feed dict, the values of ``names`` (graph inputs are read from the feeds themselves)."""
    import shutil
    import tempfile

    import onnx
    import onnxruntime as ort

    from .runtime import SessionSettings, session_options

    graph_inputs = {i.name for i in model.graph.input}
    computed = [n for n in names if n not in graph_inputs]
    options = session_options(SessionSettings(threads=threads, graph_optimization="disable"))
    exposed = expose(model, computed)
    scratch = None
    try:
        if sum(len(t.raw_data) for t in exposed.graph.initializer) < INLINE_LIMIT:
            source = exposed.SerializeToString()
        else:
            scratch = tempfile.mkdtemp(prefix="onnxlite-activations-")
            source = f"{scratch}/exposed.onnx"
            onnx.save_model(exposed, source, save_as_external_data=True, all_tensors_to_one_file=True,
                            location="exposed.onnx.data", size_threshold=1024)
        del exposed
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in session.get_inputs()]
        for feed in feeds:
            values = dict(zip(computed, session.run(computed, {k: feed[k] for k in inputs}) if computed else []))
            yield {n: values[n] if n in values else feed[n] for n in names}
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
