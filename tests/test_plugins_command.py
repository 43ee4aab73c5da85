"""``onnxlite plugins``: the llm-style listing, its --json, and the help around it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import make_plugin_dist, run_cli

THIRD_PARTY = '''
from onnxlite import hookimpl, MetricSpec, Option, QuantizerSpec

class Copy:
    def quantize(self, model, output, options, context):
        import shutil
        shutil.copyfile(model, output)

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="{name}", description="copies the model", factory=Copy, needs_calibration=True,
                          applies_to=("conv",), avoid=("transformer",), install="acme-copy[full]",
                          requires=("no_such_module_for_onnxlite",),
                          options=(Option("level", int, 3, "how much"),
                                   Option("ops", str, ("Conv", "MatMul"), "which ops", multiple=True)),
                          grid=({{}}, {{"level": 5, "ops": ("Conv",)}}))]
'''


def _json(*args: str, site=None) -> dict:
    result = run_cli("plugins", "--json", *args, site=site)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One good third-party strategy, one plugin that fails to import, and two that claim one name."""
    site = tmp_path_factory.mktemp("site")
    make_plugin_dist(site, "acme-copy", "1.2", "acme_copy", THIRD_PARTY.format(name="copy"))
    make_plugin_dist(site, "acme-broken", "0.3", "acme_broken", "import no_such_module_at_all\n")
    make_plugin_dist(site, "acme-one", "1.0", "acme_one", THIRD_PARTY.format(name="twin"))
    make_plugin_dist(site, "acme-two", "2.0", "acme_two", THIRD_PARTY.format(name="twin"))
    return site


def test_json_has_every_field_of_a_third_party_strategy(site):
    listing = _json(site=site)
    row = next(s for s in listing["strategies"] if s["name"] == "copy")
    assert (row["distribution"], row["version"], row["builtin"]) == ("acme-copy", "1.2", False)
    assert row["needs_calibration"] is True
    assert (row["applies_to"], row["avoid"]) == (["conv"], ["transformer"])
    assert row["install"] == "acme-copy[full]"
    assert row["available"] is False and "pip install 'acme-copy[full]'" in row["reason"]
    assert row["grid"] == [{}, {"level": 5, "ops": ["Conv"]}]
    assert row["grid_cli"] == ["defaults", "level=5 ops=Conv"]
    assert row["options"] == [{"name": "level", "type": "int", "default": 3, "help": "how much"},
                              {"name": "ops", "type": "str[,...]", "default": ["Conv", "MatMul"], "help": "which ops"}]
    plugin = next(p for p in listing["plugins"] if p["name"] == "acme_copy")
    assert plugin == {"name": "acme_copy", "distribution": "acme-copy", "version": "1.2", "builtin": False,
                      "hooks": ["register_quantizers"], "provides": {"strategies": ["copy"]}}


def test_broken_plugins_and_conflicts_name_their_distributions(site):
    listing = _json(site=site)
    broken = next(b for b in listing["broken"] if b["name"] == "acme_broken")
    assert (broken["distribution"], broken["version"]) == ("acme-broken", "0.3")
    assert "no_such_module_at_all" in broken["error"]
    clash = next(c for c in listing["conflicts"] if c["name"] == "twin")
    assert {d.split()[0] for d in clash["distributions"]} == {"acme-one", "acme-two"}
    assert all(s["name"] != "twin" for s in listing["strategies"])
    # The table says the same, and a broken plugin never stops the listing.
    text = run_cli("plugins", site=site)
    assert text.returncode == 0, text.stderr
    assert "Broken plugins" in text.stdout and "acme-broken 0.3" in text.stdout
    assert "acme-one 1.0" in text.stdout and "acme-two 2.0" in text.stdout
    assert "acme-copy 1.2" in text.stdout and "pip install 'acme-copy[full]'" in text.stdout


