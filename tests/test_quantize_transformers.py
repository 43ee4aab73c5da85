"""dynamic and transformer strategies on a random-init tiny BERT exported in the test.

The export is checked against PyTorch first; every quantized model is then
compared with the fp32 ONNX model on padded batches (cosine over real tokens).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxlite
from onnxlite.graph_family import model_family
from onnxlite.quantization.run import applicable_strategies

from export_models import LastHiddenState

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
VOCAB = 200


def padded_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    for row in range(1, batch):
        length = max(2, seq - 3 * row)
        mask[row, length:] = 0
        ids[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def run(path, feeds) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def token_cosine(ref: np.ndarray, got: np.ndarray, mask: np.ndarray) -> np.ndarray:
    cos = (ref * got).sum(-1) / (np.linalg.norm(ref, axis=-1) * np.linalg.norm(got, axis=-1))
    return cos[mask.astype(bool)]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """Tiny random BERT exported with the TorchScript exporter, dynamic batch and sequence axes."""
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64, attn_implementation="eager",
                                     initializer_range=0.1)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():
        # Trained networks have output channels of very different ranges (which is why per-channel
        # scales matter); a fresh init does not, so give each Linear's rows uneven magnitudes.
        for module in model.encoder.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.mul_(torch.exp(torch.randn(module.weight.shape[0], 1)))

    # eval() on the wrapper itself: the exporter restores the wrapper's mode afterwards, recursively.
    wrapper = LastHiddenState(model).eval()
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    sample = {k: torch.from_numpy(v) for k, v in padded_feeds(2, 8, 0).items()}
    torch.onnx.export(wrapper, tuple(sample[k] for k in INPUTS), str(path), input_names=INPUTS,
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={k: {0: "batch", 1: "seq"} for k in [*INPUTS, "last_hidden_state"]})
    feeds = padded_feeds(3, 12, 1)  # other batch and length than the export sample, with padding
    with torch.no_grad():
        expected = wrapper(*(torch.from_numpy(feeds[k]) for k in INPUTS)).numpy()
    np.testing.assert_allclose(run(path, feeds), expected, atol=1e-4, rtol=1e-3)
    return path


@pytest.fixture(scope="module")
def reference(bert):
    feeds = padded_feeds(3, 12, 1)
    return feeds, run(bert, feeds)


def test_bert_is_a_transformer(bert):
    assert "transformer" in model_family(bert)
    assert {"dynamic", "transformer", "int4"} <= {r.name for r in applicable_strategies(bert)}


def test_dynamic_per_channel_default_is_close_and_not_worse_than_per_tensor(bert, reference, tmp_path):
    feeds, ref = reference
    per_channel = onnxlite.quantize(bert, tmp_path / "pc.onnx")
    per_tensor = onnxlite.quantize(bert, tmp_path / "pt.onnx", per_channel=False)
    assert per_channel.options["per_channel"] is True
    assert per_channel.size_after < per_channel.size_before
    assert per_channel.quantized_ops.get("MatMulInteger", 0) >= 12  # 6 weight MatMuls per layer
    cos_pc = token_cosine(ref, run(per_channel.path, feeds), feeds["attention_mask"])
    cos_pt = token_cosine(ref, run(per_tensor.path, feeds), feeds["attention_mask"])
    assert cos_pc.mean() > 0.98
    assert cos_pc.mean() >= cos_pt.mean()
    err_pc = np.abs(run(per_channel.path, feeds) - ref)[feeds["attention_mask"].astype(bool)].mean()
    err_pt = np.abs(run(per_tensor.path, feeds) - ref)[feeds["attention_mask"].astype(bool)].mean()
    assert err_pc <= err_pt


def test_transformer_fuses_then_quantizes(bert, reference, tmp_path):
    feeds, ref = reference
    result = onnxlite.quantize(bert, tmp_path / "t.onnx", strategy="transformer")
    ops = {n.op_type for n in onnx.load(str(result.path)).graph.node}
    # fused, then quantized: QAttention is the int8 form of the fused Attention
    assert {"QAttention", "SkipLayerNormalization"} <= ops
    assert ops & {"EmbedLayerNormalization", "QEmbedLayerNormalization"}
    fusions = result.details["fusions"]
    assert fusions["Attention"] == 2 and fusions["SkipLayerNormalization"] >= 2
    assert result.details["num_heads"] == 4 and result.details["hidden_size"] == 64  # found in the graph
    assert result.quantized_ops.get("MatMulInteger", 0) > 0 and result.quantized_ops.get("QAttention") == 2
    plain = onnxlite.quantize(bert, tmp_path / "d.onnx")
    # embedding tables and attention weights are int8 too, so it ends smaller than plain dynamic
    assert result.size_after < plain.size_after < result.size_before
    cos = token_cosine(ref, run(result.path, feeds), feeds["attention_mask"])
    assert cos.mean() > 0.98 and cos.min() > 0.9
    one = {k: v[:1] for k, v in feeds.items()}  # batch 1 through the same fused graph
    assert token_cosine(ref[:1], run(result.path, one), one["attention_mask"]).mean() > 0.98


def test_transformer_settings_from_export_metadata_and_fusion_only(bert, reference, tmp_path):
    feeds, ref = reference
    model = onnx.load(str(bert))
    entry = model.metadata_props.add()
    entry.key = "onnxlite.transformers_config"
    entry.value = json.dumps({"model_type": "bert", "num_attention_heads": 4, "hidden_size": 64, "vocab_size": VOCAB})
    tagged = tmp_path / "tagged.onnx"
    onnx.save(model, str(tagged))
    result = onnxlite.quantize(tagged, tmp_path / "f.onnx", strategy="transformer", quantize=False)
    assert any("num_heads=4 (export metadata)" in n for n in result.notes)
    assert result.quantized_ops == {}
    assert result.details["fusions"]["Attention"] == 2
    np.testing.assert_allclose(run(result.path, feeds), ref, atol=1e-3, rtol=1e-3)  # fusion alone is exact-ish
    with pytest.raises(onnxlite.UsageError, match="model_type=roberta_xl: onnxruntime's optimizer knows"):
        onnxlite.quantize(bert, tmp_path / "x.onnx", strategy="transformer", model_type="roberta_xl")


def test_every_int8_strategy_refuses_an_empty_op_types(bert, tmp_path):
    """quantize_dynamic reads an empty list as "every type it knows"; none of our strategies passes one on."""
    calibration = [padded_feeds(4, 8, 2)]
    for strategy in ("dynamic", "transformer", "smoothquant"):
        with pytest.raises(onnxlite.UsageError, match="op_types: give at least one operator type"):
            onnxlite.quantize(bert, tmp_path / f"{strategy}.onnx", strategy=strategy, op_types=[],
                              calibration=calibration if strategy == "smoothquant" else None)
        assert not (tmp_path / f"{strategy}.onnx").exists()


# -- issue 25 §4: a fusion onnxruntime would refuse ------------------------------------------------------------

def _rms_norm_graph(path, gamma_shape):
    """MatMul, a residual Add and an RMSNorm (Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Mul gamma): the pattern
    onnxruntime's optimizer fuses into SkipSimplifiedLayerNormalization, gamma as the export left it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("two", 2.0), ("eps", 1e-6), ("one", 1.0))]
    inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(gamma_shape)).astype(np.float32), "gamma"),
              numpy_helper.from_array((0.2 * rng.standard_normal((8, 8))).astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["a", "w"], ["h"], name="proj"),
             helper.make_node("Add", ["h", "b"], ["s"], name="residual"),
             helper.make_node("Pow", ["s", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p"], ["m"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["m", "eps"], ["e"]), helper.make_node("Sqrt", ["e"], ["r"]),
             helper.make_node("Div", ["one", "r"], ["inv"]), helper.make_node("Mul", ["s", "inv"], ["n"]),
             helper.make_node("Mul", ["n", "gamma"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", 8]) for n in ("a", "b", "y")]
    model = helper.make_model(helper.make_graph(nodes, "rms", io[:2], io[2:], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("gamma_shape", [(1, 1, 8), (8,)])
def test_transformer_leaves_out_a_skip_norm_fusion_onnxruntime_refuses(tmp_path, gamma_shape):
    import onnx
    import onnxruntime as ort

    import onnxlite

    source = _rms_norm_graph(tmp_path / "rms.onnx", gamma_shape)
    result = onnxlite.quantize(source, tmp_path / "fused.onnx", strategy="transformer", quantize=False)
    ops = {n.op_type for n in onnx.load(str(result.path)).graph.node}
    feeds = {k: np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32) for k in ("a", "b")}
    fused = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    plain = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(fused, plain, rtol=1e-4, atol=1e-5)      # it runs, and computes the same
    left_out = [n for n in result.notes if "skip layer norm fusion left out" in n]
    if len(gamma_shape) == 3:
        assert left_out and "gamma of rank 3" in left_out[0] and "SkipSimplifiedLayerNormalization" not in ops
    else:
        assert not left_out and "SkipSimplifiedLayerNormalization" in ops
