"""What a user reads at the terminal (issue 14): lighten's live lines and final table at 80 columns, verdicts
that agree with their numbers, one spelling of option sets, and one set of source flags on every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_cli
from helpers import write_gemm_head

# -- fitting text ------------------------------------------------------------------------------------

def test_ellipsize_never_cuts_a_number_and_marks_the_cut():
    from onnxlite.report.text import ellipsize

    reason = "over budget: pooled_cosine_min: drop 0.04271, 95% bound 0.0476 > max 0.01"
    for width in range(20, len(reason)):
        short = ellipsize(reason, width)
        assert len(short) <= width and short.endswith("…"), (width, short)
        kept = short[:-1].split()
        # every word kept is a whole word of the reason: "drop 0" never stands for "drop 0.04271"
        words = reason.split()
        assert kept == words[:len(kept)] or kept[-1].rstrip(",;:(") == words[len(kept) - 1].rstrip(",;:("), short
    assert ellipsize(reason, len(reason)) == reason


def test_paths_shrink_to_file_names_so_the_error_survives():
    from onnxlite.report.text import ellipsize, shorten_paths

    reason = ("quantize failed: /tmp/onnxlite-scratch-0a1b2c3d/candidates/work-3/fp32.onnx: "
              "NameError: name 'guarded_nodes' is not defined")
    line = ellipsize(shorten_paths(reason), 70)
    assert "fp32.onnx: NameError" in line and "/tmp" not in line


def test_sizes_and_speeds_read_the_right_way_round():
    from onnxlite.report.text import size_change, speed_change

    assert size_change(315, 100) == "3.15x smaller"
    assert size_change(100, 101) == "1.01x larger"      # never "0.99x smaller"
    assert size_change(100, 100.2) == "same size"
    assert speed_change(10.0, 8.0) == "1.25x faster"
    assert speed_change(10.0, 11.0) == "1.10x slower"    # never "0.91x faster"


def test_candidate_names_spell_option_sets_as_the_command_line_does():
    from onnxlite.search.candidates import candidate_name

    assert candidate_name("dynamic", {"op_types": ("MatMul", "Gemm", "Gather")}) == \
        "dynamic[op_types=MatMul,Gemm,Gather]"


# -- the final lighten table at 80 columns ---------------------------------------------------------------

def _result():
    from onnxlite.search.results import CandidateRow, LightenResult

    def lat(p50):
        return {"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.2, "mean": p50}

    def interval(estimate, upper):
        return {"estimate": estimate, "low": estimate / 2, "high": upper, "upper": upper}

    keys = ("last_hidden_state.pooled_cosine_mean", "last_hidden_state.pooled_cosine_min")
    base = CandidateRow("fp32", "fp32", {}, status="reference", size_bytes=90_000_000, latency_ms=lat(20.0))
    rows = [
        CandidateRow("dynamic[op_types=MatMul,Gemm,Gather]", "dynamic", {}, status="winner", size_bytes=23_000_000,
                     latency_ms=lat(9.1), drops=dict(zip(keys, (0.0021, 0.0062))),
                     intervals=dict(zip(keys, (interval(0.0021, 0.0029), interval(0.0062, 0.0081)))),
                     reason="fastest within budget: 3.91x smaller and 2.20x faster than fp32"),
        CandidateRow("static[method=MinMax,per_channel=true,format=QDQ]", "static", {}, status="rejected",
                     size_bytes=23_100_000, drops=dict(zip(keys, (0.0121, 0.04271))),
                     reason="over budget: last_hidden_state.pooled_cosine_mean: drop 0.0121 > max 0.005; "
                            "last_hidden_state.pooled_cosine_min: drop 0.04271 > max 0.01"),
        CandidateRow("fp16", "fp16", {}, status="ok", size_bytes=91_000_000, latency_ms=lat(21.0),
                     drops=dict(zip(keys, (0.0, 0.0))),
                     reason="within budget, but against the winner: 2.31x slower, 3.96x larger"),
        CandidateRow("broken", "broken", {}, status="failed",
                     reason="quantize failed: /tmp/onnxlite-x/scratch/fp32.onnx: NameError: name 'g' is not defined"),
    ]
    return LightenResult(output_dir=Path("out"), winner=rows[0], baseline=base, candidates=rows, skipped=[],
                         primary_metric=keys[0], budgets=dict(zip(keys, (0.005, 0.01))), objective="latency",
                         message="winner: ...", export={}, settings={}, data="sentences")


@pytest.mark.parametrize("width", (80, 120))
def test_the_lighten_table_fits_the_screen_with_every_budget_and_every_reason(width):
    from rich.console import Console

    from onnxlite.cli.lighten import lighten_table, reason_lines

    result = _result()
    console = Console(width=width, record=True)
    console.print(lighten_table(result, width))
    table = console.export_text()
    lines = table.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    assert len(lines) < 40      # the old layout ran to ~290 lines at 80 columns
    # both budgeted metrics have a column (with the upper confidence bound under the drop)
    flat = " ".join(table.split())
    assert "pooled_ cosine_ mean drop" in flat.replace("\n", " ") or "pooled_cosine_mean" in flat
    for figure in ("0.0021", "≤0.0029", "0.0062", "≤0.0081", "0.0427", "÷3.91", "÷2.20", "×1.01"):
        assert figure in table, figure
    # names wrap only after "[" "," or "+": every line of a name cell is a whole piece of the name
    name_cells = [line[:line.find("  ", 1)].strip() for line in lines if line.strip()]
    for name in ("dynamic[op_types=MatMul,Gemm,Gather]", "static[method=MinMax,per_channel=true,format=QDQ]"):
        pieces = re.findall(r"[^\[,+]+[\[,+]?", name)
        joined = "".join(cell for cell in name_cells if cell and any(cell == "".join(pieces[i:j])
                                                                      for i in range(len(pieces))
                                                                      for j in range(i + 1, len(pieces) + 1)))
        assert name in joined, (name, name_cells)
    # the reasons come whole under the table, with paths cut to file names
    reasons = reason_lines(result, width)
    assert any("drop 0.04271 > max 0.01" in line for line in reasons)
    assert any("fp32.onnx: NameError: name 'g' is not defined" in line and "/tmp" not in line for line in reasons)


def test_live_lines_keep_whole_numbers_at_80_columns():
    from rich.console import Console

    from onnxlite.cli.lighten import LiveProgress

    console = Console(width=80, record=True, force_terminal=False)
    progress = LiveProgress(console)
    reason = ("over budget: last_hidden_state.pooled_cosine_mean: drop 0.006713, 95% bound 0.007052 > max 0.005; "
              "last_hidden_state.pooled_cosine_min: drop 0.04271 > max 0.01")
    with progress:
        progress.event("candidate_done", {"name": "dynamic", "status": "rejected", "reason": reason,
                                          "primary": "last_hidden_state.pooled_cosine_mean",
                                          "metrics": {"last_hidden_state.pooled_cosine_mean": 0.9933,
                                                      "last_hidden_state.pooled_cosine_min": 0.9573}})
        progress.event("candidate_done", {"name": "broken", "status": "failed", "metrics": {},
                                          "reason": "quantize failed: /tmp/onnxlite-abc/scratch/w/fp32.onnx: "
                                                    "NameError: name 'g' is not defined"})
    text = console.export_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines), lines
    assert lines[0].endswith("…)") and "rejected dynamic (pooled_cosine_mean: drop 0.006713, 95% bound " \
        "0.007052" in lines[0], lines[0]
    assert re.search(r"\d…", lines[0]) is None       # no number cut off before the ellipsis
    assert "fp32.onnx: NameError" in lines[1] and "/tmp" not in lines[1]


# -- verdicts ----------------------------------------------------------------------------------------------

def test_a_verdict_on_a_speed_tie_says_what_the_tie_rule_saw():
    """1.25x faster within a 25% noise margin: the message must not say "not measurably faster" beside "1.25x
    faster" without the margin that made it so."""
    from onnxlite.search.choose import latency_margin
    from onnxlite.search.results import CandidateRow, why_won

    base = CandidateRow("fp32", "fp32", {}, size_bytes=315, latency_ms={"p50": 10.0, "p90": 13.0})
    small = CandidateRow("int8", "dynamic", {}, size_bytes=100, latency_ms={"p50": 8.0, "p90": 10.0})
    assert latency_margin(small) == pytest.approx(0.25)
    assert why_won(small, base, "size") == "smallest within budget: 3.15x smaller and 1.25x faster than fp32"
    fast = CandidateRow("fp16", "fp16", {}, size_bytes=200, latency_ms={"p50": 7.9, "p90": 8.0})
    assert why_won(small, base, "latency", fast).startswith("within the latency tie margin of the fastest (fp16)")


