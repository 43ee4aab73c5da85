"""The docs cover the surface (datasette's rule): every ``LightenConfig`` field in docs/lighten.md's settings
table, every CLI flag of every command somewhere in docs/, and a README a newcomer reads at a glance."""

from __future__ import annotations

import dataclasses
import re

import click
import pytest

from conftest import ROOT

pytestmark = pytest.mark.unit

DOCS = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
#: the README's words before its commands table, at most
README_WORDS = 600


def _commands() -> list[tuple[str, click.Command]]:
    from onnxlite.cli import cli

    def walk(command: click.Command, path: str):
        yield path, command
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                yield from walk(sub, f"{path} {name}")

    return list(walk(cli, "onnxlite"))


def _settings_table() -> dict[str, str]:
    """``field -> flag`` cell of the table under docs/lighten.md's "## Settings"."""
    section = (ROOT / "docs" / "lighten.md").read_text().split("## Settings", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", section, flags=re.M)}


def test_every_lighten_config_field_is_in_the_settings_table():
    from onnxlite.search.config import LightenConfig

    fields = [f.name for f in dataclasses.fields(LightenConfig)]
    table = _settings_table()
    assert [f for f in fields if f not in table] == [], "add these to docs/lighten.md's Settings table"
    assert [f for f in table if f not in fields] == [], "docs/lighten.md's Settings table names fields that are gone"


def test_the_settings_table_names_the_flags_lighten_has():
    from onnxlite.cli import cli

    flags = {o for p in cli.commands["lighten"].params for o in (*p.opts, *p.secondary_opts)}
    named = {flag for cell in _settings_table().values() for flag in re.findall(r"--[\w-]+", cell)}
    assert named - flags == set(), "the Settings table names flags lighten does not take"


@pytest.mark.parametrize("path, command", _commands(), ids=[path for path, _ in _commands()])
def test_every_flag_is_documented(path, command):
    flags = [o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)
             if o.startswith("--") and o != "--help"]
    missing = [flag for flag in flags if not re.search(re.escape(flag) + r"(?![\w-])", DOCS)]
    assert missing == [], f"{path}: document these flags in docs/"


def test_the_readme_is_short_before_its_commands_table():
    text = (ROOT / "README.md").read_text()
    assert "## The commands" in text
    words = len(re.findall(r"\w+", text[:text.index("## The commands")]))
    assert words <= README_WORDS, f"README.md has {words} words before '## The commands': move detail to docs/"


def test_the_readme_has_one_results_table_per_isa_and_links_the_benchmarks():
    head = (ROOT / "README.md").read_text().split("## The commands", 1)[0]
    results = head.split("## Results", 1)[1]
    for isa in ("AVX-512 VNNI", "AVX2"):
        assert isa in results
    tables = re.findall(r"^\| CPU \|", results, flags=re.M)
    assert len(tables) == 2 and "docs/benchmarks.md" in results


def test_no_history_in_code_or_docs():
    """Comments and docs say why, not when: no session, issue or commit history (CHANGELOG.md keeps it)."""
    pattern = re.compile(r"session[ -]?[0-9]+|\bsessions? [0-9]|commit [0-9a-f]{7}|issue [0-9]+", re.I)
    files = [*(ROOT / "core").rglob("*.py"), *(ROOT / "plugins").rglob("*.py"), *(ROOT / "docs").glob("*.md"),
             ROOT / "README.md"]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert found == []
