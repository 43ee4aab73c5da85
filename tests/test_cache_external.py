"""The result cache covers models with external data (issue 24): keyed on every byte the model reads,
both files stored and restored.  Real searches on a small MLP saved with ``save_as_external_data``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnxlite
from onnxlite.jobs.candidate import JobResult
from onnxlite.modelio import external_data_files, model_hash
from onnxlite.search.cache import CACHE_VERSION, ResultCache

from helpers import SeenExecutor, make_mlp


def _search(model: Path, out: Path, cache: Path, data: str, executor=None):
    return onnxlite.lighten(str(model), out, strategies=["dynamic", "fp16"], max_drop="5%", metric="cosine_mean",
                            runs=2, partial=False, data=data, cache_dir=cache, executor=executor)


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_a_model_with_external_data_hits_on_a_rerun_and_misses_when_its_data_changes(tmp_path):
    model = make_mlp(tmp_path / "src" / "mlp.onnx", external=True)
    assert external_data_files(model), "the test model must keep its weights in a side file"
    rng = np.random.default_rng(0)
    data = tmp_path / "held.npz"
    np.savez(data, x=rng.standard_normal((96, 32)).astype(np.float32))
    cache = tmp_path / "cache"

    first = _search(model, tmp_path / "a", cache, str(data))
    stored = first.settings["cache"]["stored"]
    assert stored >= 2 and first.settings["cache"]["hits"] == 0, first.settings["cache"]
    entries = [p for p in (cache / f"v{CACHE_VERSION}").rglob("result.json")]
    assert any(len(os.listdir(p.parent)) > 2 for p in entries), "no entry holds a model's external data file"

    seen = SeenExecutor()
    again = _search(model, tmp_path / "b", cache, str(data), executor=seen)
    assert seen.names == [] and again.settings["cache"]["hits"] == stored, (seen.names, again.settings["cache"])
    # the same judgements (the winner may differ: two candidates this small tie on speed)
    assert {r.name: r.drops for r in again.candidates} == {r.name: r.drops for r in first.candidates}
    assert again.winner is not None and again.model_path is not None
    x = rng.standard_normal((4, 32)).astype(np.float32)
    assert _run(again.model_path, x).shape == (4, 8)   # published from the cache with its data file

    # the same .onnx file, other weights in its data file: every candidate runs again
    (side,) = external_data_files(model)
    header = model.read_bytes()
    side.write_bytes((np.frombuffer(side.read_bytes(), np.float32) * 1.5).astype(np.float32).tobytes())
    assert model.read_bytes() == header   # only the data file changed
    seen = SeenExecutor()
    changed = _search(model, tmp_path / "c", cache, str(data), executor=seen)
    assert changed.settings["cache"]["hits"] == 0 and len(seen.names) >= 2, changed.settings["cache"]


def test_a_restored_model_takes_its_own_data_file_name(tmp_path):
    """Restored next to a model whose data file has the cached one's name, it leaves that file alone."""
    source = make_mlp(tmp_path / "run1" / "candidate3.onnx", external=True)
    (data_file,) = external_data_files(source)
    cache = ResultCache(tmp_path / "cache")
    result = JobResult(name="dynamic", strategy="dynamic", options={}, keep_float=[], status="ok", path=str(source))
    assert cache.put("k" * 64, result)

    folder = tmp_path / "run2"
    folder.mkdir()
    bystander = folder / data_file.name
    bystander.write_bytes(b"another candidate's weights")
    hit = cache.get("k" * 64, folder / "candidate7.onnx")
    assert hit is not None and hit.path == str(folder / "candidate7.onnx")
    assert bystander.read_bytes() == b"another candidate's weights"
    assert [p.name for p in external_data_files(hit.path)] == ["candidate7.onnx.data"]
    x = np.ones((2, 32), np.float32)
    np.testing.assert_array_equal(_run(Path(hit.path), x), _run(source, x))
    assert model_hash(hit.path) != model_hash(source)   # a different name inside; the same weights
    data_file.write_bytes(data_file.read_bytes()[::-1])
    assert model_hash(source) != model_hash(tmp_path / "cache" / "nothing.onnx")


@pytest.mark.unit
def test_modelio_finds_external_tensors_in_subgraphs_and_renames_them(tmp_path):
    """modelio walks the graph itself (no private onnx names): an initializer and a Constant inside an If
    branch, both stored outside, are found, named when their file is missing, and renamed in place."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnxlite.modelio import external_locations, missing_external_data, rename_external_data, uses_external_data

    big = np.arange(4096, dtype=np.float32)
    branch = helper.make_graph([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(big, "c"))],
                               "then", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4096])])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["c"], then_branch=branch, else_branch=branch),
         helper.make_node("Add", ["c", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [numpy_helper.from_array(big, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.onnx.data",
              size_threshold=0, convert_attribute=True)
    proto = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert uses_external_data(proto) and external_locations(proto) == ["m.onnx.data"]
    (tmp_path / "m.onnx.data").unlink()
    assert sorted(name for name, _ in missing_external_data(proto, tmp_path / "m.onnx")) == ["c", "c", "w"]
    rename_external_data(proto, {"m.onnx.data": "other.data"})
    assert external_locations(proto) == ["other.data"]
