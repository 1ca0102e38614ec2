"""Between stages the build hands the heap's free memory back to the kernel: a stage's working memory does not
stay in the RSS of the stages after it."""

from __future__ import annotations

from edgekit.observe.memwatch import process_memory, release_freed_memory


def test_freed_heap_memory_goes_back_to_the_kernel() -> None:
    chunks = [bytearray(4096) for _ in range(64_000)]  # 250 MiB of heap blocks, each below the mmap threshold
    pin = bytearray(4096)  # above them on the heap: glibc's own trimming of the heap's top cannot reach them
    held = process_memory()["anon"]
    del chunks
    before = process_memory()["anon"]
    release_freed_memory()
    after = process_memory()["anon"]
    assert before > held - 50 * 2**20, "glibc gave the blocks back on its own: nothing left to test"
    assert after < before - 200 * 2**20, (held, before, after)
    del pin
