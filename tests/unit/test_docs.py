"""The docs site builds with `mkdocs build --strict`, and its generated pages cover the schema and the CLI.

The recipe reference is written from `edgekit.recipe.schema.RecipeModel` by `docs/hooks/recipe_ref.py` and the
CLI reference from the click commands by mkdocs-click, so a key or a command added without its docs fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.cli import cli
from edgekit.recipe.schema import RecipeModel

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_recipe_reference_names_every_top_level_section(site: Path) -> None:
    page = (site / "recipe-reference" / "index.html").read_text(encoding="utf-8")
    for name, info in RecipeModel.model_fields.items():
        array = "tuple" in str(info.annotation)
        title = f"[[{name}]]" if array else f"[{name}]"
        assert f'id="{name}"' in page and title in page, f"recipe section {title} missing from the recipe reference"


def test_cli_reference_names_every_command(site: Path) -> None:
    page = (site / "cli-reference" / "index.html").read_text(encoding="utf-8")
    assert cli.commands, "the CLI registers no commands"
    for name in cli.commands:
        assert f"edgekit {name}" in page, f"edgekit {name} missing from the CLI reference"
