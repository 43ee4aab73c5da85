"""Reports: the rich table, report.json / report.md, and the HTML page rendered in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from onnxlite.errors import UsageError
from onnxlite.report.files import write_report
from onnxlite.report.model import ModelRow, Report
from onnxlite.report.text import render_table

from helpers import CHROMIUM_FLAGS, REPORT_PRIMARY, chromium, sample_report


def test_ratios_use_the_reference_row():
    report = sample_report()
    report.rows[0], report.rows[1] = report.rows[1], report.rows[0]   # reference is no longer first
    ratios = report.ratios()
    assert report.baseline_index == 1
    assert ratios[1] == {"size": 1.0, "speedup": 1.0, "memory": 1.0}
    assert ratios[0]["size"] == pytest.approx(23 / 90)
    assert ratios[0]["speedup"] == pytest.approx(12 / 5)
    assert ratios[0]["memory"] == pytest.approx(0.5)
    assert ratios[4] == {"size": None, "speedup": None, "memory": None}


def test_metric_names_put_the_primary_first():
    assert sample_report().metric_names() == [REPORT_PRIMARY, "logits.top1_agreement"]


def test_render_table_shows_every_measured_column():
    from rich.console import Console

    console = Console(record=True, width=260)
    console.print(render_table(sample_report()))
    text = console.export_text()
    for needle in ("fp32", "dynamic <int8>", "p50 ms", "p99 ms", "throughput", "peak RSS", "speedup", REPORT_PRIMARY,
                   "0.9920", "2.40×", "calibration data missing", "reference", "winner", "rejected", "failed"):
        assert needle in text, needle


def test_render_table_fits_80_columns_keeping_the_deciding_figures():
    from rich.console import Console

    wide = Console(record=True, width=260)
    wide.print(render_table(sample_report(), width=260))
    assert max(len(line) for line in wide.export_text().splitlines()) > 80   # the case needs narrowing at all
    console = Console(record=True, width=80)
    console.print(render_table(sample_report(), width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    headers = [c.header for c in render_table(sample_report(), width=80).columns]
    for kept in ("model", "status", "size", "p50 ms", "speedup", "size ratio", REPORT_PRIMARY):
        assert kept in headers, kept
    assert "p99 ms" not in headers and "left out to fit 80 columns: p99 ms" in " ".join(text.split())


def test_table_leaves_out_figures_nobody_measured():
    report = Report("accuracy only", "compare", [ModelRow("a", "a.onnx", size_bytes=10, metrics={"m": 0.5})],
                    primary_metric="m")
    headers = [c.header for c in render_table(report).columns]
    assert headers == ["model", "status", "size", "m"]


def test_write_report_writes_three_files_atomically(tmp_path):
    report = sample_report()
    target = tmp_path / "nested" / "report"
    paths = write_report(report, target)
    assert set(paths) == {"html", "json", "md"}
    assert sorted(p.name for p in target.iterdir()) == ["report.html", "report.json", "report.md"]
    data = json.loads(paths["json"].read_text())
    assert data["kind"] == "lighten" and data["primary_metric"] == REPORT_PRIMARY and data["baseline"] == "fp32"
    assert data["rows"][1]["ratios"]["speedup"] == pytest.approx(12 / 5)
    back = Report.from_dict(data)
    assert back.rows == report.rows and back.sections == report.sections and back.settings == report.settings
    md = paths["md"].read_text()
    assert "| model | status | size |" in md and "dynamic <int8>" in md and "## Why these won" in md
    # writing again replaces the files and leaves no temporary files behind
    report.title = "second"
    write_report(report, target)
    assert sorted(p.name for p in target.iterdir()) == ["report.html", "report.json", "report.md"]
    assert json.loads(paths["json"].read_text())["title"] == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert paths["html"].stat().st_mode & 0o777 == 0o666 & ~mask


def test_write_report_refuses_a_file(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="not a folder"):
        write_report(sample_report(), blocker)
    assert blocker.read_text() == "x"


def test_json_stays_valid_with_nan():
    report = Report("nan", "compare", [ModelRow("a", "a.onnx", metrics={"m": float("nan")})])
    assert json.loads(json.dumps(report.to_dict()))["rows"][0]["metrics"]["m"] is None


def test_html_is_self_contained_and_escaped():
    from onnxlite.report.html import render_html

    html = render_html(sample_report())
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "dynamic &lt;int8&gt;" in html and "dynamic <int8>" not in html
    # four rows have size and latency; the failed one is named as not plotted
    assert html.count('<g class="point"') == 4
    assert "Not plotted (figure missing): static." in html
    assert "model size on disk (MB)" in html and "latency p50 (ms)" in html
    assert "cosine_mean 0.9921" not in html and "cosine_mean 0.9920" in html


def test_html_without_latency_plots_size_against_the_primary_metric():
    from onnxlite.report.html import render_html

    html = render_html(sample_report(kind="compare", latency=False))
    assert "Size against accuracy" in html
    assert html.count('<g class="point"') == 4
    assert f">{REPORT_PRIMARY}</text>" in html


# -- rendered in a real browser -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    browser = chromium()
    root = tmp_path_factory.mktemp("html")
    paths = write_report(sample_report(), root / "report")
    url = paths["html"].resolve().as_uri()
    base = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={root / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = root / "shot.png"
    proc = subprocess.run([*base, "--window-size=1280,1500", "--hide-scrollbars", f"--screenshot={shot}", url],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dom.stdout, shot


def test_browser_renders_table_and_chart(rendered):
    dom, _ = rendered
    assert '<table class="models">' in dom
    assert len(re.findall(r"<tr data-status=", dom)) == 5
    svg = re.search(r"<svg[^>]*class=\"scatter\".*?</svg>", dom, re.S)
    assert svg, "no chart in the rendered page"
    assert len(re.findall(r"<circle", svg.group(0))) == 4
    assert "dynamic &lt;int8&gt; · cosine_mean 0.9920" in svg.group(0)
    assert len(re.findall(r'class="tick x"', svg.group(0))) >= 3


def test_screenshot_shows_the_status_colours(rendered):
    from PIL import Image

    from onnxlite.report.html import PALETTE

    _, shot = rendered
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 1500)
    colours = set(image.getdata())
    assert len(colours) > 50   # not a blank page
    for status in ("reference", "winner", "rejected", "failed"):
        hex_colour = PALETTE[status].lstrip("#")
        rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (0, 2, 4))
        assert rgb in colours, f"no {status} colour {PALETTE[status]} on the page"
