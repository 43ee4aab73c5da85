"""The layout of ``core/onnxlite`` (docs/architecture.md): a map that lists every module, no import
cycles, no click below the CLI, modules of a readable size, and each file read a bounded number of times."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import MLP_SOURCE, ROOT, other_cpu, save_graph
from helpers import load_script

CORE = ROOT / "core" / "onnxlite"
PLUGINS = ROOT / "plugins" / "onnxlite_plugins"
PACKAGES = ("data", "conversion", "quantization", "evaluation", "benchmark", "search", "report")
#: the walk benchmarks/layout_counts.py prints for docs/architecture.md (one walk for the page and the tests)
layout = load_script("benchmarks/layout_counts.py")
MAX_LINES = layout.MAX_LINES   # "about 400"
#: cycles known and owed a fix (each should be one definition moved; remove the entry with the fix)
KNOWN_CYCLES: list[list[str]] = []


def _module_name(path: Path) -> str:
    return layout.module_name(path)


def _modules() -> dict[str, Path]:
    return layout.modules()


def _map_entries() -> tuple[set[str], set[str]]:
    """Module paths on the map in docs/architecture.md: (under core/onnxlite, under plugins/onnxlite_plugins)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```", 2)[1]
    core: set[str] = set()
    plugins: set[str] = set()
    entries = core
    for line in block.splitlines():
        tokens = line.split()
        if not tokens or tokens[0] == "core/onnxlite/":
            continue
        if tokens[0].startswith("plugins/"):
            entries = plugins
            continue
        package = tokens[0] if tokens[0].endswith("/") else ""
        entries.update(package + token.rstrip(",") for token in tokens if token.rstrip(",").endswith(".py"))
    return core, plugins


@pytest.mark.unit
def test_every_module_is_on_the_architecture_map():
    core, plugins = _map_entries()
    modules = {str(p.relative_to(CORE)) for p in CORE.rglob("*.py") if p.name != "__init__.py" or p.parent == CORE}
    assert modules - core == set(), "add these to the map in docs/architecture.md"
    plugin_modules = {str(p.relative_to(PLUGINS)) for p in PLUGINS.rglob("*.py") if p.name != "__init__.py"}
    assert plugin_modules - plugins == set(), "add these to the plugins/ part of the map in docs/architecture.md"
    assert (core - modules) | (plugins - plugin_modules) == set(), "the map names modules that do not exist"


@pytest.mark.unit
def test_no_import_cycles_and_the_core_never_imports_the_cli():
    graph = layout.import_graph()
    assert [c for c in layout.cycles(graph) if c not in KNOWN_CYCLES] == []
    below_cli = {name: sorted(d for d in deps if d.startswith("onnxlite.cli"))
                 for name, deps in graph.items() if not name.startswith("onnxlite.cli") and name != "onnxlite.__main__"}
    assert {name: deps for name, deps in below_cli.items() if deps} == {}


@pytest.mark.unit
def test_no_import_cycles_even_counting_type_checking_imports():
    # a cycle through an `if TYPE_CHECKING:` import is still two modules that need each other to be read
    assert layout.cycles(layout.import_graph(type_only=True)) == []


@pytest.mark.unit
def test_no_package_imports_a_package_that_imports_it_back():
    """At any depth, TYPE_CHECKING imports counted, each flat module its own package: the job format sits below
    both search/ and executors/, and search/'s stages live in search/."""
    assert layout.cycles(layout.package_graph(layout.import_graph(type_only=True))) == []
    assert layout.package_graph({"onnxlite.search.a": {"onnxlite.jobs.b"}, "onnxlite.jobs.b": {"onnxlite.errors"},
                                 "onnxlite.errors": set()}) == \
        {"onnxlite.search": {"onnxlite.jobs"}, "onnxlite.jobs": {"onnxlite.errors"}, "onnxlite.errors": set()}


@pytest.mark.unit
def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert layout.cycles(graph) == [["a", "b", "c"]]


@pytest.mark.unit
def test_modules_stay_readable():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in [*CORE.rglob("*.py"), *PLUGINS.rglob("*.py")]}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


@pytest.mark.unit
def test_functions_take_at_most_ten_parameters():
    """Click commands excepted: each option is a parameter there."""
    import ast

    wide = []
    for path in [*CORE.rglob("*.py"), *PLUGINS.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
            count = len(names) - (names[:1] in (["self"], ["cls"]))
            if count > 10 and not any("click" in ast.unparse(d) for d in node.decorator_list):
                wide.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({count})")
    assert wide == []


@pytest.mark.parametrize("package", PACKAGES)
def test_command_packages_load_no_click(package):
    # Every module of the package, not just its (small) __init__: the API must not drag the CLI in.
    names = sorted(n for n in _modules() if n == f"onnxlite.{package}" or n.startswith(f"onnxlite.{package}."))
    code = (f"import importlib, sys\nfor n in {names!r}:\n    importlib.import_module(n)\n"
            "assert 'click' not in sys.modules, [m for m in sys.modules if m.startswith('onnxlite.cli')]")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_model_size_finds_external_data_without_parsing(tmp_path, monkeypatch):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnxlite import modelio

    weight = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weight])
    model = helper.make_model(graph)
    inline, external = tmp_path / "inline.onnx", tmp_path / "external.onnx"
    onnx.save_model(model, str(inline))
    onnx.save_model(model, str(external), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="external.weights", size_threshold=0)

    def no_parsing(*_args, **_kwargs):
        raise AssertionError("model_size parsed the model")

    monkeypatch.setattr(onnx, "load_model", no_parsing)
    monkeypatch.setattr(onnx, "load", no_parsing)
    assert modelio.external_data_files(inline) == []
    assert modelio.model_size(inline) == inline.stat().st_size
    assert modelio.external_data_files(external) == [tmp_path / "external.weights"]
    assert modelio.model_size(external) == external.stat().st_size + (tmp_path / "external.weights").stat().st_size
    # The weights really are outside: the .onnx file alone is far smaller than the inline one.
    assert external.stat().st_size < inline.stat().st_size - 4096 * 4 // 2


COUNTED_SOURCE = MLP_SOURCE + '''
import os
with open(os.environ["ONNXLITE_TEST_LOADS"], "a") as _log:
    _log.write("loaded\\n")   # one line per time this file runs
'''


@pytest.fixture(scope="module")
def counted_lighten(tmp_path_factory):
    """One ``lighten`` of a file.py source, counting the source's runs and every ONNX parse in this process.

    For the other kind of CPU (conftest.other_cpu), judged on a continuous metric far inside its budget: only
    saturation-free int8 is tried and one passes, so no fallback runs (and parses its bases) on either kind
    of CPU.  (On top-1 agreement, one flipped sample of 64 failed the grid's pick and started a fallback.)"""
    import onnx

    import onnxlite

    folder = tmp_path_factory.mktemp("layout-lighten")
    source = folder / "mlp.py"
    source.write_text(COUNTED_SOURCE)
    loads = folder / "loads.txt"
    parses: collections.Counter[str] = collections.Counter()
    real = onnx.load_model

    def counting(f, *args, **kwargs):
        parses[os.path.basename(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else "<stream>"] += 1
        return real(f, *args, **kwargs)

    old_env = os.environ.get("ONNXLITE_TEST_LOADS")
    os.environ["ONNXLITE_TEST_LOADS"] = str(loads)
    onnx.load_model = onnx.load = counting
    try:
        result = onnxlite.lighten(f"{source}:model", folder / "out", inputs=["x:float32[batch,64]"],
                                  strategies=["dynamic"], runs=3, max_drop="5%",
                                  metric="cosine_mean", target_cpu=other_cpu())
    finally:
        onnx.load_model = onnx.load = real
        if old_env is None:
            os.environ.pop("ONNXLITE_TEST_LOADS", None)
        else:
            os.environ["ONNXLITE_TEST_LOADS"] = old_env
    return result, loads.read_text().splitlines(), parses


def test_lighten_runs_a_file_py_source_once(counted_lighten):
    result, loads, _ = counted_lighten
    assert result.winner is not None
    assert loads == ["loaded"]


def test_lighten_parses_each_model_file_a_bounded_number_of_times(counted_lighten):
    # In this process (candidates are quantized and judged in their own): the exported float model is
    # read to name the judge's outputs, to build the candidate grid and to set up the benchmark.
    _, _, parses = counted_lighten
    assert parses["fp32.onnx"] >= 1
    assert {name: n for name, n in parses.items() if n > 2} == {}


def test_compare_parses_the_candidate_at_most_twice(tmp_path, monkeypatch):
    # Reference and candidate are one file here: validation, the reference session's inputs,
    # output names and placement all look at it (modelio.read_header shares one parse).
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import onnxlite

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [weight])
    path = tmp_path / "mm.onnx"
    save_graph(graph, path, ir_version=onnx.IR_VERSION)
    parses: collections.Counter[str] = collections.Counter()
    real = onnx.load_model

    def counting(f, *args, **kwargs):
        parses[os.path.basename(os.fspath(f))] += 1
        return real(f, *args, **kwargs)

    monkeypatch.setattr(onnx, "load_model", counting)
    monkeypatch.setattr(onnx, "load", counting)
    result = onnxlite.compare(str(path), [str(path)])
    assert result.candidates[0].passed is not False
    assert 1 <= parses["mm.onnx"] <= 2


def test_the_lighten_report_shows_the_real_verification(counted_lighten):
    result, _, _ = counted_lighten
    sections = dict(result.to_report().sections)
    line = sections["Export verification"]
    rows = result.export["verification"]["rows"]
    assert line.startswith(f"{len(rows)} checks (1 output(s) x 2 feed sets")
    worst = max(row["max_abs_diff"] for row in rows)
    assert f"worst max |diff| {worst:.3g}" in line and "against pytorch, all within tolerance" in line
