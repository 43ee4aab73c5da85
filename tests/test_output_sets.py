"""A model and its external data are replaced as one set, and no output ever replaces an input's files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from helpers import make_mlp, one_error_line, tree


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_replace_set_swaps_a_model_and_its_data_and_leaves_no_backups(tmp_path):
    from onnxlite.atomic import replace_set

    (tmp_path / "m.onnx").write_bytes(b"old model")
    (tmp_path / "m.onnx.data").write_bytes(b"old data")
    staged = tmp_path / "work"
    staged.mkdir()
    (staged / "m.onnx").write_bytes(b"new model")
    (staged / "m.onnx.data").write_bytes(b"new data")
    replace_set([(staged / "m.onnx.data", tmp_path / "m.onnx.data"), (staged / "m.onnx", tmp_path / "m.onnx")])
    assert (tmp_path / "m.onnx").read_bytes() == b"new model"
    assert (tmp_path / "m.onnx.data").read_bytes() == b"new data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "work"]
    assert not any(staged.iterdir())


def test_replace_set_puts_the_old_set_back_when_a_move_fails(tmp_path):
    from onnxlite.atomic import replace_set

    (tmp_path / "m.onnx").write_bytes(b"old model")
    (tmp_path / "m.onnx.data").write_bytes(b"old data")
    (tmp_path / "new.data").write_bytes(b"new data")
    before = tree(tmp_path)
    # the data file moves in, then the model's staged file is missing: the old model must get its old data back
    with pytest.raises(FileNotFoundError):
        replace_set([(tmp_path / "new.data", tmp_path / "m.onnx.data"),
                     (tmp_path / "absent.onnx", tmp_path / "m.onnx")])
    after = tree(tmp_path)
    assert after["m.onnx"] == before["m.onnx"] and after["m.onnx.data"] == before["m.onnx.data"]
    assert not [name for name in after if ".old-" in name]


def test_save_model_without_external_data_drops_the_old_data_file(tmp_path):
    from onnxlite.modelio import external_data_files, load_model, save_model

    source = make_mlp(tmp_path / "in" / "ext.onnx", external=True)
    target = tmp_path / "out.onnx"
    save_model(load_model(source), target, external_data=True)
    assert [p.name for p in external_data_files(target)] == ["out.onnx.data"]
    save_model(load_model(source), target, external_data=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out.onnx"]
    x = np.ones((2, 32), np.float32)
    np.testing.assert_array_equal(_run(target, x), _run(source, x))


def test_quantize_force_replaces_an_external_data_output_as_a_set(cli, tmp_path):
    from onnxlite.modelio import external_data_files

    source = make_mlp(tmp_path / "in" / "ext.onnx", external=True)
    target = tmp_path / "out" / "q.onnx"
    code, _out, err = cli("quantize", source, "-o", target, "-s", "dynamic")
    assert code == 0, err
    first = tree(tmp_path / "out")
    code, _out, err = cli("quantize", source, "-o", target, "-s", "fp16", "--force")
    assert code == 0, err
    after = tree(tmp_path / "out")
    # the new model and the new data, nothing else (no backups, no scratch folders); both changed
    assert sorted(after) == ["q.onnx", "q.onnx.data"] == sorted(first)
    assert after["q.onnx"] != first["q.onnx"] and after["q.onnx.data"] != first["q.onnx.data"]
    assert [p.name for p in external_data_files(target)] == ["q.onnx.data"]
    x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(target, x), _run(source, x), rtol=0.05, atol=0.05)


def test_export_over_an_external_data_output_replaces_the_set(tmp_path):
    import onnxlite

    source = make_mlp(tmp_path / "in" / "ext.onnx", external=True)
    target = tmp_path / "out.onnx"
    (tmp_path / "out.onnx.data").write_bytes(b"a stale data file")
    target.write_bytes(b"a stale model")
    onnxlite.export(source, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out.onnx", "out.onnx.data"]
    x = np.ones((2, 32), np.float32)
    np.testing.assert_array_equal(_run(target, x), _run(source, x))


def test_an_output_whose_data_file_is_the_inputs_is_refused(cli, tmp_path):
    # an input whose data file has the name an output "b.onnx" would write its data under
    source = make_mlp(tmp_path / "a.onnx", external=True)
    os.replace(tmp_path / "a.onnx.data", tmp_path / "b.onnx.data")
    model = onnx.load(str(source), load_external_data=False)
    from onnxlite.modelio import rename_external_data

    rename_external_data(model, {"a.onnx.data": "b.onnx.data"})
    onnx.save(model, str(source))
    (tmp_path / "b.onnx").write_bytes(b"an old output")
    before = tree(tmp_path)
    for args in (["quantize", source, "-o", tmp_path / "b.onnx", "--force"],
                 ["export", source, "-o", tmp_path / "b.onnx"]):
        code, _out, err = cli(*args)
        assert code == 2, (args, err)
        line = one_error_line(err, "b.onnx.data")
        assert "would replace the input's data file" in line, line
        assert tree(tmp_path) == before


def test_lighten_force_into_the_folder_holding_the_source_is_refused(cli, tmp_path):
    source = make_mlp(tmp_path / "work" / "ext.onnx", external=True)
    before = tree(tmp_path)
    code, _out, err = cli("lighten", source, "-o", tmp_path / "work", "--force")
    assert code == 2, err
    one_error_line(err, "would replace the input")
    assert tree(tmp_path) == before
    code, _out, err = cli("lighten", source, "-o", tmp_path, "--force")
    assert code == 2, err
    assert tree(tmp_path) == before


def test_the_python_api_refuses_an_output_dir_holding_the_source(tmp_path):
    import onnxlite
    from onnxlite.errors import UsageError

    source = make_mlp(tmp_path / "work" / "ext.onnx", external=True)
    before = tree(tmp_path)
    with pytest.raises(UsageError, match="-o .* would replace the input"):
        onnxlite.lighten(str(source), tmp_path / "work", force=True, cache=False)
    assert tree(tmp_path) == before
