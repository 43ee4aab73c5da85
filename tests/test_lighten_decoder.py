"""``lighten`` on a causal language model, end to end: a tiny LLaMA (grouped-query attention) transformers folder,
a corpus its own fp32 model wrote, a perplexity budget; the winner's folder runs in onnxruntime-genai.

The corpus is sampled from the model itself (temperature 1): on its own distribution every perturbation raises
perplexity in expectation (by the KL divergence), so a budget reads the damage of the weights' rounding, not
the luck of random words.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

#: words the tiny tokenizer knows (tests/llm_models.py); the model's vocabulary is theirs plus 4 specials
SPECIALS = 4


def _tiny_causal_lm(folder: Path) -> Path:
    """A 2-layer LLaMA (4 query heads, 2 KV heads) with weights large enough for peaked predictions."""
    import torch
    from llm_models import WORDS, tiny_tokenizer
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS) + SPECIALS, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                         initializer_range=0.1)
    folder.mkdir(parents=True)
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(folder)
    tiny_tokenizer(folder)
    return folder


def _own_text(folder: Path, target: Path, documents: int = 30, words: int = 120) -> Path:
    """Documents the fp32 model samples itself (no special tokens), as text: one corpus file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    generator = torch.Generator().manual_seed(0)
    ids = torch.full((documents, 1), 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(words):
            logits = model(input_ids=ids).logits[:, -1].double()
            logits[:, :SPECIALS] = -torch.inf
            ids = torch.cat([ids, torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)], 1)
    target.write_text("\n\n".join(tokenizer.decode(row.tolist()) for row in ids[:, 1:]) + "\n")
    return target


def _uniform_4bit(row) -> bool:
    """The same 4-bit blocks on every MatMul: no layer at 8 bits, none left float, the LM head as the rest."""
    options = row.options or {}
    return (row.strategy in {"weightonly", "int4", "gptq"} and options.get("bits", 4) == 4 and not row.keep_float
            and options.get("lm_head", "same") == "same" and not options.get("keep8") and not options.get("sensitive8")
            and not options.get("sensitive8_share"))


def _bound(row, key: str) -> float:
    upper = (row.intervals.get(key) or {}).get("upper")
    return upper if upper is not None else row.drops[key]


@pytest.mark.slow
def test_lighten_decoder_picks_what_the_budget_implies_and_runs_in_genai(tmp_path):
    import onnxruntime_genai as og

    import onnxlite
    from onnxlite.decoding import DecoderSession

    hf = _tiny_causal_lm(tmp_path / "hf")
    corpus = _own_text(hf, tmp_path / "corpus.txt")
    out = tmp_path / "out"
    result = onnxlite.lighten(hf, out, data=str(corpus), max_drop="perplexity=0.3%", strategies=["weightonly"],
                              runs=5, cache=False, workers=2)
    key = result.primary_metric
    assert key.endswith("perplexity")
    budget = result.budgets[key]
    assert budget == pytest.approx(0.003)
    rows = [r for r in result.candidates if r.drops.get(key) is not None]
    # every verdict is what the budget says of its figures (the confirm part's upper bound)
    for row in rows:
        if row.status in {"ok", "winner"}:
            assert _bound(row, key) <= budget + 1e-12, row.name
    uniform = [r for r in rows if _uniform_4bit(r)]
    assert uniform, "the decoder grid has uniform 4-bit candidates"
    winner = result.winner
    assert winner is not None, result.message
    assert winner.drops[key] <= budget and _bound(winner, key) <= budget
    # 0.3% is below what rounding every weight to 4 bits costs this model (each uniform 4-bit candidate's bound is
    # over it), so the budget implies a winner with some layers at 8 bits or float, or all at 8 bits
    missed = [r for r in uniform if r.over_budget]
    assert missed and len(missed) == len([r for r in uniform if r.status != "failed"]), \
        [(r.name, r.status) for r in uniform]
    assert not _uniform_4bit(winner), winner.name
    assert winner.size_bytes < result.baseline.size_bytes
    # the verdict speaks of decode tokens/s, and the report draws them
    assert "decode tokens/s at batch 1" in result.message
    assert "decode tokens/s" in (out / "report.html").read_text()
    # the folder runs in onnxruntime-genai as it is, and greedy there is onnxlite's greedy on the same folder
    for name in ("model.onnx", "genai_config.json", "tokenizer.json", "recipe.toml"):
        assert (out / name).is_file(), name
    from transformers import AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(out)(corpus.read_text().split("\n\n")[0])["input_ids"][:16]
    model = og.Model(str(out))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 12, min_length=len(prompt) + 12, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    assert len(tokens) == 12
    mine = DecoderSession(out).greedy([prompt], 12, eos_token_id=None, pad_token_id=0)
    assert list(mine.tokens[0]) == tokens


@pytest.mark.slow
def test_lighten_decoder_budget_on_a_metric_it_has_not_is_one_line_exit_2(tmp_path):
    from conftest import run_cli

    hf = _tiny_causal_lm(tmp_path / "hf")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(random.Random(i).choice(["the", "a", "cat"]) for _ in range(50))
                                  for i in range(4)))
    out = tmp_path / "out"
    done = run_cli("lighten", str(hf), "-o", str(out), "--data", str(corpus), "--max-drop", "accuracy=1%")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), done.stderr
    assert "accuracy" in lines[0] and "perplexity" in lines[0]
    assert not out.exists()


@pytest.mark.unit
def test_decoder_config_fills_the_budget_and_refuses_metrics_a_decoder_lacks():
    from onnxlite.errors import UsageError
    from onnxlite.search.config import LightenConfig
    from onnxlite.search.decoder import DEFAULT_BUDGET, decoder_config, decoder_metrics, primary_metric

    names = decoder_metrics()
    assert {"perplexity", "kl", "next_token_agreement", "greedy_agreement"} <= set(names)
    filled = decoder_config(LightenConfig())
    assert filled.max_drop == DEFAULT_BUDGET and primary_metric(filled) == "perplexity"
    # no float fallback on a decoder unless --max-float-nodes asks for it
    assert filled.partial is False and decoder_config(LightenConfig(max_float_nodes=4)).partial is True
    given = decoder_config(LightenConfig(max_drop=["kl=0.05", "perplexity=3%"]))
    assert given.max_drop == ["kl=0.05", "perplexity=3%"] and primary_metric(given) == "kl"
    aliased = decoder_config(LightenConfig(max_drop="top1_agreement=2%"))
    assert aliased.max_drop == "top1_agreement=2%" and primary_metric(aliased) == "next_token_agreement"
    for bad in (LightenConfig(max_drop="accuracy=1%"), LightenConfig(metric="pooled_cosine_mean")):
        with pytest.raises(UsageError, match="judged by"):
            decoder_config(bad)
