"""Issue 25 §1: every report page and chart is well-formed, every axis is labelled at round values with a zero
line, and no Markdown syntax is left in a page's text, checked on real lighten reports (a tiny MLP, a
mid-size one measured in MB) and a MiniLM-shaped one, rendered in headless Chromium."""

from __future__ import annotations

import math
import re
import subprocess
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path

import pytest

from conftest import run_cli
from test_report import CHROMIUM_FLAGS, _chromium

SVG = "{http://www.w3.org/2000/svg}"
MID_MLP = '''
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10)).eval()
'''


# -- axes and Markdown, as units ------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("low,high", [(0, 0.0056), (-0.0025, 0.031), (0, 366.6), (0, 97.0), (0, 1.3),
                                      (-3e-4, 0.05), (0, 2.3e-7), (0, 1295.4), (0.97, 0.999)])
def test_ticks_are_round_cover_the_range_and_hold_zero(low, high):
    from onnxlite.report.axes import nice_ticks, tick_labels

    ticks = nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and 3 <= len(ticks) <= 8
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10)), step
    if low <= 0 <= high:
        assert 0.0 in ticks
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels)                     # no two ticks read the same
    assert all(len(label) <= 7 for label in labels), labels      # no 0.30000000000000004
    for tick, label in zip(ticks, labels):
        assert math.isclose(float(label), tick, rel_tol=0.02, abs_tol=step / 100)


@pytest.mark.unit
def test_markdown_sections_leave_no_syntax_behind():
    from onnxlite.report.markdown import markdown_to_html

    text = ("Based on `dynamic` (over budget). Worst nodes:\n- `/a/Gemm` (Gemm): adds 0.0081\n- **b**: c\n\n"
            "Steps:\n- 1 node(s) in float: rejected\n\n| candidate | drop |\n|---|---|\n| fp16 | 0 |\n| x\\|y | 1 |")
    html = markdown_to_html(text)
    root = ET.fromstring(f"<div>{html}</div>")
    assert [e.tag for e in root] == ["p", "ul", "p", "ul", "div"]
    assert len(root.findall(".//li")) == 3 and len(root.findall(".//td")) == 4 and len(root.findall(".//th")) == 2
    _assert_no_markdown("".join(root.itertext()))
    assert "x|y" in "".join(root.itertext())


def _assert_no_markdown(text: str) -> None:
    assert not re.search(r"\|\s*-{3,}|\*\*|`", text), re.search(r".{0,40}(\|\s*-{3,}|\*\*|`).{0,40}", text)
    assert not re.search(r"(^|\n)\s*[-*] ", text), re.search(r"(^|\n)\s*[-*] .{0,60}", text)
    assert not re.search(r"(^|\n)\s*\|.*\|\s*($|\n)", text)


@pytest.mark.unit
def test_settings_read_as_words():
    from onnxlite.report.text import setting_text

    assert setting_text(False, "recipe") == "searched (no recipe)"
    assert setting_text({"name": "local", "tasks": 17}) == "name local, tasks 17"
    assert setting_text({"memory_bytes": 25 * 1024**3}) == "memory bytes 25.0 GB"


# -- real reports in Chromium ---------------------------------------------------------------------------------

