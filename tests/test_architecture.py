"""The framework's layers, checked: the import contract in pyproject.toml holds (no upward
import, no circle, the layers imported only by `lakehouse.definitions`), and
docs/architecture.md's tree names every package and top-level module in the contract's
order of layers, with each of its modules."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
LAYERS_TOGETHER = "bronze/ silver/ gold/"


def _tree() -> list[tuple[str, str]]:
    """(entry, its description) for each entry of the tree's block, highest layer first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```\nlakehouse/", 1)[1].split("```", 1)[0].splitlines()[1:]
    entries: list[tuple[str, str]] = []
    for line in block:
        if line.startswith(LAYERS_TOGETHER):
            entries += [(layer, "") for layer in ("gold", "silver", "bronze")]
        elif entry := re.match(r"  (\w+)(?:/|\.py)\s+(.*)", line):
            entries.append((f"lakehouse.{entry[1]}", entry[2]))
        elif entries:  # a description's next line
            entries[-1] = (entries[-1][0], f"{entries[-1][1]} {line.strip()}")
    return entries


def test_the_tree_holds_every_package_of_the_framework_in_the_contracts_order() -> None:
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contract["contracts"] if c["type"] == "layers")["layers"]
    in_order = [name.strip() for layer in layers for name in layer.split("|")]
    assert [entry for entry, _ in _tree()] == in_order
    on_disk = {
        f"lakehouse.{path.stem}"
        for path in (ROOT / "lakehouse").iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.stem != "__init__")
    }
    assert on_disk == {entry for entry in in_order if entry.startswith("lakehouse.")}


def test_the_tree_names_every_module_of_each_package() -> None:
    for entry, description in _tree():
        package = ROOT / entry.replace(".", "/")
        modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("__")}
        if entry == "lakehouse.cli" or not entry.startswith("lakehouse.") or not package.is_dir():
            continue  # the CLI's modules are its command groups; a layer's, its tables
        said = set(re.findall(r"\w+", description))
        assert modules <= said, f"{entry}: {sorted(modules - said)} missing from the tree"


def test_the_import_contract_holds() -> None:
    """pre-commit runs the same; here `make test` and CI do too."""
    lint = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout[-3000:]


LONGEST_MODULE, LONGEST_FUNCTION = 450, 60
"""Lines: a module a reader takes in at one sitting, a function on one screen."""


def test_no_module_is_over_450_lines_and_no_function_over_60() -> None:
    over: list[str] = []
    for package in ("lakehouse", "bronze", "silver", "gold", "benchmarks", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            module = ast.parse(text)
            name = path.relative_to(ROOT)
            if (lines := len(text.splitlines())) > LONGEST_MODULE:
                over.append(f"{name} ({lines} lines)")
            over += [
                f"{name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
                for node in ast.walk(module)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.end_lineno is not None
                and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
            ]
    assert not over, "split them: " + ", ".join(over)
