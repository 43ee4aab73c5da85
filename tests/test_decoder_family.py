"""The decoder graph family and the graph-reading helpers the decoder strategies use, on hand-built graphs.

A "decoder" here is two MatMuls writing ``logits`` with a ``past_key_values.0.key`` input beside the tokens: no
model runs, so these stay in the unit tier.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.decoder_inputs import with_empty_past
from onnxlite.graph_family import is_decoder, model_family
from onnxlite.registry import get_registry

pytestmark = pytest.mark.unit

K, N, VOCAB = 64, 64, 96


def tiny_graph(past: bool = True, outlier: bool = False):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((K, N)).astype(np.float32)
    head = rng.standard_normal((N, VOCAB)).astype(np.float32)
    if outlier:
        w1[3] *= 40.0     # one input channel far larger: 4-bit blocks of w1 lose far more
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", K])]
    if past:
        inputs += [helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, ["batch", 2, "past", 8]),
                   helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
                   helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"])]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "head"], ["z"], name="lm_head"),
             helper.make_node("Identity", ["z"], ["logits"], name="out")]
    graph = helper.make_graph(nodes, "decoder", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(head, "head")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_cache_input_makes_a_decoder():
    assert is_decoder(tiny_graph()) and {"decoder", "transformer", "matmul"} <= model_family(tiny_graph())
    assert not is_decoder(tiny_graph(past=False)) and "decoder" not in model_family(tiny_graph(past=False))


def test_weightonly_takes_its_decoder_grid_on_decoders_only():
    spec = get_registry().get("quantizer", "weightonly").spec
    decoder = spec.grid_for(model_family(tiny_graph()))
    assert decoder == spec.family_grids["decoder"] and decoder != tuple(spec.grid)
    assert {g["bits"] for g in decoder} == {4, 8} and all(g.get("gather") for g in decoder)
    assert spec.grid_for(model_family(tiny_graph(past=False))) == tuple(spec.grid)
    smooth = get_registry().get("quantizer", "smoothquant").spec
    assert "decoder" in smooth.avoid


def test_empty_past_completes_token_windows():
    proto = tiny_graph()
    ids = np.array([[5, 6, 7, 8], [0, 0, 9, 10]], dtype=np.int64)
    mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1]], dtype=np.int64)
    feed = with_empty_past(proto, [{"input_ids": ids, "attention_mask": mask}])[0]
    assert feed["past_key_values.0.key"].shape == (2, 2, 0, 8) and feed["past_key_values.0.key"].dtype == np.float32
    assert feed["position_ids"].tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    assert (feed["attention_mask"] == mask).all()


def test_lm_head_and_weight_error_ranking():
    from onnxlite_plugins.quantizers.decoder import lm_head, weight_error_ranking

    assert lm_head(tiny_graph(), ["fc1", "lm_head"]) == "lm_head"
    assert lm_head(tiny_graph(), ["fc1"]) is None        # fc1 feeds the head: it is not the head
    plain = weight_error_ranking(tiny_graph(), ["fc1", "lm_head"], 32, symmetric=False)
    skewed = weight_error_ranking(tiny_graph(outlier=True), ["fc1", "lm_head"], 32, symmetric=False)
    assert skewed == ["fc1", "lm_head"] and plain == ["lm_head", "fc1"]   # lm_head has more weights
    assert skewed == weight_error_ranking(tiny_graph(outlier=True), ["fc1", "lm_head"], 32, symmetric=False)


def test_keep8_needs_four_bits_and_the_smoke_check_feeds_an_empty_cache(tmp_path):
    import onnx

    import onnxlite
    from onnxlite.errors import UsageError

    model = tmp_path / "decoder.onnx"
    onnx.save(tiny_graph(), str(model))
    with pytest.raises(UsageError, match="keep8/sensitive8 need bits=4"):
        onnxlite.quantize(model, tmp_path / "a.onnx", strategy="weightonly", bits=8, keep8=("fc1",))
    result = onnxlite.quantize(model, tmp_path / "b.onnx", strategy="weightonly", bits=4, block_size=32,
                               lm_head="int8", sensitive8=1)
    assert result.details["check"]["ran"] is True
    assert result.details["eight_bit"] == ["fc1", "lm_head"] and result.details["lm_head"] == "int8"


def test_sensitive8_share_puts_that_share_of_the_matmuls_at_8_bits(tmp_path):
    import onnx

    import onnxlite
    from onnxlite.errors import UsageError

    model = tmp_path / "decoder.onnx"
    onnx.save(tiny_graph(outlier=True), str(model))
    half = onnxlite.quantize(model, tmp_path / "half.onnx", strategy="weightonly", bits=4, block_size=32,
                             symmetric=False, sensitive8_share=0.5)
    # one of the two MatMuls: the one with the larger 4-bit weight error (fc1, with its outlier channel)
    assert half.details["eight_bit"] == ["fc1"]
    none = onnxlite.quantize(model, tmp_path / "none.onnx", strategy="weightonly", bits=4, block_size=32,
                             sensitive8_share=0.0)
    assert none.details["eight_bit"] == [] and none.size_after < half.size_after
    with pytest.raises(UsageError, match="sensitive8_share"):
        onnxlite.quantize(model, tmp_path / "bad.onnx", strategy="weightonly", bits=4, sensitive8_share=1.5)


def test_a_decoder_search_leaves_encoder_strategies_out_and_tries_likely_winners_first():
    from onnxlite.search.candidates import build_candidates

    found, skipped = build_candidates(tiny_graph(), has_calibration=False)
    strategies = {c.strategy for c in found}
    assert "weightonly" in strategies and not strategies & {"dynamic", "transformer", "int4"}
    assert {"dynamic", "transformer", "int4"} <= {s.strategy for s in skipped}
    weightonly = [dict(c.options) for c in found if c.strategy == "weightonly"]
    # 8-bit weights, then mixed 4/8-bit points, before any uniform 4-bit point
    assert weightonly[0]["bits"] == 8
    mixed = [i for i, o in enumerate(weightonly) if o.get("sensitive8_share")]
    uniform = [i for i, o in enumerate(weightonly) if o["bits"] == 4 and o.get("lm_head", "same") == "same"]
    assert mixed and uniform and max(mixed) < min(uniform)
    levels = {o["accuracy_level"] for o in weightonly if o["bits"] == 4 and o.get("lm_head", "same") == "same"
              and o.get("algorithm", "rtn") == "rtn" and o["block_size"] == 32}
    assert levels == {0, 4}   # the float-compute level beside the int8 one
    # named, an avoided strategy still runs on a decoder
    named, _ = build_candidates(tiny_graph(), strategies=["dynamic"], has_calibration=False)
    assert named and {c.strategy for c in named} == {"dynamic"}
