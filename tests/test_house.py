"""The test house's own rules (docs/testing.md), checked rather than described: a test
keeps to about 60 lines of its own, and no test module imports another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
LONGEST_TEST = 60


def _modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for path in sorted(TESTS.rglob("test_*.py"))}


def test_no_test_is_longer_than_60_lines() -> None:
    long = [
        f"{path.relative_to(TESTS)}::{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, module in _modules().items()
        for node in ast.walk(module)
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > LONGEST_TEST
    ]
    assert not long, "move their data and helpers to tests/support or fixtures: " + ", ".join(long)


def test_no_test_module_imports_another() -> None:
    imported = [
        f"{path.relative_to(TESTS)} imports {node.module}"
        for path, module in _modules().items()
        for node in ast.walk(module)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and node.module.startswith("tests.")
        and not node.module.startswith("tests.support")
    ]
    assert not imported, "shared helpers belong in tests/support: " + ", ".join(imported)