def test_builtin_strategies_match_what_their_help_shows():
    """Every fact `quantize --strategy NAME --help` prints is in `plugins --json`, spelt the same way."""
    listing = _json()
    assert {s["name"] for s in listing["strategies"]} >= {"dynamic", "static", "smoothquant", "int4", "fp16"}
    for row in listing["strategies"]:
        help_text = run_cli("quantize", "--strategy", row["name"], "--help").stdout
        flat = " ".join(help_text.split())
        assert f"applies to: {', '.join(row['applies_to'])}" in flat
        assert f"needs calibration: {'yes' if row['needs_calibration'] else 'no'}" in flat
        for option in row["options"]:
            default = option["default"]
            shown = ("none" if default in (None, [], ()) else ", ".join(map(str, default))
                     if isinstance(default, list) else str(default).lower() if isinstance(default, bool) else default)
            assert f"{option['name']}={option['type']}" in flat
            assert re.search(rf"{re.escape(option['name'])}={re.escape(option['type'])} .*?\[default: "
                             rf"{re.escape(str(shown))}\]", flat), (row["name"], option["name"])
        if any(row["grid"]):
            assert "; ".join(row["grid_cli"]) in flat
    static = next(s for s in listing["strategies"] if s["name"] == "static")
    assert "transformer" in static["avoid"] and static["needs_calibration"] is True


def test_option_sets_use_the_command_line_spelling_in_help():
    help_text = " ".join(run_cli("quantize", "--strategy", "dynamic", "--help").stdout.split())
    assert "op_types=MatMul,Gemm,Gather" in help_text and "[default: MatMul, Gemm]" in help_text
    assert "('MatMul'" not in help_text and "MatMul+Gemm" not in help_text


def test_list_plugins_prints_the_same_json(site):
    assert _json(site=site) == json.loads(run_cli("--list-plugins", "--json", site=site).stdout)


def test_kind_filter():
    listing = _json("--kind", "providers")
    assert "providers" in listing and not {"frameworks", "strategies", "metrics"} & set(listing)
    text = run_cli("plugins", "--kind", "metrics").stdout
    assert "Metrics" in text and "Strategies" not in text
    bad = run_cli("plugins", "--kind", "nope")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_help_says_where_to_look_and_top_level_lists_each_command_once():
    sub = run_cli("plugins", "--help")
    assert sub.returncode == 0
    for pointer in ("quantize --strategy NAME --help", "docs/plugins.md", "ONNXLITE_TRACE_HOOKS"):
        assert pointer in sub.stdout
    top = run_cli("--help").stdout
    for command in ("export", "quantize", "compare", "bench", "lighten", "plugins"):
        assert len(re.findall(rf"^  {command} ", top, flags=re.M)) == 1, (command, top)


def test_plugins_does_not_import_heavy_frameworks():
    probe = (
        "import sys\n"
        "from onnxlite.cli import main\n"
        "for args in (['plugins'], ['plugins', '--json'], ['plugins', '--help']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        "heavy = sorted(m for m in ('torch', 'tensorflow', 'transformers', 'onnx', 'onnxruntime') if m in "
        "sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "HEAVY="


BRACKETS = '''
from onnxlite import hookimpl, MetricSpec

class Frames:
    def applies(self, reference, context):
        return reference.ndim == 3

    def compute(self, reference, candidate, context):
        return 1.0

@hookimpl
def register_metrics():
    return [MetricSpec(name="framewise", description="agreement over [batch, frames, classes] outputs",
                       factory=Frames, default=False)]
'''


def test_list_plugins_and_plugins_share_one_renderer_that_keeps_brackets(tmp_path):
    """Issue 25 §3: a description's ``[batch, frames, classes]`` is not eaten as rich markup by either listing."""
    site = make_plugin_dist(tmp_path / "site", "acme-frames", "0.1", "acme_frames", BRACKETS)
    short = run_cli("--list-plugins", site=site, env={"COLUMNS": "200"})
    long = run_cli("plugins", site=site, env={"COLUMNS": "200"})
    assert short.returncode == 0 and long.returncode == 0, short.stderr + long.stderr
    assert "[batch, frames, classes]" in short.stdout and "[batch, frames, classes]" in long.stdout
    assert short.stdout == long.stdout
