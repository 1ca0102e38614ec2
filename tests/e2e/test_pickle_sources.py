"""Pickle checkpoints (`pytorch_model.bin`) as sources: refused unless `allow_pickle = true`, and even then
only unpickled with torch's weights-only loader, then converted to safetensors so no later stage unpickles.

The checkpoints are real: the tiny test model saved by transformers with `safe_serialization=False`, and a
copy whose pickle would run a command if it were loaded the ordinary way.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from edgekit.recipe.load import load_recipe
from edgekit.store.cache import StageCache
from tests.support.stage_cache import cli_env
from tests.support.stage_runs import fetched

RECIPE = """
[model]
source = "{source}"
allow_pickle = {allow}

[[targets]]
backend = "gguf"
scheme = "Q8_0"
"""

EVIL = """
import os, sys, torch

class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))

torch.save({"model.embed_tokens.weight": Payload()}, sys.argv[1])
"""


@pytest.fixture(scope="module")
def pickle_checkpoints(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Path]:
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("pickles")
    plain = root / "plain"
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(plain, safe_serialization=False)
    for extra in tiny_model.iterdir():
        if extra.suffix != ".safetensors" and not (plain / extra.name).exists():
            shutil.copy(extra, plain / extra.name)
    assert (plain / "pytorch_model.bin").is_file() and not list(plain.glob("*.safetensors"))
    evil = root / "evil"
    shutil.copytree(plain, evil)
    canary = root / "CANARY"
    subprocess.run([sys.executable, "-c", EVIL, str(evil / "pytorch_model.bin"), str(canary)], check=True)
    assert not canary.exists()
    return {"plain": plain, "evil": evil, "canary": canary}


def build(project: Path, source: Path, allow: bool) -> subprocess.CompletedProcess[str]:
    project.mkdir(parents=True, exist_ok=True)
    (project / "r.toml").write_text(RECIPE.format(source=source, allow=str(allow).lower()))
    env = cli_env(project / "cache", HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "edgekit", "build", "r.toml"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("kind", ["plain", "evil"])
def test_a_pickle_checkpoint_is_refused_without_allow_pickle(
    kind: str, pickle_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    proc = build(tmp_path, pickle_checkpoints[kind], allow=False)
    assert proc.returncode == 2, proc.stderr
    assert "model.source" in proc.stderr and "allow_pickle = true" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "dist").exists()  # refused before any work
    assert not pickle_checkpoints["canary"].exists()


def test_an_allowed_pickle_that_would_run_code_is_still_refused(
    pickle_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    proc = build(tmp_path, pickle_checkpoints["evil"], allow=True)
    assert proc.returncode == 2, proc.stderr
    assert "not a plain tensor checkpoint" in proc.stderr and "posix.system" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert not pickle_checkpoints["canary"].exists()  # the payload never ran
    assert not [p for p in (tmp_path / "cache" / "fetch").iterdir()]  # no entry, no temp folder
    assert not (tmp_path / "dist").exists()


def test_an_allowed_pickle_is_converted_to_safetensors_once(
    pickle_checkpoints: dict[str, Path], tiny_model: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    recipe_path = project / "r.toml"
    recipe_path.write_text(RECIPE.format(source=pickle_checkpoints["plain"], allow="true"))
    checkpoint = fetched(load_recipe(recipe_path), StageCache(tmp_path / "cache"))
    names = {p.name for p in checkpoint.path.iterdir()}
    assert "model.safetensors" in names and not {n for n in names if n.endswith((".bin", ".pt", ".pth"))}
    assert any("converted to safetensors" in note for note in checkpoint.notes)
    assert any(f.path == "pytorch_model.bin" for f in checkpoint.files)  # provenance: what was fetched
    converted, original = load_file(checkpoint.path / "model.safetensors"), load_file(tiny_model / "model.safetensors")
    for name, tensor in original.items():
        if name in converted:
            assert converted[name].equal(tensor.to(converted[name].dtype)), name
    assert "model.embed_tokens.weight" in converted
