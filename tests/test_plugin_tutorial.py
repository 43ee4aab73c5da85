"""docs/plugins.md's tutorial runs as written: its own code blocks, built, installed and used.

Every block that belongs to the tutorial's package is preceded by ``<!-- file: PATH -->``; a file's
blocks are joined in page order with two blank lines between them (PEP 8's spacing between
top-level definitions).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT
from helpers import really_quantized, write_gemm_head

PAGE = ROOT / "docs" / "plugins.md"
EXAMPLE = ROOT / "examples" / "onnxlite-guard-quantizer"
BLOCK = re.compile(r"^<!-- file: (\S+) -->\n```[\w-]*\n(.*?)^```$", re.M | re.S)


def tutorial_files() -> dict[str, str]:
    blocks: dict[str, list[str]] = {}
    for path, body in BLOCK.findall(PAGE.read_text()):
        blocks.setdefault(path, []).append(body)
    return {path: "\n\n".join(parts) for path, parts in blocks.items()}


def test_the_page_holds_a_whole_package_and_it_is_the_example():
    files = tutorial_files()
    assert set(files) == {"pyproject.toml", "src/onnxlite_guard_quantizer/__init__.py"}
    assert "[build-system]" in files["pyproject.toml"]
    for path, text in files.items():
        assert text == (EXAMPLE / path).read_text(), f"docs/plugins.md's {path} differs from the example's"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv over this environment, with the page's package built and installed into it."""
    base = tmp_path_factory.mktemp("tutorial")
    package = base / "onnxlite-guard-quantizer"
    for path, text in tutorial_files().items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(text)
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(env_dir)],
                   check=True, capture_output=True, text=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # A venv made from inside a venv sees the base interpreter's packages, not this environment's
    # (onnxlite, onnxruntime, hatchling, pip): add them behind the new venv's own.
    (Path(site) / "_outer_env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    str(package)], check=True, capture_output=True, text=True)
    assert list(Path(site).glob("onnxlite_guard_quantizer-*.dist-info")), "installed somewhere else"
    return env_dir


def _onnxlite(venv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"ONNXLITE_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH"}}
    return subprocess.run([str(venv / "bin" / "python"), "-m", "onnxlite", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_the_tutorial_package_is_listed(venv):
    listed = _onnxlite(venv, "--list-plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    row = next(s for s in json.loads(listed.stdout)["strategies"] if s["name"] == "guarded")
    assert (row["distribution"], row["available"]) == ("onnxlite-guard-quantizer", True)
    assert not json.loads(listed.stdout)["broken"]


def test_the_tutorial_strategy_runs_in_quantize(venv, tmp_path):
    model = write_gemm_head(tmp_path / "model.onnx")
    out = tmp_path / "model.int8.onnx"
    result = _onnxlite(venv, "quantize", str(model), "-o", str(out), "--strategy", "guarded", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    kept, quantized = really_quantized(model, out)
    assert payload["strategy"] == "guarded" and payload["excluded_nodes"] == kept
    assert kept == ["/model/fc1/MatMul", "/model/head/Gemm"] and quantized == ["/model/fc2/MatMul"]


def test_the_tutorial_strategy_runs_in_lighten(venv, tmp_path):
    model = write_gemm_head(tmp_path / "model.onnx")
    out = tmp_path / "model.lightened"
    result = _onnxlite(venv, "lighten", str(model), "-o", str(out), "--strategies", "guarded", "--runs", "3",
                       "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    tried = {c["name"] for c in payload["candidates"]}
    assert tried == {"guarded", "guarded[keep_first=false]"}, tried  # the spec's grid, both option sets
    winner = payload["winner"]
    assert winner["name"] in tried and winner["status"] == "winner"
    kept, _ = really_quantized(model, out / "model.onnx")
    assert winner["quantize"]["excluded_nodes"] == kept and "/model/head/Gemm" in kept
