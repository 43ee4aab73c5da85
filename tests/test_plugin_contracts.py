"""Issue 25 §3: what a plugin author needs is public and documented.  The helper table in docs/plugins.md
names every host module and name the built-in plugins and the tutorial import; ``QuantizerSpec.exclude_option``
(not an option's name) decides who takes part in the partial fallback; the host checks a third-party
strategy's exclude patterns; the calibration reader is public."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from conftest import ROOT

PAGE = ROOT / "docs" / "plugins.md"
IMPORTERS = [ROOT / "plugins", ROOT / "examples" / "onnxlite-guard-quantizer" / "src"]


def host_imports() -> dict[str, set[str]]:
    """``{module: {names}}`` of every ``from onnxlite... import`` in plugins/ and the tutorial package."""
    found: dict[str, set[str]] = {}
    for folder in IMPORTERS:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                        and (node.module == "onnxlite" or node.module.startswith("onnxlite.")):
                    found.setdefault(node.module, set()).update(a.name for a in node.names)
    return found


def helper_table() -> dict[str, str]:
    """docs/plugins.md's helper table: ``{module: the row's text}``."""
    section = PAGE.read_text().split("## The helper surface", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(onnxlite[\w.]*)` \| (.*) \|$", section, re.M)
    return dict(rows)


def test_every_host_name_a_plugin_imports_is_in_the_helper_table():
    table = helper_table()
    imports = host_imports()
    assert imports, "no host imports found: the scan is broken"
    missing = sorted(f"{module}.{name}" for module, names in imports.items() for name in names
                     if module not in table or f"`{name}" not in table[module])
    assert not missing, f"docs/plugins.md's helper table lacks: {', '.join(missing)}"
    # and the table documents no module a plugin cannot import
    import importlib

    for module in table:
        importlib.import_module(module)


@pytest.mark.unit
def test_exclude_option_must_name_a_multiple_option():
    from onnxlite import Option, QuantizerSpec

    with pytest.raises(ValueError, match="exclude_option='skip'"):
        QuantizerSpec(name="x", description="", factory=object, exclude_option="skip")
    with pytest.raises(ValueError, match="multiple=True"):
        QuantizerSpec(name="x", description="", factory=object, exclude_option="skip",
                      options=(Option("skip", str, "", "one name"),))
    spec = QuantizerSpec(name="x", description="", factory=object, exclude_option="skip",
                         options=(Option("skip", str, (), "names", multiple=True),))
    assert spec.exclude_option == "skip"


@pytest.mark.unit
def test_the_fallback_follows_exclude_option_not_an_option_name():
    from onnxlite import Option, QuantizerSpec
    from onnxlite.registry import get_registry
    from onnxlite.search.candidates import exclude_option

    named_only = QuantizerSpec(name="a", description="", factory=object,
                               options=(Option("exclude_nodes", str, (), "names", multiple=True),))
    declared = QuantizerSpec(name="b", description="", factory=object, exclude_option="keep",
                             options=(Option("keep", str, (), "names", multiple=True),))
    assert exclude_option(named_only) is None and exclude_option(declared) == "keep"
    builtins = {e.spec.name: e.spec.exclude_option for e in get_registry().all("quantizer") if e.plugin.builtin}
    assert builtins["dynamic"] == "exclude" and builtins["static"] == "exclude" and builtins["mixed"] is None


@pytest.mark.unit
def test_match_nodes_refuses_a_pattern_that_matches_nothing():
    from onnxlite import UsageError
    from onnxlite.authoring import match_nodes

    names = ["/fc1/Gemm", "/fc2/MatMul", "/head/Gemm"]
    assert match_nodes(names, ["/head/*", "/fc1/Gemm"]) == ["/fc1/Gemm", "/head/Gemm"]
    with pytest.raises(UsageError, match=r"--option skip=\*pooler\*: matches no node name"):
        match_nodes(names, ["*pooler*"], option="skip")


@pytest.mark.unit
def test_the_public_calibration_reader_pads_its_count_and_stops_at_the_data():
    from onnxlite.calibration import CalibrationReader

    feeds = [{"x": np.full((1, 4), i, np.float32)} for i in range(5)]
    reader = CalibrationReader(feeds)
    assert len(reader) == 5
    reader.set_count(6)                       # quantize_static's strides must divide the count
    assert len(reader) == 6
    reader.set_range(4, 6)
    got = [reader.get_next(), reader.get_next()]
    assert got[0]["x"][0, 0] == 4 and got[1] is None   # the padded stride ends where the data ends


def test_a_third_party_exclude_pattern_that_matches_nothing_is_refused(tmp_path, fresh_plugins):
    from onnxlite import UsageError
    from onnxlite.quantization.run import run_quantize

    from conftest import make_plugin_dist
    from helpers import write_gemm_head

    source = '''
from onnxlite import hookimpl, Option, QuantizerSpec

class Copy:
    def quantize(self, model, output, options, context):
        import shutil
        shutil.copyfile(model, output)

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="copier", description="copies", factory=Copy, exclude_option="keep",
                          options=(Option("keep", str, (), "names", multiple=True),))]
'''
    site = make_plugin_dist(tmp_path / "site", "acme-copier", "0.1", "acme_copier", source)
    fresh_plugins.syspath_prepend(str(site))
    model = write_gemm_head(tmp_path / "mlp.onnx")
    with pytest.raises(UsageError, match=r"--option keep=fc9: matches no node name"):
        run_quantize(model, tmp_path / "out.onnx", "copier", ["keep=fc9"], check=False)
    assert not (tmp_path / "out.onnx").exists()
