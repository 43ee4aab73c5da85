"""Weight-only quantization of decoder LLMs: onnxruntime-genai's builder graph of a tiny random LLaMA (GQA, packed
QKV MatMul, tied or separate embeddings), quantized by ``weightonly``/``gptq``/``dynamic`` and run through
onnxruntime at batch 2 (one row left-padded) with an empty cache.  Every output is compared with the fp32 graph's.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from decoder_models import LAYERS, greedy_tokens, mean_kl, prefill_logits, tiny_decoder, token_windows, with_config
from onnx import helper

import onnxlite
from onnxlite.errors import UsageError
from onnxlite.graph_family import model_family

pytestmark = pytest.mark.slow   # builds a transformers model and runs onnxruntime-genai's builder

PROJECTIONS = LAYERS * 5 + 1   # qkv_proj, o_proj, gate_proj, up_proj, down_proj per layer, and the LM head


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {"tied": tiny_decoder(root, tie=True), "untied": tiny_decoder(root, tie=False)}


@pytest.fixture(scope="module")
def references(decoders):
    feed = token_windows()
    return feed, {k: prefill_logits(p, feed) for k, p in decoders.items()}


def nbits(path) -> list[dict]:
    return [{"name": n.name, **{a.name: helper.get_attribute_value(a) for a in n.attribute}}
            for n in onnx.load(str(path), load_external_data=False).graph.node if n.op_type == "MatMulNBits"]


def ops(path) -> dict[str, int]:
    found: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        found[node.op_type] = found.get(node.op_type, 0) + 1
    return found


def folder_size(path) -> int:
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))


def kl_of(path, kind, references) -> float:
    feed, refs = references
    return mean_kl(refs[kind], prefill_logits(path, feed), feed["attention_mask"])


def test_builder_graph_is_a_decoder_and_gets_the_decoder_grid(decoders):
    from onnxlite.search.candidates import build_candidates
    from onnxlite_plugins.quantizers.weightonly_plan import DECODER_GRID

    family = model_family(decoders["tied"])
    assert {"decoder", "transformer", "matmul"} <= family
    found, _ = build_candidates(decoders["tied"], strategies=["weightonly"], has_calibration=False)
    assert [dict(c.options) for c in found] == [dict(g) for g in DECODER_GRID]
    grid = [dict(c.options) for c in found]
    assert {g.get("algorithm", "rtn") for g in grid} == {"rtn", "kquant", "hqq"}
    assert {g["block_size"] for g in grid} == {32, 64, 128}
    assert {g.get("accuracy_level") for g in grid} >= {0, 4}
    assert {g.get("symmetric") for g in grid if g.get("algorithm", "rtn") == "rtn" and g["bits"] == 4} == {True, False}


@pytest.mark.parametrize("options", [
    {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 4},
    {"bits": 4, "block_size": 64, "symmetric": False, "accuracy_level": 0},
    {"bits": 4, "block_size": 128, "symmetric": False, "accuracy_level": 4},
    {"bits": 4, "algorithm": "kquant", "block_size": 32, "accuracy_level": 4},
    pytest.param({"bits": 4, "algorithm": "hqq", "block_size": 64},
                 marks=pytest.mark.skipif(not __import__("importlib").util.find_spec("torch"), reason="hqq: torch")),
    {"bits": 8, "block_size": 128, "accuracy_level": 4},
])
def test_every_projection_becomes_matmulnbits(decoders, references, tmp_path, options):
    out = tmp_path / "q.onnx"
    result = onnxlite.quantize(decoders["untied"], out, strategy="weightonly", **options)
    nodes = nbits(out)
    assert len(nodes) == PROJECTIONS and "MatMul" not in ops(out)   # qkv, o, gate, up, down per layer, lm_head
    assert {n["bits"] for n in nodes} == {options["bits"]}
    assert {n["block_size"] for n in nodes} == {options["block_size"]}
    assert result.details["check"]["ran"] is True
    assert kl_of(out, "untied", references) < (0.01 if options["bits"] == 4 else 1e-3)
    assert folder_size(out) < folder_size(decoders["untied"]) * (0.6 if options["bits"] == 8 else 0.35)


def test_kquant_refuses_an_odd_block_count_in_one_line(decoders, tmp_path):
    with pytest.raises(UsageError, match=r"block_size=128 with kquant: \d+ MatMul\(s\).*odd number of blocks"):
        onnxlite.quantize(decoders["untied"], tmp_path / "q.onnx", strategy="weightonly", bits=4,
                          algorithm="kquant", block_size=128)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("lm_head,gather,head_bits,table_op", [
    ("float", "float", None, "Gather"), ("int8", "int8", 8, "GatherBlockQuantized"),
    ("int4", "int4", 4, "GatherBlockQuantized"), ("int8", "float", 8, "Gather"),
])
def test_lm_head_and_tied_table(decoders, references, tmp_path, lm_head, gather, head_bits, table_op):
    out = tmp_path / "q.onnx"
    result = onnxlite.quantize(decoders["tied"], out, strategy="weightonly", bits=4, block_size=32,
                               lm_head=lm_head, gather=gather)
    heads = [n for n in nbits(out) if n["name"].startswith("/lm_head/")]
    assert [n["bits"] for n in heads] == ([head_bits] if head_bits else [])
    assert len(nbits(out)) == PROJECTIONS - (head_bits is None)
    found = ops(out)
    assert ("GatherBlockQuantized" in found) == (table_op == "GatherBlockQuantized")
    assert ("Transpose" in found) == (table_op == "Gather")   # the float table is the head's weight transposed
    if table_op == "GatherBlockQuantized":   # the tied table reads the head's blocks: no float copy is left
        weights = {i.name for i in onnx.load(str(out), load_external_data=False).graph.initializer}
        assert "lm_head.MatMul.weight" not in weights
    assert result.details["lm_head"] == lm_head
    assert kl_of(out, "tied", references) < 0.01


def test_separate_table_at_int8_and_int4(decoders, references, tmp_path):
    sizes = {}
    for gather in ("float", "int8", "int4"):
        out = tmp_path / f"{gather}.onnx"
        onnxlite.quantize(decoders["untied"], out, strategy="weightonly", bits=4, block_size=32, gather=gather)
        sizes[gather] = folder_size(out)
        assert kl_of(out, "untied", references) < 0.01
    assert sizes["int4"] < sizes["int8"] < sizes["float"]


def test_sensitive8_is_deterministic_and_between_4_and_8_bits(tmp_path_factory, tmp_path):
    root = tmp_path_factory.mktemp("outliers")
    model = tiny_decoder(root, tie=False, outliers=True)
    feed = token_windows()
    ref = prefill_logits(model, feed)

    def run(name, **options):
        out = tmp_path / f"{name}.onnx"
        result = onnxlite.quantize(model, out, strategy="weightonly", block_size=32, accuracy_level=0, **options)
        got = prefill_logits(model if name == "fp32" else out, feed)
        return result, folder_size(out), mean_kl(ref, got, feed["attention_mask"]), float(np.abs(got - ref).max())

    r4, size4, kl4, err4 = run("four", bits=4)
    r8, size8, kl8, err8 = run("eight", bits=8)
    mixed, size_m, kl_m, err_m = run("mixed", bits=4, sensitive8=3)
    again, _, kl_again, _ = run("again", bits=4, sensitive8=3)
    assert mixed.details["eight_bit"] == again.details["eight_bit"] and len(mixed.details["eight_bit"]) == 3
    assert kl_m == kl_again
    # the outlier layer (layers.1) is where 4-bit blocks lose most: the ranking sends its projections to 8 bits
    assert all("layers.1" in n for n in mixed.details["eight_bit"])
    assert size4 < size_m < size8
    assert kl_m < 0.8 * kl4 and err_m < err4
    assert kl8 < kl_m


def test_keep8_names_layers(decoders, tmp_path):
    out = tmp_path / "q.onnx"
    onnxlite.quantize(decoders["untied"], out, strategy="weightonly", bits=4, keep8=("*/mlp/down_proj/*",))
    bits = {n["name"]: n["bits"] for n in nbits(out)}
    assert {n for n, b in bits.items() if b == 8} == {f"/model/layers.{i}/mlp/down_proj/MatMul_Q8" for i in (0, 1)}
    with pytest.raises(UsageError, match="keep8"):
        onnxlite.quantize(decoders["untied"], tmp_path / "r.onnx", strategy="weightonly", bits=4, keep8=("nosuch",))


def test_gptq_calibrates_on_token_windows(decoders, references, tmp_path):
    rng = np.random.default_rng(5)
    data = tmp_path / "windows.npz"
    np.savez(data, input_ids=rng.integers(3, 256, size=(4, 16)).astype(np.int64),
             attention_mask=np.ones((4, 16), dtype=np.int64))
    out = tmp_path / "q.onnx"
    result = onnxlite.quantize(decoders["tied"], out, strategy="gptq", calibration=str(data), block_size=32,
                               symmetric=True, calibration_samples=4)
    assert result.details["calibration_samples"] == 4
    assert len(nbits(out)) == PROJECTIONS
    assert kl_of(out, "tied", references) < 0.01


def test_dynamic_int8_baseline_runs_on_the_builder_graph(decoders, references, tmp_path):
    out = tmp_path / "q.onnx"
    onnxlite.quantize(decoders["tied"], out, strategy="dynamic", reduce_range=True)
    assert ops(out).get("MatMulInteger") == PROJECTIONS
    assert kl_of(out, "tied", references) < 1e-3


def test_quantized_decoders_run_the_decode_loop(decoders, tmp_path):
    """Through the cache at batch 2: 8-bit weights keep fp32's greedy tokens; 4-bit ones keep generating."""
    reference = greedy_tokens(decoders["tied"])
    eight, four = (with_config(decoders["tied"], tmp_path / name) for name in ("eight", "four"))
    onnxlite.quantize(decoders["tied"], eight, strategy="weightonly", bits=8, accuracy_level=0, gather="int8")
    onnxlite.quantize(decoders["tied"], four, strategy="weightonly", bits=4, block_size=32, gather="int4")
    assert greedy_tokens(eight) == reference
    assert [len(row) for row in greedy_tokens(four)] == [len(row) for row in reference] == [16, 16]
