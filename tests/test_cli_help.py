"""Help text as a user reads it: percent signs, one spelling of flags, and of option sets."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from helpers import write_gemm_head

COMMANDS = ("export", "quantize", "compare", "bench", "lighten", "plugins")


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_help_prints_no_doubled_percent_signs(command):
    result = run_cli(*filter(None, [command]), "--help")
    assert result.returncode == 0, result.stderr
    assert "%%" not in result.stdout


def test_budgets_read_as_percentages():
    for command in ("lighten", "compare"):
        flat = " ".join(run_cli(command, "--help").stdout.split())
        assert "0.01 and 1% are the same" in flat, command
    assert "Default: 1%, or the --recipe's budget" in " ".join(run_cli("lighten", "--help").stdout.split())


def test_every_command_says_batch_and_compare_keeps_the_old_spelling_hidden(tmp_path):
    for command in ("compare", "bench", "lighten"):
        text = run_cli(command, "--help").stdout
        assert "--batch " in text and "--batch-size" not in text, command
    model = write_gemm_head(tmp_path / "m.onnx")

    def run(*flags: str) -> dict:
        result = run_cli("compare", str(model), str(model), "--samples", "4", *flags, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    # Both spellings set the batch; --samples 4 generates exactly 4 samples whatever the batch
    # (it once made whole batches: 6 with --batch 3, 8 by default).
    new, old, default = run("--batch", "3"), run("--batch-size", "3"), run()
    assert new["settings"]["batch_size"] == old["settings"]["batch_size"] == 3 != default["settings"]["batch_size"]
    assert new["samples"] == old["samples"] == default["samples"] == 4
    bad = run_cli("compare", str(model), str(model), "--batch", "0")
    assert bad.returncode == 2 and "--batch" in bad.stderr and "Traceback" not in bad.stderr