# -- one set of source flags --------------------------------------------------------------------------------

SOURCE_FLAGS = {"--framework": "NAME", "--model-class": "MODULE:CLASS", "--input": "NAME:DTYPE[dims]",
                "--option": "KEY=VALUE"}


@pytest.mark.parametrize("command", ("export", "compare", "lighten"))
def test_every_command_that_loads_a_source_takes_the_same_four_flags(command):
    text = run_cli(command, "--help").stdout
    for flag, metavar in SOURCE_FLAGS.items():
        assert re.search(rf"{re.escape(flag)} {re.escape(metavar)}\s", text), (command, flag)


@pytest.fixture(scope="module")
def state_dict(tmp_path_factory):
    torch = pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("sd")
    (root / "net.py").write_text(
        "import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(16, 4)\n\n    def forward(self, x):\n        return self.fc(x)\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("sd_net_for_surface", root / "net.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    torch.save(module.Net().state_dict(), root / "net_sd.pt")
    return root


def test_compare_takes_model_class_for_a_state_dict_reference(state_dict):
    onnx_path = state_dict / "net.onnx"
    flags = ["--model-class", f"{state_dict / 'net.py'}:Net", "--input", "x:float32[batch,16]"]
    exported = run_cli("export", str(state_dict / "net_sd.pt"), "-o", str(onnx_path), *flags)
    assert exported.returncode == 0, exported.stderr
    result = run_cli("compare", str(state_dict / "net_sd.pt"), str(onnx_path), *flags, "--samples", "4", "--json")
    assert result.returncode == 0, result.stderr
    import json

    payload = json.loads(result.stdout)
    assert payload["framework"] == "pytorch" and payload["samples"] == 4
    assert payload["reference"] == str(state_dict / "net_sd.pt")
    cosine = [v for k, v in payload["candidates"][0]["metrics"].items() if k.endswith("cosine_min")]
    assert cosine and cosine[0] > 0.9999


# -- hub ids ------------------------------------------------------------------------------------------------

def test_a_hub_id_says_how_to_make_a_local_folder(tmp_path):
    result = run_cli("export", "sentence-transformers/all-MiniLM-L6-v2", "-o", str(tmp_path / "m.onnx"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    flat = " ".join(result.stderr.split())
    assert "local folder" in flat and "huggingface-cli download sentence-transformers/all-MiniLM-L6-v2" in flat
    assert "save_pretrained" in flat


# -- default metrics by what an output is -------------------------------------------------------------------

def test_default_metrics_follow_what_each_output_is():
    """A 384-d sentence embedding gets no top-1 agreement (argmax means nothing there), a [batch, 1] score no
    cosine (one number's cosine is its sign), a per-frame class output its per-frame agreement; every default
    says why it was chosen."""
    import numpy as np

    from onnxlite.evaluation.metrics import resolve_metrics

    rng = np.random.default_rng(0)
    outputs = {"pooler_output": rng.standard_normal((8, 384)).astype(np.float32),
               "logits": rng.standard_normal((8, 10)).astype(np.float32),
               "speech_prob": rng.random((8, 1)).astype(np.float32),
               "ctc_probs": rng.random((8, 20, 30)).astype(np.float32)}
    resolved = resolve_metrics(outputs, {"x": np.zeros((8, 4), np.float32)})
    keys = {m.key for m in resolved}
    assert {"pooler_output.cosine_mean", "pooler_output.cosine_min"} <= keys
    assert not any(k.startswith("pooler_output.top") for k in keys)
    assert {"logits.top1_agreement", "logits.cosine_mean"} <= keys          # classifier logits unchanged
    assert "speech_prob.scalar_abs_error" in keys and "speech_prob.cosine_mean" not in keys
    assert "ctc_probs.frame_agreement" in keys and "ctc_probs.top1_agreement" not in keys
    why = {m.key: m.why for m in resolved}
    assert why["pooler_output.cosine_mean"].startswith("pooler_output is embedding")
    assert "one value per sample" in why["speech_prob.scalar_abs_error"]
    # a metric the user names is used as asked, with no "why"
    named = resolve_metrics(outputs, {}, requested=["pooler_output.top1_agreement"])
    assert [(m.key, m.why) for m in named] == [("pooler_output.top1_agreement", "")]


def test_bench_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path):

    model = write_gemm_head(tmp_path / "m.onnx")
    result = run_cli("bench", str(model), str(model), "--runs", "4", "--warmup", "1")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("· ")]
    assert any("measuring" in line for line in lines) and any("100%" in line for line in lines), result.stderr
    # one line per step and quarter, not one per interleaved turn
    assert sum("measuring" in line for line in lines) <= 5, lines


def test_quantize_table_shows_an_auto_option_once_and_each_warning_once(capsys, monkeypatch, tmp_path):
    from onnxlite.cli.quantize import print_result
    from onnxlite.quantization.run import QuantizeResult

    monkeypatch.setenv("COLUMNS", "200")
    result = QuantizeResult(path=tmp_path / "out.onnx", strategy="static", options={"per_channel": None},
                            size_before=100, size_after=101, quantized_ops={"Conv": 3},
                            details={"per_channel": True}, warnings=["this model is conv-heavy"],
                            source=tmp_path / "in.onnx")
    print_result(result)
    out = capsys.readouterr().out
    assert "per_channel=True (auto)" in out and "None" not in out and "per channel" not in out
    assert "1.01x larger" in out and "smaller" not in out          # never "0.99x smaller"
    assert "conv-heavy" not in out and "1 (printed above)" in out   # printed once, on stderr, as it happened
