"""Memory accounting and the reference's memory plan: what is measured, what is available, what is chosen."""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.cli.errors import hint
from edgekit.errors import ExitCode, ReferenceMemoryError
from edgekit.observe.memwatch import Available, MemoryWatch, available_memory, process_memory, tree_memory
from edgekit.reference.memory import ModelShape, choose, estimates
from edgekit.sources.weights import CheckpointTensors

MIB = 2**20


def test_file_backed_memory_is_told_apart(tmp_path: Path) -> None:
    """Pages of a mapped file count as file-backed, allocations as anonymous; only this process is read."""
    path = tmp_path / "weights.bin"
    path.write_bytes(np.random.default_rng(0).bytes(128 * MIB))
    before = process_memory()
    with MemoryWatch(interval=0.01) as watch, open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        touched = sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))
        after_map = process_memory()
        time.sleep(0.05)  # let the watch's thread sample the mapped pages
        # Fresh anonymous pages: malloc could hand back memory a previous test freed, already resident.
        allocated = mmap.mmap(-1, 96 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        allocated.write(b"\x01" * len(allocated))
        after_alloc = process_memory()
        time.sleep(0.05)
        mapped.close()
    assert touched > 0 and allocated[len(allocated) - 1] == 1
    assert after_map["file"] - before["file"] >= 100 * MIB  # the file's pages: file-backed...
    assert after_map["anon"] - before["anon"] < 64 * MIB  # ...and not anonymous
    assert after_alloc["anon"] - after_map["anon"] >= 90 * MIB
    # The watch samples (here every 10 ms, and once more on leaving): within a few pages of what was read above.
    assert watch.peaks.file >= after_map["file"] - 8 * MIB and watch.peaks.anon >= after_alloc["anon"] - 8 * MIB
    assert watch.peaks.samples >= 2


def test_children_count_in_the_tree() -> None:
    code = "import sys, time; b = b'x' * (64 << 20); sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        own = process_memory()
        assert tree_memory()["anon"] - (own["anon"] + own.get("shmem", 0)) >= 60 * MIB
    finally:
        child.kill()
        child.wait()


def _fake_machine(tmp_path: Path, cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: 33554432 kB\nMemAvailable: {16 * 2**20} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return proc, root


def test_a_cgroup_v2_limit_is_found_up_the_tree(tmp_path: Path) -> None:
    proc, root = _fake_machine(tmp_path, "0::/build/job\n", {
        "build/job/memory.max": "max\n", "build/job/memory.stat": f"anon {256 * MIB}\nfile {900 * MIB}\n",
        "build/memory.max": f"{2048 * MIB}\n", "build/memory.stat": f"anon {512 * MIB}\nfile 0\n",
    })  # fmt: skip
    found = available_memory(proc, root)
    assert found.bytes == 1536 * MIB and found.limited_by == f"cgroup memory.max of {root / 'build'}"


def test_a_cgroup_v1_limit_and_no_limit(tmp_path: Path) -> None:
    proc, root = _fake_machine(tmp_path, "5:cpu:/\n4:memory:/a\n", {
        "memory/a/memory.limit_in_bytes": f"{1024 * MIB}\n", "memory/a/memory.stat": f"rss 1\ntotal_rss {256 * MIB}\n",
        "memory/memory.limit_in_bytes": "9223372036854771712\n",
    })  # fmt: skip
    assert available_memory(proc, root).bytes == 768 * MIB
    proc, root = _fake_machine(tmp_path / "free", "0::/\n", {"memory.max": "max\n"})
    assert available_memory(proc, root) == Available(16 * 2**30, "MemAvailable")


def test_rlimit_data_bounds_what_is_available() -> None:
    code = (
        "import resource; from edgekit.observe.memwatch import available_memory;"
        "resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, resource.RLIM_INFINITY));"
        "a = available_memory(); print(a.bytes, a.limited_by)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "RLIMIT_DATA" and 2 << 30 < int(out[0]) < 3 << 30


def _checkpoint(folder: Path, tied: bool = True) -> Path:
    from safetensors.numpy import save_file

    folder.mkdir()
    tensors = {"model.embed_tokens.weight": np.ones((1000, 64), np.float16), "model.norm.weight": np.ones(64)}
    for i in range(3):
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = np.ones((256 if i != 1 else 512, 64), np.float16)
    if not tied:
        tensors["lm_head.weight"] = np.ones((1000, 64), np.float16)
    save_file(tensors, str(folder / "model.safetensors"))
    config = {"hidden_size": 64, "intermediate_size": 256, "vocab_size": 1000, "num_attention_heads": 4}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_sizes_come_from_the_headers(tmp_path: Path) -> None:
    shape = ModelShape.of(_checkpoint(tmp_path / "m"))
    assert (shape.params, shape.largest_layer, shape.largest_outside) == (64_000 + 64 + 64 * 1024, 512 * 64, 64_000)
    assert (shape.vocab, shape.hidden, shape.intermediate, shape.heads) == (1000, 64, 256, 4)
    needs = estimates(shape, ["float32", "bfloat16"], context=128, scored=63)
    assert needs["full"] - needs["stream"] == (shape.params - shape.largest_outside) * 4


def test_tensors_are_read_as_written(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    written = {"a": torch.randn(3, 5).to(torch.bfloat16), "b": torch.randn(7).half(), "c": torch.arange(4.0)}
    save_file(written, str(tmp_path / "x.safetensors"))
    tensors = CheckpointTensors(tmp_path)
    for name, expected in load_file(str(tmp_path / "x.safetensors")).items():
        got = tensors.load(name)
        assert got.dtype == expected.dtype and torch.equal(got, expected)


GIB = 2**30


@pytest.mark.parametrize(
    ("requested", "device", "available", "streamable", "mode"),
    [
        ("auto", "cpu", 10 * GIB, None, "full"),  # fits with room to spare
        ("auto", "cpu", 4.8 * GIB, None, "stream"),  # would fit, but not with 20% to spare
        ("auto", "cpu", 4.5 * GIB, "no layer list", "full"),  # cannot stream: whole, and it fits
        ("auto", "cuda", 1 * GIB, None, "full"),  # on a GPU the weights are not in this memory
        ("stream", "cpu", 10 * GIB, None, "stream"),
        ("full", "cpu", 4.5 * GIB, None, "full"),
    ],
)
def test_the_mode_chosen(requested: str, device: str, available: float, streamable: str | None, mode: str) -> None:
    needs = {"full": 4 * GIB, "stream": 1 * GIB}
    plan = choose(requested, device, needs, Available(int(available), "MemAvailable"), streamable)
    assert plan.mode == mode and plan.requested == requested
    assert plan.as_record()["estimate_full_mib"] == 4096 and plan.as_record()["estimate_stream_mib"] == 1024


def test_too_little_memory_stops_with_the_numbers_and_the_ways_out() -> None:
    needs = {"full": 4 * GIB, "stream": 1 * GIB}
    with pytest.raises(ReferenceMemoryError) as found:
        choose("full", "cpu", needs, Available(2 * GIB, "RLIMIT_DATA"), None)
    error = found.value
    assert error.exit_code == ExitCode.ENVIRONMENT == 3
    assert "4.0 GiB" in error.message and "2.0 GiB" in error.message and "RLIMIT_DATA" in error.message
    assert 'reference_memory = "stream"' in (error.hint or "") and "--reference" in (hint(error) or "")
    with pytest.raises(ReferenceMemoryError) as found:
        choose("auto", "cpu", needs, Available(GIB // 2, "cgroup memory.max of /x"), None)
    assert "streamed 1.0 GiB" in found.value.message and "reference_memory" not in (found.value.hint or "")
    with pytest.raises(ReferenceMemoryError, match="cannot be streamed: no layer list"):
        choose("stream", "cpu", needs, Available(8 * GIB, "MemAvailable"), "no layer list")
    with pytest.raises(ReferenceMemoryError) as found:  # whole does not fit and streaming cannot help
        choose("auto", "cpu", needs, Available(3 * GIB, "MemAvailable"), "no layer list")
    assert "reference_memory" not in (found.value.hint or "") and "--reference" in (hint(found.value) or "")


def test_the_recipe_takes_reference_memory() -> None:
    from edgekit.errors import RecipeError
    from edgekit.recipe.load import parse_recipe

    base = '[model]\nsource = "m"\n[[targets]]\nbackend = "gguf"\nscheme = "Q8_0"\n[validation]\n'
    assert (
        parse_recipe((base + 'reference_memory = "stream"\n').encode(), Path("r.toml")).spec.validation.reference_memory
        == "stream"
    )
    with pytest.raises(RecipeError, match="reference_memory"):
        parse_recipe((base + 'reference_memory = "half"\n').encode(), Path("r.toml"))
    with pytest.raises(RecipeError, match="did you mean 'reference_memory'"):
        parse_recipe((base + 'reference_memroy = "stream"\n').encode(), Path("r.toml"))


def test_a_process_whose_name_is_cut_mid_character_is_still_measured() -> None:
    """Ray names a worker after its task ("ray::imatrix 2×128 tokens"); the kernel keeps 15 bytes of it, which can
    end inside the "×" and make /proc/PID/status invalid UTF-8."""
    code = "open('/proc/self/comm', 'wb').write('ray::imatrix 2×128'.encode()); import time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while b"\xc3" not in Path(f"/proc/{child.pid}/comm").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"/proc/{child.pid}/comm").read_bytes() == b"ray::imatrix 2\xc3\n"
        assert process_memory(child.pid)["anon"] > 0
    finally:
        child.kill()
        child.wait()
