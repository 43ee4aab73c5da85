"""The API's grouped keywords: compare/Judge (ReferenceOptions), bench (BenchInputs), export (ExportOptions)
and run_quantize (QuantizeRun) take a record's fields as keywords, and an unknown one is a TypeError naming
it, before any work: pure, fast unit tests."""

from __future__ import annotations

import pytest

import onnxlite
from onnxlite.benchmark.bench import BenchInputs
from onnxlite.conversion.export import ExportOptions
from onnxlite.evaluation.judge import DEFAULT_BATCH, Judge, ReferenceOptions
from onnxlite.quantization.run import QuantizeRun, run_quantize

pytestmark = pytest.mark.unit


def test_reference_options_take_overrides_over_a_base():
    base = ReferenceOptions(framework="onnx", samples=8)
    how = ReferenceOptions.of(base, {"samples": 3, "seed": 5})
    assert (how.framework, how.samples, how.seed, how.batch_size) == ("onnx", 3, 5, DEFAULT_BATCH)
    assert base.samples == 8   # frozen: the base is unchanged
    assert ReferenceOptions.of(None, {}) == ReferenceOptions()


def test_an_unknown_reference_option_is_named():
    with pytest.raises(TypeError, match="unexpected keyword argument.*: nope"):
        ReferenceOptions.of(None, {"nope": 1})
    with pytest.raises(TypeError, match="nope"):
        Judge.run_reference("missing.onnx", nope=1)


def test_compare_refuses_an_unknown_keyword_before_reading_anything():
    with pytest.raises(TypeError, match="sample_count"):
        onnxlite.compare("missing.onnx", ["missing.onnx"], sample_count=4)


def test_bench_refuses_an_unknown_keyword_before_reading_anything():
    with pytest.raises(TypeError, match=r"bench\(\) got unexpected keyword argument\(s\): datta"):
        onnxlite.bench(["missing.onnx"], datta="x.npz")


def test_export_refuses_an_unknown_keyword_before_loading_the_source(tmp_path):
    with pytest.raises(TypeError, match=r"export\(\) got unexpected keyword argument\(s\): atoll"):
        onnxlite.export("missing.py:model", tmp_path / "out.onnx", atoll=1e-3)
    assert not (tmp_path / "out.onnx").exists()


def test_run_quantize_refuses_an_unknown_keyword():
    with pytest.raises(TypeError, match="forse"):
        run_quantize("missing.onnx", None, "dynamic", {}, forse=True)


@pytest.mark.parametrize(("record", "fields"), [
    (ReferenceOptions, {"framework", "source_options", "data_options", "inputs", "settings", "samples",
                        "batch_size", "seq_len", "seed"}),
    (BenchInputs, {"data", "data_options", "feeds", "seed"}),
    (ExportOptions, {"framework", "inputs", "model_class", "options", "framework_options", "samples", "atol",
                     "rtol", "verify", "decode_steps"}),
    (QuantizeRun, {"check", "check_data", "force", "target_runtime", "source_model"}),
])
def test_the_records_are_frozen_and_hold_the_keywords_the_docs_name(record, fields):
    import dataclasses

    assert {f.name for f in dataclasses.fields(record)} == fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        record().seed = 1   # type: ignore[misc]
