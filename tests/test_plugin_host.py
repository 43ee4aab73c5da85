"""The plugin host: discovery, validation, broken plugins, conflicts and the switches."""

from __future__ import annotations

import json

import pytest

from conftest import make_plugin_dist, run_cli

GOOD_QUANTIZER = '''
from onnxlite import hookimpl, QuantizerSpec, Option

class Noop:
    def quantize(self, model, output, options, context):
        import shutil
        shutil.copyfile(model, output)

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="{name}", description="copies the model", factory=Noop,
                          options=(Option("level", int, 1, "how much"),))]
'''


def _listing(result):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_builtin_providers_listed_and_cpu_available():
    listing = _listing(run_cli("--list-plugins", "--json"))
    providers = {p["name"]: p for p in listing["providers"]}
    assert {"cpu", "cuda", "tensorrt", "openvino", "directml", "coreml", "rocm"} <= set(providers)
    assert providers["cpu"]["available"] is True
    assert providers["cpu"]["distribution"] == "onnxlite"
    assert providers["cuda"]["available"] is False and "pip install" in providers["cuda"]["reason"]
    assert listing["broken"] == []


def test_third_party_plugin_is_listed_with_its_distribution(tmp_path):
    site = make_plugin_dist(tmp_path / "site", "acme-noop", "1.4.2", "acme_noop", GOOD_QUANTIZER.format(name="noop"))
    listing = _listing(run_cli("--list-plugins", "--json", site=site))
    row = next(s for s in listing["strategies"] if s["name"] == "noop")
    assert (row["plugin"], row["distribution"], row["version"]) == ("acme_noop", "acme-noop", "1.4.2")
    assert row["options"] == [{"name": "level", "type": "int", "default": 1, "help": "how much"}]


def test_plugin_that_raises_on_import_is_reported_and_cli_still_runs(tmp_path):
    site = make_plugin_dist(tmp_path / "site", "acme-broken", "0.1", "acme_broken",
                            "raise RuntimeError('boom at import')\n")
    result = run_cli("--list-plugins", "--json", site=site)
    listing = _listing(result)
    broken = {b["name"]: b for b in listing["broken"]}
    assert "boom at import" in broken["acme_broken"]["error"]
    assert broken["acme_broken"]["distribution"] == "acme-broken"
    assert any(p["name"] == "cpu" for p in listing["providers"])
    table = run_cli("--list-plugins", site=site)
    assert table.returncode == 0 and "Broken plugins" in table.stdout and "boom at import" in table.stdout
    assert "Traceback" not in table.stderr
    assert run_cli("--help", site=site).returncode == 0


def test_misspelt_hook_is_caught_by_check_pending(tmp_path):
    source = "from onnxlite import hookimpl\n\n@hookimpl\ndef register_quantiser():\n    return []\n"
    site = make_plugin_dist(tmp_path / "site", "acme-typo", "0.1", "acme_typo", source)
    listing = _listing(run_cli("--list-plugins", "--json", site=site))
    error = next(b["error"] for b in listing["broken"] if b["name"] == "acme_typo")
    assert "register_quantiser" in error and "unknown hook" in error


def test_hook_returning_garbage_or_raising_is_reported(tmp_path):
    site = tmp_path / "site"
    make_plugin_dist(site, "acme-garbage", "0.1", "acme_garbage",
                     "from onnxlite import hookimpl\n\n@hookimpl\ndef register_quantizers():\n    return ['not a "
                     "spec']\n")
    make_plugin_dist(site, "acme-raises", "0.1", "acme_raises",
                     "from onnxlite import hookimpl\n\n@hookimpl\ndef register_metrics():\n    raise "
                     "ValueError('nope')\n")
    listing = _listing(run_cli("--list-plugins", "--json", site=site))
    errors = {b["name"]: b["error"] for b in listing["broken"]}
    assert "expected a QuantizerSpec" in errors["acme_garbage"]
    assert "register_metrics() raised ValueError: nope" in errors["acme_raises"]


