"""Prompt-prefix reuse for serving: what each sequence slot's KV state holds, and a bounded store of more.

As llama-server's slots do, a slot keeps its KV cells when its request finishes, together with the token
ids they were computed from. A new request goes to the free slot whose tokens share the longest common
prefix with its prompt; the slot keeps those cells and only the rest of the prompt is prefilled. On an
edge assistant every chat request starts with the same system prompt and template, and a conversation's
next turn starts with the whole previous one, so this is the common case.

When the chosen slot gives less than half of the prompt and would drop at least `MIN_SAVED` tokens (it is
being repurposed), its content is first copied into a store of at most `capacity` prefixes (runtime.toml
`prefix_cache`; least recently used dropped first, a prefix already contained in a stored one is not
stored twice); a stored prefix that matches the prompt better than the slot does is copied into the slot.
Every prefix is bounded by the slot's context (`n_ctx`). At least the prompt's last token is always
computed again: its logits give the first generated token.

The engine supplies the KV operations (`KVOps`): llama.cpp removes cells and copies a sequence's state
to and from host memory; OpenVINO and ONNX Runtime slice their per-sequence state along its time axis.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MIN_SAVED = 32  # fewer dropped tokens are not worth a store entry (a prefill of them is a few ms)


class KVOps(Protocol):
    def truncate(self, seq: int, n: int) -> None:
        """Keep the first `n` positions of slot `seq`'s KV state, drop the rest."""
        ...

    def snapshot(self, seq: int) -> Any:
        """A copy of slot `seq`'s KV state, independent of what the slot does next."""
        ...

    def restore(self, seq: int, state: Any) -> None:
        """Replace slot `seq`'s KV state by a snapshot (of any slot)."""
        ...


@dataclass(frozen=True)
class Reuse:
    tokens: int  # prompt tokens whose KV state is reused (not prefilled again)
    source: str  # "slot" (what the slot held), "store" (copied from the store) or "" (nothing reused)


@dataclass
class _Stored:
    tokens: tuple[int, ...]
    state: Any
    used: int


@dataclass
class _Slot:
    tokens: list[int] = field(default_factory=list)
    used: int = 0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """The bookkeeping; the engine calls `prepare` before prefilling and `fed` for every token it computes."""

    def __init__(self, slots: int, capacity: int, ops: KVOps) -> None:
        self.capacity = capacity
        self._ops = ops
        self._slots = [_Slot() for _ in range(slots)]
        self._store: list[_Stored] = []
        self._clock = itertools.count(1)

    @property
    def entries(self) -> int:
        return len(self._store)

    def held(self, seq: int) -> list[int]:
        return list(self._slots[seq].tokens)

    def choose(self, free: Sequence[int], ids: Sequence[int]) -> int:
        """The free slot to start `ids` in: the longest match; else an empty slot; else the least recently used."""
        limit = len(ids) - 1

        def score(seq: int) -> tuple[int, bool, int]:
            slot = self._slots[seq]
            return min(common_prefix(slot.tokens, ids), limit), not slot.tokens, -slot.used

        return max(free, key=score)

    def prepare(self, seq: int, ids: Sequence[int]) -> Reuse:
        """Make slot `seq` hold the longest available prefix of `ids` (never all of it); say how much it holds."""
        slot, limit = self._slots[seq], len(ids) - 1
        own = min(common_prefix(slot.tokens, ids), limit)
        best, stored = max(((s, common_prefix(s.tokens, ids)) for s in self._store), key=lambda m: m[1],
                           default=(None, 0))  # fmt: skip
        stored = min(stored, limit)
        if own * 2 < len(ids) and len(slot.tokens) - own >= MIN_SAVED:
            self._save(seq)  # the slot is being repurposed: keep what it held
        slot.used = next(self._clock)
        if best is not None and stored > own:
            self._ops.restore(seq, best.state)
            best.used = slot.used
            slot.tokens = list(best.tokens[:stored])
            self._ops.truncate(seq, stored)
            return Reuse(stored, "store")
        del slot.tokens[own:]
        self._ops.truncate(seq, own)
        return Reuse(own, "slot" if own else "")

    def fed(self, seq: int, tokens: Sequence[int]) -> None:
        """`tokens` now sit in slot `seq`'s KV state after what it held."""
        self._slots[seq].tokens.extend(tokens)

    def forget(self, seq: int) -> None:
        """Slot `seq`'s KV state was cleared or is no longer trusted."""
        self._slots[seq].tokens.clear()

    def _save(self, seq: int) -> None:
        tokens = tuple(self._slots[seq].tokens)
        if self.capacity == 0 or any(common_prefix(s.tokens, tokens) == len(tokens) for s in self._store):
            return
        self._store = [s for s in self._store if common_prefix(s.tokens, tokens) < len(s.tokens)]
        while len(self._store) >= self.capacity:
            self._store.remove(min(self._store, key=lambda s: s.used))
        self._store.append(_Stored(tokens, self._ops.snapshot(seq), next(self._clock)))


class PrefixSlots:
    """What the engines' serving mixins share: a `PrefixCache` over their sequence slots, and slot choice."""

    _prefix: PrefixCache

    @property
    def prefix_entries(self) -> int:
        """Prefixes kept in host memory now (beyond what the slots hold)."""
        return self._prefix.entries

    def pick_slot(self, free: Sequence[int], prompt_ids: Sequence[int]) -> int:
        return self._prefix.choose(free, prompt_ids)