def _lighten(tmp: Path, source: str, shape: str) -> Path:
    model = tmp / "model.py"
    model.write_text(source)
    out = tmp / "out"
    proc = run_cli("lighten", f"{model}:model", "--input", shape, "-o", str(out), "--max-drop", "0.5%",
                   "--runs", "3", timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return out / "report.html"


@pytest.fixture(scope="module")
def tiny_page(tmp_path_factory) -> Path:
    from conftest import MLP_SOURCE

    return _lighten(tmp_path_factory.mktemp("tiny"), MLP_SOURCE, "x:float32[batch,64]")


@pytest.fixture(scope="module")
def mid_page(tmp_path_factory) -> Path:
    return _lighten(tmp_path_factory.mktemp("mid"), MID_MLP, "x:float32[batch,256]")


@pytest.fixture(scope="module")
def minilm_page(tmp_path_factory) -> Path:
    from onnxlite.report.files import write_report
    from test_report_layout import _result

    return write_report(_result().to_report(), tmp_path_factory.mktemp("minilm") / "report")["html"]


def _check_page(page: Path, tmp: Path, unit: str) -> None:
    source = page.read_text()
    ET.fromstring(source.replace("<!DOCTYPE html>", "", 1))      # the page itself is well-formed
    browser = _chromium()
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", "--window-size=1280,2400",
                          "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    svgs = re.findall(r"<svg.*?</svg>", dom.stdout, re.S)
    assert len(svgs) == 2, len(svgs)                              # drop against size, drop against latency
    for svg in svgs:
        root = ET.fromstring(svg)
        for axis in ("x", "y"):
            ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == f"tick {axis}"]
            assert len(ticks) >= 3 and all(ticks), (axis, ticks)
        y_ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick y"]
        assert "0" in y_ticks and [e for e in root.iter(f"{SVG}line") if e.get("class") == "zero"]
    assert f"size on disk ({unit})" in svgs[0]
    body = dom.stdout[dom.stdout.index("<body"):]
    text = unescape(re.sub(r"<[^>]+>", "\n", re.sub(r"<(style|svg)\b.*?</\1>", "", body, flags=re.S)))
    _assert_no_markdown(text)
    unrounded = re.search(r".{0,40}\d\.0*[1-9]\d{6,}.{0,20}", text)          # 7+ significant digits
    assert not unrounded, unrounded.group(0)
    assert "{&quot;" not in dom.stdout and '{"' not in text and "recipe\nFalse" not in text   # no JSON settings


def test_tiny_model_report_renders(tiny_page, tmp_path):
    _check_page(tiny_page, tmp_path, "KB")


@pytest.mark.slow
def test_mid_size_model_report_renders(mid_page, tmp_path):
    _check_page(mid_page, tmp_path, "MB")


def test_minilm_shaped_report_renders(minilm_page, tmp_path):
    _check_page(minilm_page, tmp_path, "MB")


def test_the_tiny_report_header_says_how_many_answers_may_change(tiny_page):
    """Issue 25 §2: the table header gives the budget's allowance in changed answers, before anyone counts."""
    from onnxlite.report.model import Report
    import json

    report = Report.from_dict(json.loads(tiny_page.with_name("report.json").read_text()))
    allowance = report.allowances[report.primary_metric]
    assert allowance["by"] == "measured drop"        # 0.5% on the default sample count cannot be proven at 95%
    assert allowance["allowed"] == int(0.005 * allowance["samples"])
    head = tiny_page.read_text().split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert f"≤ {allowance['allowed']} of {allowance['samples']} answers may change (measured)" in head


@pytest.mark.unit
@pytest.mark.parametrize("samples,budget", [(400, 0.01), (238, 0.01), (1000, 0.01), (5000, 0.02), (128, 0.05)])
def test_allowed_changes_is_the_last_count_the_bound_passes(samples, budget):
    from onnxlite.stats import allowance_text, allowed_changes, clopper_pearson, samples_for_changes

    allowed = allowed_changes(samples, budget)
    upper = lambda k, n: clopper_pearson(k, n, 0.95, "less")[1]   # noqa: E731
    if allowed >= 0:
        assert upper(allowed, samples) <= budget
    assert upper(allowed + 1, samples) > budget
    more = samples_for_changes(allowed + 1, budget)
    assert more > samples and upper(allowed + 1, more) <= budget and upper(allowed + 1, more - 1) > budget
    assert f"{more} samples" in allowance_text(samples, budget)


@pytest.mark.unit
@pytest.mark.parametrize("kind,latency", [("compare", False), ("bench", True)])
def test_compare_and_bench_pages_are_well_formed_with_labelled_axes(kind, latency):
    """The generic page (compare, bench) parses as XML too, and its scatter's axes are labelled at round values."""
    from onnxlite.report.html import render_html
    from test_report import _report

    page = ET.fromstring(render_html(_report(kind=kind, latency=latency)).replace("<!DOCTYPE html>", "", 1))
    svg = next(e for e in page.iter(f"{SVG}svg"))
    for axis in ("x", "y"):
        ticks = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == f"tick {axis}"]
        assert len(ticks) >= 3 and all(len(t) <= 7 for t in ticks), ticks
    _assert_no_markdown("".join(e for e in page.find(".//body").itertext() if e))
