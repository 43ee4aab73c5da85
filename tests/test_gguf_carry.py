"""Strategy ``gguf``: a GGUF's blocks carried into MatMulNBits with no second rounding.

The test writes the GGUF itself (gguf.GGUFWriter, blocks from gguf.quants: Q4_0, Q4_1 and Q8_0, q/k rows in
llama.cpp's permuted order) and builds the matching model: a tiny random LLaMA whose weights are those blocks
dequantized, exported by onnxruntime-genai's builder at fp32.  The carried model must compute the file's weights.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from decoder_models import (
    LAYERS,
    gguf_decoder,
    gguf_with,
    greedy_tokens,
    mean_kl,
    prefill_logits,
    token_windows,
    with_config,
)
from onnx import helper, numpy_helper

import onnxlite
from onnxlite.errors import UsageError

PROJECTIONS = LAYERS * 5 + 1


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {tie: gguf_decoder(root, tie) for tie in (False, True)}


def node_weight(path, node) -> np.ndarray:
    """The weight ``[K, N]`` one MatMulNBits node of ``path`` computes with, read back through onnxruntime
    (an identity input, accuracy level 0)."""
    proto = onnx.load(str(path))
    inits = {i.name: i for i in proto.graph.initializer}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k = attrs["K"]
    single = helper.make_node("MatMulNBits", ["x", *node.input[1:]], ["y"], domain="com.microsoft",
                              K=k, N=attrs["N"], bits=attrs["bits"], block_size=attrs["block_size"])
    graph = helper.make_graph([single], "one", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [k, k])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [inits[n] for n in node.input[1:] if n])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.eye(k, dtype=np.float32)})[0]


@pytest.mark.slow
@pytest.mark.parametrize("tie,q4_1", [(False, "split"), (True, "split"), (False, "zero_point"),
                                      (True, "zero_point")])
def test_carry_is_exact(carried, tmp_path, tie, q4_1):
    model, gguf_file = carried[tie]
    out = with_config(model, tmp_path / "carried")
    result = onnxlite.quantize(model, out, strategy="gguf", gguf=str(gguf_file), accuracy_level=0, q4_1=q4_1)
    assert result.details["carried"] == {"Q4_0": 2, "Q4_1": PROJECTIONS - 3, "Q8_0": 1}
    proto = onnx.load(str(out), load_external_data=False)
    nodes = [n for n in proto.graph.node if n.op_type == "MatMulNBits"]
    assert len(nodes) == PROJECTIONS
    bits = {n.name: helper.get_attribute_value(next(a for a in n.attribute if a.name == "bits")) for n in nodes}
    assert bits.pop("/lm_head/MatMul_Q8") == 8 and set(bits.values()) == {4}
    assert [n.op_type for n in proto.graph.node].count("GatherBlockQuantized") == 1   # the table, tied or not
    # each node computes the fp32 export's weight (the file's dequantized values): Q4_0/Q8_0 bit for bit, Q4_1
    # (symmetric blocks plus a float offset per block, or a float zero point) to float32 rounding
    fp32 = onnx.load(str(model))
    weights = {i.name: numpy_helper.to_array(i) for i in fp32.graph.initializer}
    written = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(out)).graph.initializer}
    assert not [n.name for n in proto.graph.node if n.op_type == "MatMul" and n.input[1] in weights]   # all carried
    split = 0
    for node in nodes:
        source = node.input[1].rsplit("_gguf_", 1)[0]
        got, want = node_weight(out, node), weights[source]
        offsets = written.get(f"{source}_gguf_offsets")
        if offsets is not None:          # [K/32, N]: one offset per block of 32 along K
            got, split = got + np.repeat(offsets, 32, axis=0), split + 1
        rounded = offsets is not None or len(node.input) > 3   # Q4_0 and Q8_0 take the kernel's default zero point
        limit = 2 * np.finfo(np.float32).eps * np.abs(want).max() if rounded else 0.0
        assert np.abs(got - want).max() <= limit, node.name
    assert split == (PROJECTIONS - 3 if q4_1 == "split" else 0)
    assert result.details["weight_max_abs_diff"] <= 2 * np.finfo(np.float32).eps
    feed = token_windows()
    ref, got = prefill_logits(model, feed), prefill_logits(out, feed)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    size = sum(f.stat().st_size for f in out.parent.glob(out.name + "*"))
    assert size * 4 < sum(f.stat().st_size for f in model.parent.glob("model.onnx*"))
    # through the cache: 16 greedy tokens at batch 2 (prompts of different lengths) as fp32 gives them
    assert greedy_tokens(out) == greedy_tokens(model)


@pytest.mark.slow
def test_accuracy_level_4_quantizes_activations_only(carried, tmp_path):
    model, gguf_file = carried[False]
    out = tmp_path / "level4.onnx"
    onnxlite.quantize(model, out, strategy="gguf", gguf=str(gguf_file), accuracy_level=4)
    levels = {helper.get_attribute_value(a) for n in onnx.load(str(out), load_external_data=False).graph.node
              if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"}
    assert levels == {4}
    feed = token_windows()
    kl = mean_kl(prefill_logits(model, feed), prefill_logits(out, feed), feed["attention_mask"])
    assert 0 < kl < 1e-3


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["Q6_K", "Q5_0", "IQ4_NL"])
def test_unsupported_block_format_is_one_line(tmp_path, kind):
    from onnxlite_plugins.quantizers.gguf_carry import read_gguf

    path = gguf_with(tmp_path / f"{kind}.gguf", kind)
    with pytest.raises(UsageError) as caught:
        read_gguf(path)
    message = str(caught.value)
    assert "\n" not in message and kind in message and "blk.0.ffn_down.weight" in message


@pytest.mark.slow
def test_missing_option_and_wrong_file(carried, tmp_path):
    model, _ = carried[False]
    with pytest.raises(UsageError, match="--option gguf=FILE"):
        onnxlite.quantize(model, tmp_path / "a.onnx", strategy="gguf")
    unrelated = gguf_with(tmp_path / "zeros.gguf", "Q4_0")   # a file the model was not loaded from
    with pytest.raises(UsageError, match="no MatMul weight equals a tensor of"):
        onnxlite.quantize(model, tmp_path / "b.onnx", strategy="gguf", gguf=str(unrelated))
    assert not list(tmp_path.glob("*.onnx"))