def test_duplicate_names_conflict_names_both_distributions(tmp_path, fresh_plugins):
    site = tmp_path / "site"
    make_plugin_dist(site, "acme-one", "1.0", "acme_one", GOOD_QUANTIZER.format(name="twin"))
    make_plugin_dist(site, "acme-two", "2.0", "acme_two", GOOD_QUANTIZER.format(name="twin"))
    listing = _listing(run_cli("--list-plugins", "--json", site=site))
    message = next(c["message"] for c in listing["conflicts"] if c["name"] == "twin")
    assert "acme-one 1.0" in message and "acme-two 2.0" in message
    assert all(s["name"] != "twin" for s in listing["strategies"])

    fresh_plugins.syspath_prepend(str(site))
    from onnxlite.errors import PluginConflictError
    from onnxlite.registry import get_registry

    with pytest.raises(PluginConflictError) as caught:
        get_registry().get("quantizer", "twin")
    assert "acme-one 1.0" in str(caught.value) and "acme-two 2.0" in str(caught.value)


def test_autoload_switch_and_block_list(tmp_path):
    site = make_plugin_dist(tmp_path / "site", "acme-noop", "1.0", "acme_noop", GOOD_QUANTIZER.format(name="noop"))
    off = _listing(run_cli("--list-plugins", "--json", site=site, env={"ONNXLITE_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    assert all(s["name"] != "noop" for s in off["strategies"])
    blocked = _listing(run_cli("--list-plugins", "--json", site=site,
                               env={"ONNXLITE_BLOCK_PLUGINS": "acme_noop,onnxruntime_eps"}))
    assert all(s["name"] != "noop" for s in blocked["strategies"])
    assert blocked["providers"] == []


def test_hook_tracing_logs_calls(tmp_path):
    result = run_cli("--list-plugins", "--json", env={"ONNXLITE_TRACE_HOOKS": "1"})
    assert result.returncode == 0
    assert "onnxruntime_eps.register_providers()" in result.stderr


def test_unknown_name_suggests_the_close_one(fresh_plugins):
    from onnxlite.errors import UnknownNameError
    from onnxlite.registry import get_registry

    with pytest.raises(UnknownNameError, match="did you mean 'cpu'"):
        get_registry().get("provider", "cpux")


def test_missing_optional_dependency_is_explained(tmp_path, fresh_plugins):
    source = '''
from onnxlite import hookimpl, FrameworkSpec

@hookimpl
def register_frameworks():
    return [FrameworkSpec(name="jaxish", description="needs a module that is not here", factory=object,
                          requires=("no_such_module_for_onnxlite",), install="onnxlite[jaxish]")]
'''
    site = make_plugin_dist(tmp_path / "site", "acme-jaxish", "0.1", "acme_jaxish", source)
    listing = _listing(run_cli("--list-plugins", "--json", site=site))
    row = next(f for f in listing["frameworks"] if f["name"] == "jaxish")
    assert row["available"] is False
    assert row["reason"] == "no_such_module_for_onnxlite is not installed: pip install 'onnxlite[jaxish]'"

    fresh_plugins.syspath_prepend(str(site))
    from onnxlite.errors import MissingDependencyError
    from onnxlite.registry import get_registry

    with pytest.raises(MissingDependencyError, match="pip install 'onnxlite\\[jaxish\\]'"):
        get_registry().create("framework", "jaxish")


def test_cli_basics_and_usage_errors():
    import onnxlite

    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"onnxlite {onnxlite.__version__}"
    helped = run_cli("--help")
    assert helped.returncode == 0
    for command in ("export", "quantize", "compare", "bench", "lighten"):
        assert command in helped.stdout
    bad = run_cli("--no-such-flag")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert run_cli("no-such-command").returncode == 2


def test_help_and_listing_do_not_import_heavy_frameworks():
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from onnxlite.cli import main\n"
        "for args in (['--help'], ['--list-plugins'], ['--list-plugins', '--json']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        "heavy = sorted(m for m in ('torch', 'tensorflow', 'transformers', 'onnx', 'onnxruntime') if m in "
        "sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "HEAVY=\n" in result.stdout, result.stdout[-300:]
