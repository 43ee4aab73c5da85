"""``onnxlite generate`` over an exported tiny GPT-2 folder: EOS stops a row, the context bounds the prompt."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from llm_models import tiny_gpt2

import onnxlite
from onnxlite.errors import UsageError

PROMPT = "the capital of france is"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate")
    out = root / "gpt2-onnx"
    onnxlite.export(tiny_gpt2(root / "gpt2", seed=3), out, decode_steps=4)
    return out


def _with_eos(folder, eos, target):
    shutil.copytree(folder, target)
    config = json.loads((target / "generation_config.json").read_text())
    config["eos_token_id"] = eos
    (target / "generation_config.json").write_text(json.dumps(config))
    return target


@pytest.mark.slow
def test_generate_stops_at_the_end_token_and_reports_speed(exported, tmp_path):
    from onnxlite.cli import cli
    from onnxlite.decoding import generate

    free = generate(exported, [PROMPT], 12).new_tokens[0]
    assert len(free) == 12 or free[-1] == 2
    eos = free[3]
    cut = free.index(eos) + 1
    folder = _with_eos(exported, eos, tmp_path / "eos")
    result = CliRunner().invoke(cli, ["generate", str(folder), PROMPT, "--max-new-tokens", "12", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["new_tokens"] == [list(free[:cut])] and payload["stopped"] == [True]
    assert payload["decode_steps"] == cut - 1 and payload["prefill_tokens_per_second"] > 0
    text = CliRunner().invoke(cli, ["generate", str(exported), PROMPT, "--max-new-tokens", "3"])
    assert text.exit_code == 0 and text.output.startswith(PROMPT)


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_is_one_usage_error(exported):
    from onnxlite.decoding import generate

    with pytest.raises(UsageError, match="context is 128 tokens") as caught:
        generate(exported, [" ".join(["the"] * 130)], 4)
    assert caught.value.exit_code == 2
    capped = generate(exported, [" ".join(["the"] * 120)], 20)
    assert capped.capped_to == 8 and len(capped.new_tokens[0]) <= 8


@pytest.mark.slow
def test_generate_refuses_a_model_that_is_not_a_decoder(tmp_path):
    from onnxlite.decoding import generate

    with pytest.raises(UsageError, match="no such model"):
        generate(tmp_path, ["hello"], 4)
