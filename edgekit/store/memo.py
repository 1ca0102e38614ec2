"""Answers worth remembering between builds (a tokenization, a support check): JSON in the cache, keyed by
the hash of everything the answer depends on, written atomically. Not stage outputs: nothing reads their files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgekit._util.fsutil import write_bytes_atomic
from edgekit._util.hashing import sha256_json


def remembered(
    cache_root: Path,
    namespace: str,
    inputs: dict[str, Any],
    compute: Callable[[], Any],
    keep: Callable[[Any], bool] = lambda value: True,
) -> Any:
    """The answer for `inputs`: remembered, or computed now and remembered when `keep(answer)`."""
    path = cache_root / namespace / f"{sha256_json(inputs)}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        pass
    value = compute()
    if keep(value):
        write_bytes_atomic(path, json.dumps(value).encode())
    return value
