"""The layers hold (import-linter, contracts in pyproject.toml): the runtime and every engine never import the
build side, the library never imports the command line, the report renderers depend only on the report
model, each layer from the command line down to errors imports only the layers below it, and no package imports
another that imports it back. Imports under TYPE_CHECKING count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], capture_output=True, text=True,
                          cwd=REPO, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and proc.stdout.count("KEPT") >= 6
    assert "layers from the command line down to errors" in proc.stdout


def test_type_only_imports_count_in_the_contracts() -> None:
    import tomllib

    linter = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert linter["exclude_type_checking_imports"] is False


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    import ast

    too_long = []
    for path in sorted((REPO / "edgekit").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > 400:
            too_long.append(f"{path.relative_to(REPO)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                too_long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}()")
    assert not too_long, too_long
