"""``onnxlite export`` end to end in a subprocess: exit codes, one-line errors, --json, no leftovers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import run_cli

MODELS = Path(__file__).parent / "export_models.py"


def single_error_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in proc.stderr
    return lines[0]


def test_json_result_is_verified(tmp_path):
    out = tmp_path / "two.onnx"
    proc = run_cli("export", f"{MODELS}:make_two_in_two_out", "-o", str(out), "--input", "left:float32[batch,4]",
                   "--input", "right:float32[batch,4]", "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["verified"] and payload["framework"] == "pytorch" and payload["path"] == str(out)
    assert [o["output"] for o in payload["verification"]["outputs"]] == ["total", "product"]
    assert all(o["max_abs_diff"] < 1e-4 for o in payload["verification"]["outputs"])
    assert payload["size_bytes"] == out.stat().st_size


def test_table_output(tmp_path):
    proc = run_cli("export", f"{MODELS}:argmax_net", "-o", str(tmp_path / "a.onnx"), "--input", "x:float32[batch,10]")
    assert proc.returncode == 0, proc.stderr
    assert "x:float32[batch,10]" in proc.stdout and "exact" in proc.stdout and "ok" in proc.stdout


def test_usage_errors_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage")
    weights = tmp_path / "w.pt"
    import torch

    torch.save({"fc.weight": torch.zeros(7, 10), "fc.bias": torch.zeros(7)}, weights)
    cases = {
        "no such file": ["export", str(tmp_path / "missing.pt"), "-o", str(tmp_path / "o.onnx")],
        "expected NAME:DTYPE": ["export", f"{MODELS}:cnn", "-o", str(tmp_path / "o.onnx"), "--input", "x=float32"],
        "--model-class": ["export", str(weights), "-o", str(tmp_path / "o.onnx"), "--input", "x:float32[batch,10]"],
        "bad.onnx": ["export", str(bad), "-o", str(tmp_path / "o.onnx")],
    }
    for expected, args in cases.items():
        proc = run_cli(*args)
        assert proc.returncode == 2, (expected, proc.stderr)
        assert expected in single_error_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx", "w.pt"]


def test_failed_verification_exits_1_and_leaves_nothing(tmp_path):
    out = tmp_path / "branch.onnx"
    proc = run_cli("export", f"{MODELS}:batch_dependent", "-o", str(out), "--input", "x:float32[batch,4]")
    assert proc.returncode == 1
    line = single_error_line(proc)
    assert "does not match" in line and "cosine" in line
    assert list(tmp_path.iterdir()) == []
    # --no-verify writes it (the user asked), and says it was not verified.
    proc = run_cli("export", f"{MODELS}:batch_dependent", "-o", str(out), "--input", "x:float32[batch,4]",
                   "--no-verify", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["verified"] is False and out.exists()


def test_unsupported_operator_exits_1_naming_it(tmp_path):
    proc = run_cli("export", f"{MODELS}:histogram_net", "-o", str(tmp_path / "h.onnx"), "--input",
                   "x:float32[batch,8]")
    assert proc.returncode == 1
    assert "histc" in single_error_line(proc)
    assert list(tmp_path.iterdir()) == []


def test_samples_and_tolerance_flags(tmp_path):
    samples = tmp_path / "s.npz"
    np.savez(samples, x=np.random.default_rng(1).standard_normal((3, 10)).astype(np.float32))
    proc = run_cli("export", f"{MODELS}:argmax_net", "-o", str(tmp_path / "a.onnx"), "--input", "x:float32[batch,10]",
                   "--samples", str(samples), "--atol", "1e-6", "--opset", "17", "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["opset"] == 17 and payload["verification"]["atol"] == 1e-6
    feed_sets = {r["feed_set"] for r in payload["verification"]["rows"]}
    assert feed_sets == {"batch=3 shape=[3, 10]", "batch=1 shape=[1, 10]"}
