"""The greedy loop over onnxruntime (onnxlite.decoding) against transformers, on a tiny random LLaMA with GQA."""

from __future__ import annotations

import numpy as np
import pytest
from llm_models import greedy_reference, tiny_llama

PROMPTS = [[5, 9, 17, 33, 41, 7, 8], [12, 40, 3]]


@pytest.fixture(scope="module")
def builder_llama(tmp_path_factory):
    """A tiny LLaMA and onnxruntime-genai's fp32 build of it (GroupQueryAttention, right padded)."""
    from onnxlite_plugins.frameworks.causal_lm import run_builder

    root = tmp_path_factory.mktemp("decoding")
    hf = tiny_llama(root / "hf")
    out = root / "onnx"
    run_builder(hf, out, root / "cache")   # onnxruntime-genai's own builder, in this process
    return hf, out


@pytest.mark.slow
def test_layout_is_read_from_the_graph_and_the_configs_beside_it(builder_llama):
    from onnxlite.decoding import decoder_layout

    _, out = builder_llama
    layout = decoder_layout(out)
    assert (layout.num_layers, layout.kv_heads, layout.head_dim, layout.vocab_size) == (2, 2, 16, 300)
    assert layout.past_dtype == "float32" and layout.padding == "right" and not layout.has_position_ids
    assert layout.past_names[:2] == ("past_key_values.0.key", "past_key_values.0.value")


@pytest.mark.slow
def test_batched_greedy_matches_transformers_row_by_row(builder_llama):
    from onnxlite.decoding import DecoderSession

    hf, out = builder_llama
    generation = DecoderSession(out, threads=1).greedy(PROMPTS, 16, eos_token_id=None, pad_token_id=0)
    assert [list(row) for row in generation.tokens] == greedy_reference(hf, PROMPTS, 16)
    assert generation.decode_steps == 15 and generation.stopped == (False, False)
    assert generation.prompt_lengths == (7, 3) and generation.decode_seconds > 0


@pytest.mark.slow
def test_each_row_stops_at_its_end_token_and_the_loop_when_all_have(builder_llama):
    from onnxlite.decoding import DecoderSession

    _, out = builder_llama
    session = DecoderSession(out, threads=1)
    free = session.greedy(PROMPTS, 12, eos_token_id=None, pad_token_id=0).tokens
    eos = free[0][3]
    cut = free[0].index(eos) + 1
    stopped = session.greedy(PROMPTS, 12, eos_token_id=[eos], pad_token_id=0)
    assert stopped.tokens[0] == free[0][:cut] and stopped.stopped[0]
    row1 = free[1][:free[1].index(eos) + 1] if eos in free[1] else free[1]
    assert stopped.tokens[1] == row1
    both = session.greedy([PROMPTS[0], PROMPTS[0]], 12, eos_token_id=eos, pad_token_id=0)
    assert both.stopped == (True, True) and both.decode_steps == cut - 1


@pytest.mark.slow
def test_forward_through_the_cache_equals_one_forward_of_the_whole_sequence(builder_llama):
    from onnxlite.decoding import DecoderSession

    _, out = builder_llama
    session = DecoderSession(out, threads=1)
    ids = np.array([[5, 9, 17, 33, 41, 7]], dtype=np.int64)
    whole, _ = session.forward(ids, np.ones_like(ids))
    head, cache = session.forward(ids[:, :4], np.ones((1, 4), dtype=np.int64))
    tail, cache = session.forward(ids[:, 4:], np.ones((1, 6), dtype=np.int64), cache)
    assert cache.length == 6 and cache.arrays()[0].shape == (1, 2, 6, 16)
    scale = float(np.abs(whole).max())
    assert np.abs(np.concatenate([head, tail], axis=1) - whole).max() <= 1e-4 * scale


def _graph(path, inputs, outputs):
    import onnx
    from onnx import TensorProto, helper

    def info(name):
        if name in ("input_ids", "attention_mask", "position_ids"):
            return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        if name == "logits":
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "seq", 50])
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 2, "past", 8])

    graph = helper.make_graph([], "g", [info(n) for n in inputs], [info(n) for n in outputs])
    onnx.save(helper.make_model(graph), str(path))
    return path


@pytest.mark.unit
def test_layout_needs_every_cache_input_and_output(tmp_path):
    from onnxlite.decoding import decoder_layout

    cache_in = ["past_key_values.0.key", "past_key_values.0.value"]
    cache_out = ["present.0.key", "present.0.value"]
    full = _graph(tmp_path / "full.onnx", ["input_ids", "attention_mask", "position_ids", *cache_in],
                  ["logits", *cache_out])
    layout = decoder_layout(full)
    assert (layout.num_layers, layout.kv_heads, layout.head_dim, layout.vocab_size) == (1, 2, 8, 50)
    assert layout.has_position_ids and layout.padding == "left" and layout.cache_bytes_per_token() == 2 * 2 * 8 * 4
    assert decoder_layout(_graph(tmp_path / "plain.onnx", ["input_ids", "attention_mask"], ["logits"])) is None
    half = _graph(tmp_path / "half.onnx", ["input_ids", "attention_mask", *cache_in], ["logits", "present.0.key"])
    assert decoder_layout(half) is None


@pytest.mark.unit
def test_positions_count_real_tokens_and_pads_sit_at_zero():
    from onnxlite.decoding import position_ids

    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids(mask, 5).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert position_ids(mask, 1).tolist() == [[2], [4]]
