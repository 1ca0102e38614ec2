"""hf:// sources through huggingface_hub's cache, offline, with a local Hub cache made in the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hub_fixtures import publish_to_local_hub, save_tiny_llama
from tests.support.stage_cache import cli_env

REPO_ID = "edgekit-test/tiny-llama"

RECIPE = """
[model]
source = "hf://{repo}"
revision = "{revision}"

[[targets]]
backend = "gguf"
scheme = "Q8_0"
required = false  # a random tiny model: the gates are not what this test is about

[validation]
max_tokens = 1024
context_length = 256
noise_floor_dtype = "none"

[bench]
enabled = false

[bundle]
name = "tiny"
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, smollm2_gguf: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("hub")
    model = save_tiny_llama(root / "src", smollm2_gguf)
    commit = publish_to_local_hub(model, root / "hub-cache", REPO_ID)
    return root / "hub-cache", commit


def edgekit(args: list[str], cwd: Path, hub_cache: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(cache, HF_HUB_CACHE=str(hub_cache), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "edgekit", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_hub_source_records_the_resolved_commit_and_file_hashes(hub: tuple[Path, str], tmp_path: Path) -> None:
    hub_cache, commit = hub
    (tmp_path / "r.toml").write_text(RECIPE.format(repo=REPO_ID, revision="main"))
    proc = edgekit(["build", "r.toml"], tmp_path, hub_cache, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "dist" / "tiny" / "manifest.json").read_text())
    assert manifest["source"]["uri"] == f"hf://{REPO_ID}" and manifest["source"]["revision"] == commit
    files = {f["path"]: f["sha256"] for f in manifest["source"]["files"]}
    assert "model.safetensors" in files and "config.json" in files and "tokenizer.json" in files
    snapshot = hub_cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit
    import hashlib

    assert files["model.safetensors"] == hashlib.sha256((snapshot / "model.safetensors").read_bytes()).hexdigest()
    assert manifest["artifacts"][0]["tensor_types"]


def test_unknown_revision_offline_is_a_clear_error(hub: tuple[Path, str], tmp_path: Path) -> None:
    hub_cache, _ = hub
    (tmp_path / "r.toml").write_text(RECIPE.format(repo=REPO_ID, revision="v9.9"))
    proc = edgekit(["build", "r.toml"], tmp_path, hub_cache, tmp_path / "cache")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "v9.9" in proc.stderr and "HF_HUB_OFFLINE" in proc.stderr
    assert not (tmp_path / "dist").exists()


def test_files_changed_after_first_fetch_are_refused(
    hub: tuple[Path, str], tmp_path: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A separate hub cache: this test corrupts a blob.
    root = tmp_path_factory.mktemp("hub-tamper")
    commit = publish_to_local_hub(save_tiny_llama(root / "src", smollm2_gguf), root / "hub-cache", REPO_ID)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        RECIPE.format(repo=REPO_ID, revision=commit).replace("[validation]", "[validation]\nenabled = false")
    )
    first = edgekit(["build", "r.toml"], tmp_path, root / "hub-cache", tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    blob = (
        root / "hub-cache" / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit / "config.json"
    ).resolve()
    blob.write_text(blob.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    second = edgekit(["build", "r.toml"], tmp_path, root / "hub-cache", tmp_path / "cache")
    assert second.returncode == 2, second.stderr
    assert "config.json" in second.stderr and "do not match the hashes recorded" in second.stderr
