"""Operator vocabularies live in one table (onnxlite.ops): nothing else in the host or the built-ins spells a set of
quantized operators, and the host's modules read the table's sets."""

from __future__ import annotations

import ast

import pytest

from onnxlite import ops

from conftest import ROOT

pytestmark = pytest.mark.unit

SOURCES = [p for p in sorted((ROOT / "core" / "onnxlite").rglob("*.py")) + sorted(
    (ROOT / "plugins" / "onnxlite_plugins").rglob("*.py")) if p != ROOT / "core" / "onnxlite" / "ops.py"]


def _literal_sets(path):
    """String members of every set, tuple or list literal in ``path`` (docstrings and dict keys left out)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if names:
                yield node.lineno, names


def test_no_module_keeps_its_own_set_of_quantized_operators():
    found = {f"{p.relative_to(ROOT)}:{line}": sorted(names & ops.QUANTIZED_OPS)
             for p in SOURCES for line, names in _literal_sets(p) if names & ops.QUANTIZED_OPS}
    assert found == {}, "use onnxlite.ops"


def test_the_host_reads_the_table():
    from onnxlite import claims, graph_family, modelio
    from onnxlite.search import partial

    assert modelio.QUANTIZED_OPS is ops.QUANTIZED_OPS
    assert claims.WEIGHTED_OPS is partial.WEIGHTED_OPS is ops.WEIGHTED_OPS
    assert graph_family.CONV_OPS is ops.CONV_OPS and graph_family.MATMUL_OPS is ops.MATMUL_OPS


def test_the_sets_partition_as_documented():
    assert ops.REPLACEMENT_OPS == ops.INTEGER_OPS | ops.BLOCK_OPS
    assert ops.QUANTIZED_OPS == ops.REPLACEMENT_OPS | ops.QDQ_OPS
    assert not ops.INTEGER_OPS & ops.BLOCK_OPS and not ops.REPLACEMENT_OPS & ops.QDQ_OPS
    # a float weighted operator is never a quantized form, and every quantized conv/matmul is one
    assert not ops.WEIGHTED_OPS & ops.QUANTIZED_OPS
    assert (ops.CONV_OPS | ops.MATMUL_OPS) - ops.WEIGHTED_OPS <= ops.REPLACEMENT_OPS


@pytest.mark.parametrize(("op", "expected"), [("QLinearConv", True), ("MatMulInteger", True),
                                               ("DynamicQuantizeLinear", True), ("QLinearWhatever", True),
                                               ("MatMulNBits", False), ("QuantizeLinear", False), ("MatMul", False)])
def test_is_qoperator(op, expected):
    assert ops.is_qoperator(op) is expected
