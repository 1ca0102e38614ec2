from __future__ import annotations

import threading
from pathlib import Path

import pytest

from edgekit.plan.keys import task_key
from edgekit.store.cache import CacheEntry, StageCache


def get_or_produce(cache: StageCache, inputs: dict[str, object], produce: object) -> CacheEntry:
    """An entry keyed as a task with these inputs would be."""
    return cache.get_or_produce("stage", task_key("stage", inputs), inputs, produce)  # type: ignore[arg-type]


def test_produce_once_then_reuse(tmp_path: Path) -> None:
    cache = StageCache(tmp_path)
    calls = []

    def produce(out: Path) -> dict[str, int]:
        calls.append(1)
        (out / "f.txt").write_text("hello")
        return {"answer": 42}

    first = get_or_produce(cache, {"a": 1}, produce)
    second = get_or_produce(cache, {"a": 1}, produce)
    assert len(calls) == 1 and not first.reused and second.reused
    assert second.result == {"answer": 42} and (second.path / "f.txt").read_text() == "hello"
    assert second.files[0]["path"] == "f.txt" and len(second.files[0]["sha256"]) == 64
    other = get_or_produce(cache, {"a": 2}, produce)
    assert other.key != first.key and len(calls) == 2


def test_a_failed_producer_leaves_no_entry(tmp_path: Path) -> None:
    cache = StageCache(tmp_path)

    def broken(out: Path) -> None:
        (out / "half.bin").write_bytes(b"x" * 10)
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        get_or_produce(cache, {"a": 1}, broken)
    assert cache.lookup("stage", task_key("stage", {"a": 1})) is None
    assert not [p for p in (tmp_path / "stage").iterdir()]


def test_a_truncated_entry_is_not_reused(tmp_path: Path) -> None:
    cache = StageCache(tmp_path)
    entry = get_or_produce(cache, {}, lambda out: (out / "w.bin").write_bytes(b"0123456789") and None)
    (entry.path / "w.bin").write_bytes(b"01234")
    assert cache.lookup("stage", entry.key) is None


def test_concurrent_builds_produce_once(tmp_path: Path) -> None:
    cache = StageCache(tmp_path)
    calls = []
    gate = threading.Barrier(4)

    def produce(out: Path) -> dict[str, str]:
        calls.append(1)
        (out / "x").write_text("x")
        return {}

    def worker() -> None:
        gate.wait()
        get_or_produce(cache, {"same": True}, produce)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_partials_of_dead_processes_are_cleaned(tmp_path: Path) -> None:
    cache = StageCache(tmp_path)
    dead = tmp_path / "stage" / ".abc.pid999999999.x.partial"
    dead.mkdir(parents=True)
    assert cache.clean_partials() == 1 and not dead.exists()


def test_a_partial_is_abandoned_when_its_producers_lock_is_free_whatever_its_pid(tmp_path: Path) -> None:
    """A live PID in the name (another container's namespace, or reused) does not keep a partial; a held lock does."""
    import os

    cache = StageCache(tmp_path)
    key_free, key_held = "a" * 64, "b" * 64
    foreign = tmp_path / "stage" / f".{key_free}.pid{os.getpid()}.x.partial"
    producing = tmp_path / "stage" / f".{key_held}.pid{os.getpid()}.y.partial"
    foreign.mkdir(parents=True)
    producing.mkdir()
    older = tmp_path / "stage" / f".{'c' * 16}.pid{os.getpid()}.z.partial"  # named as edgekit 0.1 did
    older.mkdir()
    with cache._lock("stage", key_held), cache._lock("stage", "c" * 64):  # producers at work on those entries
        removed = [cache.clean_partials()]
        assert foreign.exists() is False and producing.exists() and older.exists()
    removed.append(cache.clean_partials())
    assert removed == [1, 2] and not producing.exists() and not older.exists()
