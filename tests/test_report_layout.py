"""The lighten report page as a user sees it (issue 14), checked in headless Chromium at 1280 px: verdict
first, a candidate table with every budgeted metric and its interval that needs no sideways scrolling,
the drop-vs-size and drop-vs-latency charts with the budget line and labels that do not overlap, the
environment, and what each candidate did."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from helpers import CHROMIUM_FLAGS, RESULT_KEYS, chromium, sample_lighten_result


def test_the_page_opens_with_the_verdict_and_holds_every_part():
    from onnxlite.report.html import render_html

    html = render_html(sample_lighten_result().to_report())
    assert "<script" not in html and not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    order = [html.index(s) for s in ("Verdict", "Trade-off", "Candidates", "Environment", "Details per candidate",
                                     "Export verification: every check")]
    assert order == sorted(order)
    verdict = html[html.index("Verdict"):html.index("Trade-off")]
    assert "3.92x smaller" in verdict and "2.06x faster" in verdict and "fastest within budget" in verdict
    assert "Judged by" in verdict and "is token embeddings" in verdict     # which metric decided, and why
    # both budgeted metrics, with intervals and bounds, in the table
    table = html[html.index("Candidates"):html.index("Environment")]
    assert table.count("drop<br/>") == 2 and "[0.0012, 0.0028]" in table and "≤ 0.0027" in table
    assert "fp32.onnx: NameError" in table and "/tmp/onnxlite-x" not in table
    # the trade-off charts: every candidate with a drop on the size chart, the benchmarked ones on latency
    size_svg = re.search(r'<svg[^>]*class="tradeoff size".*?</svg>', html, re.S).group(0)
    latency_svg = re.search(r'<svg[^>]*class="tradeoff latency".*?</svg>', html, re.S).group(0)
    assert size_svg.count('<g class="point"') == 8 and latency_svg.count('<g class="point"') == 4
    assert 'class="budget"' in size_svg and "budget 0.005" in latency_svg
    env = html[html.index("Environment"):html.index("Details per candidate")]
    for needle in ("onnxruntime", "instruction sets", "AVX2", "VNNI", "threads", "command"):
        assert needle in env, needle
    assert "quantized op types: MatMul x36, Gather x1" in html and "nodes left in float: 16" in html
    assert html.count("<td>pass</td>") == 4


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The page at 1280 px in headless Chromium: a copy with a measuring script writes what overflows and which
    chart labels overlap into the DOM (the report itself has no scripts); plus a screenshot."""
    from onnxlite.report.files import write_report

    browser = chromium()
    root = tmp_path_factory.mktemp("layout")
    paths = write_report(sample_lighten_result().to_report(), root / "report")
    probe = root / "probe.html"
    script = """<script>
    window.addEventListener('load', () => {
      const width = document.documentElement.clientWidth;
      const over = [];
      for (const el of document.querySelectorAll('body *')) {
        const r = el.getBoundingClientRect();
        if (r.width && r.right > width + 0.5) over.push(el.tagName + '.' + (el.className.baseVal ?? el.className));
      }
      const overlaps = [];
      for (const svg of document.querySelectorAll('svg.tradeoff')) {
        const boxes = [...svg.querySelectorAll('text.label')].map(t => [t.textContent, t.getBoundingClientRect()]);
        for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
          const a = boxes[i][1], b = boxes[j][1];
          if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
            overlaps.push(boxes[i][0] + ' / ' + boxes[j][0]);
        }
      }
      const out = document.createElement('pre');
      out.id = 'layout-result';
      out.textContent = JSON.stringify({width, scrollWidth: document.documentElement.scrollWidth, over, overlaps,
        labels: document.querySelectorAll('svg.tradeoff text.label').length});
      document.body.appendChild(out);
    });
    </script>"""
    probe.write_text(paths["html"].read_text().replace("</body>", script + "</body>"))
    base = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={root / 'profile'}", "--window-size=1280,2400"]
    dom = subprocess.run([*base, "--virtual-time-budget=3000", "--dump-dom", probe.resolve().as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="layout-result">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    shot = root / "shot.png"
    proc = subprocess.run([*base, "--hide-scrollbars", f"--screenshot={shot}", paths["html"].resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import html as htmllib

    return json.loads(htmllib.unescape(found.group(1))), shot


def test_nothing_overflows_the_viewport_at_1280_px(measured):
    layout, _ = measured
    assert layout["width"] >= 1250
    assert layout["scrollWidth"] <= layout["width"], layout
    assert layout["over"] == [], layout["over"][:20]


def test_chart_labels_do_not_overlap(measured):
    layout, _ = measured
    assert layout["labels"] >= 8        # most points keep a visible label
    assert layout["overlaps"] == [], layout["overlaps"]


def test_the_screenshot_shows_verdict_and_chart_colours(measured):
    from PIL import Image

    from onnxlite.report.html import PALETTE

    _, shot = measured
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2400)
    colours = set(image.getdata())
    for status in ("winner", "rejected", "reference", "failed"):
        rgb = tuple(int(PALETTE[status][i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, status


def test_the_chart_draws_a_budgeted_metric_and_small_models_in_kb():
    from onnxlite.report.html import PALETTE
    from onnxlite.report.lighten_page import tradeoff_svg

    report = sample_lighten_result().to_report()
    report.budgets = {RESULT_KEYS[1]: 0.01}            # the primary metric has no budget: draw the one that has
    for row in report.rows:
        row.size_bytes = row.size_bytes // 1000 if row.size_bytes else None
    svg = tradeoff_svg(report, "size", PALETTE)
    assert f'aria-label="{RESULT_KEYS[1]} drop against size on disk (KB)"' in svg and "budget 0.01" in svg
