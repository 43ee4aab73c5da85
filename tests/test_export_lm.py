"""A causal LM exported to a folder with its KV cache: each engine against PyTorch, in onnxruntime-genai, and the
bad inputs that must stop before any work (tiny random LLaMA with GQA and GPT-2, built in code)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llm_models import tiny_gpt2, tiny_llama

import onnxlite
from onnxlite.errors import UsageError

STEPS = 16


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    return {"llama": tiny_llama(root / "llama"), "gpt2": tiny_gpt2(root / "gpt2"),
            "bare": tiny_llama(root / "bare", tokenizer=False)}


def _genai_greedy(folder, prompt, steps):
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + steps, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens([prompt])
    out = []
    while not generator.is_done():
        generator.generate_next_token()
        out.append(int(generator.get_next_tokens()[0]))
    return out


def _check_folder(result, folder, engine, padding):
    from onnxlite.decoding import DecoderSession

    assert result.engine == engine and result.verified, result.check.message()
    check = result.check
    assert check.batch == 2 and len(set(check.prompt_lengths)) == 2   # the shorter prompt was padded
    assert check.tokens_equal == (STEPS, STEPS) and check.padding == padding
    assert check.max_abs_diff <= 1e-3 * check.logits_scale
    for name in ("model.onnx", "model.onnx.data", "tokenizer.json", "generation_config.json", "genai_config.json"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "onnxlite_export.json").read_text())["engine"] == engine
    prompt = [5, 9, 17, 33, 41, 7, 8]
    ours = DecoderSession(folder, threads=1).greedy([prompt], 8, eos_token_id=None, pad_token_id=0).tokens[0]
    assert _genai_greedy(folder, prompt, 8) == list(ours)


@pytest.mark.slow
def test_llama_exports_through_the_builder_and_matches_pytorch_over_16_steps(sources, tmp_path):
    out = tmp_path / "llama"
    result = onnxlite.export(sources["llama"], out, decode_steps=STEPS)
    _check_folder(result, out, "genai-builder", "right")
    assert result.layout.kv_heads == 2 and not result.layout.has_position_ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama"]   # no scratch left beside it


@pytest.mark.slow
def test_llama_exports_through_the_torch_engine_and_matches_pytorch(sources, tmp_path):
    out = tmp_path / "llama-ts"
    result = onnxlite.export(sources["llama"], out, exporter="torchscript", decode_steps=STEPS)
    _check_folder(result, out, "torchscript", "left")
    assert result.layout.has_position_ids and result.layout.kv_heads == 2


@pytest.mark.slow
def test_gpt2_falls_to_the_torch_engine_and_runs_in_genai(sources, tmp_path):
    out = tmp_path / "gpt2"
    result = onnxlite.export(sources["gpt2"], out, decode_steps=STEPS)
    _check_folder(result, out, "torchscript", "left")
    assert json.loads((out / "genai_config.json").read_text())["search"]["past_present_share_buffer"] is False


@pytest.mark.slow
def test_a_bf16_module_built_in_code_is_cast_before_the_engines_and_verified(sources, tmp_path):
    bf16 = tiny_llama(tmp_path / "bf16", seed=1, dtype="bfloat16")
    code = tmp_path / "lm.py"
    code.write_text("import torch\nfrom transformers import AutoModelForCausalLM\n"
                    f"lm = AutoModelForCausalLM.from_pretrained({str(bf16)!r}, dtype=torch.bfloat16)\n")
    out = tmp_path / "out"
    result = onnxlite.export(f"{code}:lm", out, decode_steps=8)
    assert result.engine == "genai-builder" and result.verified, result.check.message()
    assert any("bfloat16" in note and "float32 module" in note for note in result.notes), result.notes
    assert sorted(p.name for p in bf16.iterdir()) == sorted(p.name for p in (tmp_path / "bf16").iterdir())
    assert not list(bf16.glob("*.onnx")) and (out / "tokenizer.json").is_file()


@pytest.mark.slow
def test_a_causal_lm_without_a_tokenizer_is_a_usage_error_at_export_and_writes_nothing(sources, tmp_path):
    out = tmp_path / "bare"
    with pytest.raises(UsageError, match="without a tokenizer") as caught:
        onnxlite.export(sources["bare"], out)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_folder_output_inside_the_source_or_full_of_other_files_is_refused_before_loading(sources, tmp_path):
    with pytest.raises(UsageError, match="inside it"):
        onnxlite.export(sources["llama"], sources["llama"] / "onnx")
    assert not (sources["llama"] / "onnx").exists()
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(UsageError, match="other files in it"):
        onnxlite.export(sources["llama"], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


@pytest.mark.slow
def test_a_causal_lm_to_one_file_keeps_logits_only_and_says_how_to_get_the_cache(sources, tmp_path):
    result = onnxlite.export(sources["llama"], tmp_path / "logits.onnx")
    assert result.verified and any("-o FOLDER" in note for note in result.notes)
    assert not any(name.startswith("present") for name in result.outputs)


@pytest.mark.unit
def test_a_gguf_file_without_gguf_installed_is_one_line(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(UsageError, match="needs the gguf package"):
        onnxlite.export(model, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


@pytest.mark.unit
def test_the_logits_tolerance_is_relative_to_their_scale():
    from onnxlite.conversion.verify import compare_outputs

    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((3, 5, 49152)) * 4).astype(np.float32)
    close = logits + rng.uniform(-1.1e-3, 1.1e-3, logits.shape).astype(np.float32)   # float32 summation noise
    wrong = logits + 0.1 * rng.standard_normal(logits.shape).astype(np.float32)
    assert compare_outputs({"logits": logits}, {"logits": close}, "s")[0].passed
    row = compare_outputs({"logits": logits}, {"logits": wrong}, "s")[0]
    assert not row.passed and row.scale == pytest.approx(float(np.abs(logits).max()))
