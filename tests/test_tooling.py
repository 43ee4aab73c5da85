"""The project's own tooling, checked from the files themselves: CI runs the README's command, the unit tier
is registered, both packages ship py.typed, the licence matches, and no function grows past ten parameters
(the CLI's click commands aside): pure, fast unit tests."""

from __future__ import annotations

import ast
import sys

import pytest

from conftest import ROOT
from helpers import load_script

if sys.version_info >= (3, 11):
    import tomllib
else:   # Python 3.10: the tomli backport pyproject.toml installs there
    import tomli as tomllib

pytestmark = pytest.mark.unit

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: the walk benchmarks/layout_counts.py prints
LAYOUT = load_script("benchmarks/layout_counts.py")
MAX_PARAMETERS = LAYOUT.MAX_PARAMETERS
#: functions owed a config record (the search is being typed on its own branch); shrink this list, never grow it
TOO_MANY_PARAMETERS_FOR_NOW: set[str] = set()


def _readme_test_command() -> str:
    block = (ROOT / "README.md").read_text().split("```bash", 2)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if "pytest" in line][0].strip()


def test_ci_runs_the_readmes_test_command_verbatim():
    command = _readme_test_command()
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.parametrize("first, status", [("false", 1), ("true", 0)])
def test_ci_stops_when_any_step_of_the_test_command_fails(first, status):
    """``set -e`` ignores a failure inside an && list unless it is the last command: .ci/run checks the list's
    status itself. Run its lines with the README command's steps replaced by a failing (or passing) first one."""
    import subprocess

    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    at = lines.index(_readme_test_command())
    check = [line for line in lines[at + 1:at + 4] if not line.startswith("#")]
    script = "\n".join(["set -euo pipefail", f"{first} && true", *check, "echo reached"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == status, done.stderr
    assert ("reached" in done.stdout) == (status == 0)


def test_the_test_command_lints_types_and_runs_the_unit_tier_before_the_suite():
    steps = [step.strip() for step in _readme_test_command().split("&&")]
    order = [next(i for i, s in enumerate(steps) if s.startswith(prefix))
             for prefix in (".venv/bin/ruff check .", ".venv/bin/mypy", ".venv/bin/python -m pytest -q -m unit")]
    assert order == sorted(order) and steps[-1] == ".venv/bin/python -m pytest -q"


def test_the_unit_marker_is_registered_with_its_meaning():
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert "unit: fast pure unit tests (no real model, no subprocess), `pytest -m unit`" in markers


def test_no_blanket_warning_filter():
    filters = PYPROJECT["tool"]["pytest"]["ini_options"].get("filterwarnings", [])
    assert all(f.count(":") >= 2 and f.split(":")[2] for f in filters if f.startswith("ignore")), filters


def test_the_linters_the_command_runs_are_in_the_test_extra():
    test_extra = " ".join(PYPROJECT["project"]["optional-dependencies"]["test"])
    for tool in ("ruff", "mypy", "scipy", "pytest"):
        assert tool in test_extra


def test_both_packages_are_typed_and_built_into_the_wheel():
    packages = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert sorted(packages) == ["core/onnxlite", "plugins/onnxlite_plugins"]
    for package in packages:
        assert (ROOT / package / "py.typed").is_file()


def test_the_license_file_is_the_one_pyproject_names():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_keeps_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog") and "keepachangelog.com" in text and "## [Unreleased]" in text


def test_no_function_takes_more_than_ten_parameters():
    over = {name: n for name, n in LAYOUT.parameter_counts().items() if n > MAX_PARAMETERS}
    assert set(over) - TOO_MANY_PARAMETERS_FOR_NOW == set(), "group them into a frozen dataclass"
    # an entry that no longer needs its exemption must leave the list
    assert TOO_MANY_PARAMETERS_FOR_NOW - set(over) == set(), "remove these from TOO_MANY_PARAMETERS_FOR_NOW"


def test_no_test_module_imports_another():
    # shared builders live in tests/helpers.py (or conftest.py); a test module is only ever run, never imported
    modules = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    found = {}
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            hits = [n for n in names if n.split(".")[0] in modules]
            if hits:
                found.setdefault(path.name, []).extend(hits)
    assert found == {}, "move what they import to tests/helpers.py"


#: private names tests still import (owed public names); shrink, never grow
PRIVATE_IMPORTS_FOR_NOW: set[str] = set()


PACKAGES = {"onnxlite", "onnxlite_plugins"}


def test_tests_import_only_public_names_of_onnxlite():
    found = set()
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            ours = isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES
            if ours:
                found.update(f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_"))
    assert found - PRIVATE_IMPORTS_FOR_NOW == set(), "give these a public name in their module"
    assert PRIVATE_IMPORTS_FOR_NOW - found == set(), "remove these from PRIVATE_IMPORTS_FOR_NOW"


def test_the_parameter_count_sees_keyword_only_and_skips_self():
    tree = ast.parse("class A:\n    def f(self, a, /, b, *, c):\n        pass\n")
    method = tree.body[0].body[0]
    names = [a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)]
    assert names == ["self", "a", "b", "c"]
