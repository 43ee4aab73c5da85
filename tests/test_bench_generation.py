"""``bench`` for decoders: prefill and decode tokens/s, time to first token, KV-cache bytes, interleaved."""

from __future__ import annotations

import json
import statistics

import pytest
from decoder_models import builder_decoder, perturbed_copy
from llm_models import tiny_llama


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-decoders")
    hf = tiny_llama(root / "hf")
    fp32 = builder_decoder(hf, root / "fp32")
    return hf, fp32, perturbed_copy(fp32, root / "noisy", 0.3)


def test_bench_reports_prefill_and_decode_tokens_per_second_from_its_timings(decoders):
    from transformers import AutoConfig

    from onnxlite.benchmark.generation import GenerationPlan, bench_generation

    hf, fp32, noisy = decoders
    plan = GenerationPlan(prompt_lengths=(16, 100), new_tokens=12, batches=(1, 3), rounds=2)
    result = bench_generation([fp32, noisy], plan)
    config = AutoConfig.from_pretrained(hf)
    head_dim = config.hidden_size // config.num_attention_heads
    for row in result.rows:
        assert row.status == "ok", row.note
        assert row.kv_bytes_per_token == 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4
        assert row.size_bytes > 0 and row.peak_rss_bytes > row.baseline_rss_bytes > 0
        for prompt in plan.prompt_lengths:
            times = [r["prefill_seconds"] for r in row.runs if r["kind"] == "prefill" and r["prompt"] == prompt]
            assert len(times) == plan.rounds and all(t > 0 for t in times)
            assert row.prefill_tokens_per_s[prompt] == pytest.approx(prompt / statistics.median(times))
            assert row.ttft_ms[prompt] == pytest.approx(statistics.median(times) * 1e3)
        for batch in plan.batches:
            runs = [r for r in row.runs if r["kind"] == "decode" and r["batch"] == batch]
            assert all(r["decode_tokens"] == batch * (plan.new_tokens - 1) for r in runs)   # no early stop
            rates = [r["decode_tokens"] / r["decode_seconds"] for r in runs]
            assert row.decode_tokens_per_s[batch] == pytest.approx(statistics.median(rates))
            assert row.decode_tokens_per_s[batch] > 0
    # interleaved: every scenario runs on one model, then on the other, before the next scenario
    assert [m for m, _ in result.schedule[:4]] == [0, 1, 0, 1]
    lines = result.table_lines()
    assert max(len(line) for line in lines) <= 80, lines and any("decode tok/s batch 3" in line for line in lines)


def test_cli_bench_of_decoders_prints_json_and_refuses_a_prompt_beyond_the_context(decoders, capsys):
    from onnxlite.cli import main

    _, fp32, _ = decoders
    with pytest.raises(SystemExit) as done:
        main(["bench", str(fp32), "--prompt-lengths", "8", "--new-tokens", "4", "--decode-batches", "2",
              "--rounds", "1", "--json"])
    assert (done.value.code or 0) == 0
    payload = json.loads(capsys.readouterr().out)
    model = payload["models"][0]
    assert payload["kind"] == "generation" and model["prefill_tokens_per_s"]["8"] > 0
    assert model["decode_tokens_per_s"]["2"] > 0 and model["kv_bytes_per_token"] > 0
    with pytest.raises(SystemExit) as done:
        main(["bench", str(fp32), "--prompt-lengths", "200"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "longer than the model's context of 128" in err
