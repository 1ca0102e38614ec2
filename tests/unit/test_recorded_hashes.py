"""Trust on first use for hf:// sources: the files of a revision must keep the hashes recorded when it was first
fetched. Here the hub cache is a local folder laid out as huggingface_hub lays it out, used offline."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from edgekit.errors import SourceError
from edgekit.recipe.load import parse_recipe
from edgekit.store.cache import StageCache
from edgekit.store.records import Checkpoint
from tests.support.stage_runs import fetched, plan_of, run_tasks

COMMIT = "c0ffee" + "0" * 34
FILES = {
    "config.json": b'{"model_type": "llama", "num_hidden_layers": 2}\n',
    "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)),
    "tokenizer.json": b'{"model": {"type": "BPE"}}\n',
}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--edgekit-test--tofu"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    for name, data in FILES.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("../../blobs") / blob.name)
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


RECIPE = b"""
[model]
source = "hf://edgekit-test/tofu"
revision = "main"

[[targets]]
backend = "openvino"
scheme = "INT8"

[validation]
enabled = false
"""


def _fetch(tmp_path: Path, cache: StageCache) -> Checkpoint:
    return fetched(parse_recipe(RECIPE, tmp_path / "r.toml"), cache)


def test_a_blob_changed_after_the_first_fetch_is_refused(hub: Path, tmp_path: Path) -> None:
    cache = StageCache(tmp_path / "cache")
    first = _fetch(tmp_path, cache)
    assert first.revision == COMMIT
    blob = (hub / "snapshots" / COMMIT / "config.json").resolve()
    blob.write_bytes(FILES["config.json"].replace(b"2", b"3"))  # same size, other bytes
    with pytest.raises(SourceError, match=r"config\.json do not match the hashes recorded") as info:
        _fetch(tmp_path, StageCache(tmp_path / "cache"))
    assert "delete this revision from the HF cache" in (info.value.hint or "")
    assert [p.name for p in (tmp_path / "cache" / "fetch").iterdir()] == [first.key]  # no new entry


def test_an_unchanged_revision_is_fetched_again_from_the_cache(hub: Path, tmp_path: Path) -> None:
    cache = StageCache(tmp_path / "cache")
    first = _fetch(tmp_path, cache)
    again = _fetch(tmp_path, cache)
    assert again.key == first.key and cache.events[-1] == ("fetch", first.key, True)


def test_a_failed_fetch_keeps_its_log_in_the_cache_and_the_error_names_it(hub: Path, tmp_path: Path) -> None:
    cache = StageCache(tmp_path / "cache")
    first = _fetch(tmp_path, cache)
    assert (tmp_path / "cache" / "fetch" / first.key / "stage.log").is_file()  # every entry keeps its stage's log
    shutil.rmtree(tmp_path / "cache" / "fetch" / first.key)  # fetched again: its hashes were recorded
    recipe = parse_recipe(RECIPE, tmp_path / "r.toml")
    plan = plan_of(recipe, cache)
    (hub / "snapshots" / COMMIT / "config.json").resolve().write_bytes(FILES["config.json"].replace(b"2", b"3"))
    with pytest.raises(SourceError) as info:  # changed after planning: refused inside the fetch stage
        run_tasks(plan, plan.bundle.checkpoint, cache=cache)
    kept = sorted((tmp_path / "cache" / "logs").glob("fetch-*"))  # the failed entry's folder is gone, not its log
    assert len(kept) == 1 and (kept[0] / "stage.log").is_file()
    assert info.value.logs == kept[0] and f"logs: {kept[0]}" in str(info.value)
