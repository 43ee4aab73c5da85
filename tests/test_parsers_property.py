"""Property tests for the command-line parsers: any string gives exit 0 or 2, never a traceback (issue 13).

``--input``, ``--max-drop``, ``--option`` and the data options are fed strings
drawn from their grammar (so many parse and the command really runs) and from
arbitrary text.  The CLI runs in this process on a tiny model built here.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxlite.errors import UsageError

from conftest import save_graph

K = 16
RUN = settings(max_examples=60, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("parsers")
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(rng.standard_normal((K, 4)).astype(np.float32), "w")])
    save_graph(graph, folder / "tiny.onnx")
    np.savez(folder / "data.npz", x=rng.standard_normal((6, K)).astype(np.float32))
    return folder


COUNTER = itertools.count()


def run_cli(capsys, *args) -> tuple[int, str]:
    from onnxlite.cli import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as done:
        code = 0 if done.code is None else done.code
    err = capsys.readouterr().err
    return code, err


def assert_clean(code: int, err: str, text: str) -> None:
    assert code in (0, 2), (text, code, err)
    assert "Traceback" not in err, (text, err)
    if code == 2:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert lines and lines[-1].startswith(("Error:", "Usage:", "Try ")), (text, err)


# Pieces of each grammar, mixed with arbitrary text so both the happy path and the edges are hit.
words = st.sampled_from(["x", "y", "batch", "seq", "", " ", ":", "[", "]", ",", "=", "%", "-", "0", "1", "32",
                         "16", "float32", "int64", "float", "bool", "nan", "inf", "-inf", "1e309", "²", "\x00",
                         "é", "9" * 30, "0.01", "1%", "50%", "cosine_mean", "y.cosine_mean", "top1_agreement"])
noise = st.text(max_size=24)
fragments = st.lists(st.one_of(words, noise), max_size=8).map("".join)

dims = st.lists(st.one_of(st.sampled_from(["batch", "seq", "16", "0", "-1", "2", "abc", "1000000000000"]), noise),
                max_size=4).map(",".join)
input_specs = st.one_of(
    st.builds(lambda n, d, s: f"{n}:{d}[{s}]", st.sampled_from(["x", "z", "", "x y"]),
              st.sampled_from(["float32", "float", "int64", "fp16", "complex64", "Float32", ""]), dims),
    fragments)

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.floats(min_value=0, max_value=200).map(lambda f: f"{f:g}%"),
                    st.integers(-5, 5).map(str), fragments)
budgets = st.one_of(numbers, st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
    ["cosine_mean", "y.cosine_mean", "nope", "", "y.", "top1_agreement"]), numbers), fragments)

option_names = st.sampled_from(["per_channel", "per-channel", "weight_type", "reduce_range", "op_types", "exclude",
                                "nope", "", "=", "per_channel "])
option_values = st.one_of(st.sampled_from(["true", "false", "1", "0", "yes", "qint8", "quint8", "int4",
                                           "MatMul", "MatMul,Gemm", "fc", "fc,relu", ""]), fragments)
strategy_options = st.one_of(st.builds(lambda k, v: f"{k}={v}", option_names, option_values), fragments)

data_names = st.sampled_from(["size", "mean", "std", "layout", "scale", "color", "tokenizer", "max_length",
                              "max-length", "padding", "nope", ""])
data_values = st.one_of(st.sampled_from(["28", "28x28", "0x0", "NCHW", "nhwc", "L", "RGB", "true", "0.5",
                                         "0.5,0.5,0.5", "longest", "max_length", "-3", "/nonexistent"]), fragments)
data_options = st.one_of(st.builds(lambda k, v: f"{k}={v}", data_names, data_values), fragments)


# ---------------------------------------------------------------- the parsers themselves (fast, many examples)


@pytest.mark.unit
@settings(max_examples=400, deadline=None, derandomize=True)
@given(input_specs)
def test_parse_input_spec_raises_usage_errors_only(text):
    from onnxlite.inputs import parse_input_spec

    try:
        spec = parse_input_spec(text)
    except UsageError as exc:
        assert "--input" in str(exc) and "\n" not in str(exc)
        return
    assert spec.name and all((isinstance(d, int) and d > 0) or (isinstance(d, str) and d) for d in spec.shape)
    assert parse_input_spec(str(spec)) == spec   # what it prints, it reads back


# ---------------------------------------------------------------- through the CLI


@RUN
@given(input_specs)
def test_export_input(folder, capsys, text):
    out = folder / f"export{next(COUNTER)}.onnx"
    code, err = run_cli(capsys, "export", folder / "tiny.onnx", "-o", out, "--input", text)
    assert_clean(code, err, text)


@RUN
@given(st.lists(budgets, min_size=1, max_size=2))
def test_compare_max_drop(folder, capsys, texts):
    args = [a for t in texts for a in ("--max-drop", t)]
    code, err = run_cli(capsys, "compare", folder / "tiny.onnx", folder / "tiny.onnx", "--samples", 8, *args)
    assert_clean(code, err, repr(texts))


@RUN
@given(st.lists(strategy_options, min_size=1, max_size=2))
def test_quantize_option(folder, capsys, texts):
    args = [a for t in texts for a in ("--option", t)]
    out = folder / f"q{next(COUNTER)}.onnx"
    code, err = run_cli(capsys, "quantize", folder / "tiny.onnx", "-o", out, *args)
    assert_clean(code, err, repr(texts))


@RUN
@given(data_options)
def test_compare_data_option(folder, capsys, text):
    code, err = run_cli(capsys, "compare", folder / "tiny.onnx", folder / "tiny.onnx", "--data",
                        folder / "data.npz", "--data-option", text)
    assert_clean(code, err, text)


@RUN
@given(data_options)
def test_quantize_calibration_option(folder, capsys, text):
    out = folder / f"s{next(COUNTER)}.onnx"
    code, err = run_cli(capsys, "quantize", folder / "tiny.onnx", "-o", out, "-s", "static", "--calibration",
                        folder / "data.npz", "--calibration-option", text)
    assert_clean(code, err, text)
