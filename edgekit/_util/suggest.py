"""'Did you mean' hints, shared by the recipe loader and the backend registry."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    candidates = list(candidates)
    by_lower = {c.lower(): c for c in candidates}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[matches[0]] if matches else None
