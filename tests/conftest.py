"""Shared test fixtures: an isolated plugin host and hand-built plugin distributions."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Forget cached plugins before and after a test that changes the environment."""
    import onnxlite.plugins

    onnxlite.plugins.reset()
    yield monkeypatch
    onnxlite.plugins.reset()


def make_plugin_dist(site: Path, dist: str, version: str, module: str, source: str,
                     entry_name: str | None = None) -> Path:
    """Write an installed-looking distribution (module + dist-info with an onnxlite entry point) into ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[onnxlite]\n{entry_name or module} = {module}\n")
    return site


def run_cli(*args: str, site: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m onnxlite`` in a fresh process (so plugin discovery and imports are real)."""
    full_env = dict(os.environ)
    full_env.pop("ONNXLITE_DISABLE_PLUGIN_AUTOLOAD", None)
    if site is not None:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), full_env.get("PYTHONPATH", "")]))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "onnxlite", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
