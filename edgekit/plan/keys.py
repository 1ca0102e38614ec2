"""The one place a task's cache key is computed: the sha256 of its stage and its declared inputs.

A task's inputs are its dataclass fields, turned into JSON: an upstream task becomes its key (so a
change anywhere upstream changes every key downstream), a value object with `key_form()` becomes
that (the eval text becomes its sha256, not its 200 KB), tuples become lists. Fields declared with
`metadata=UNKEYED` (display names, local paths of content that is hashed elsewhere) are left out,
and `metadata=KEYED_IF_SET` fields only count when they are not None.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from edgekit._util.hashing import sha256_json
from edgekit.store.cache import CACHE_FORMAT

_KEY = "edgekit.key"
UNKEYED = {_KEY: "no"}  # field metadata: left out of the key (a label, a local path of hashed content)
KEYED_IF_SET = {_KEY: "if_set"}  # field metadata: part of the key only when not None


def json_form(value: Any) -> Any:
    """A task field as JSON for its key: upstream tasks as their keys, value objects by their key form."""
    if hasattr(value, "stage") and dataclasses.is_dataclass(value) and hasattr(value, "key"):
        return value.key
    if hasattr(value, "key_form"):
        return value.key_form()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return key_inputs(value)
    if isinstance(value, tuple | list):
        return [json_form(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_form(v) for k, v in value.items()}
    return value


def key_inputs(obj: Any) -> dict[str, Any]:
    """The declared inputs of a task (or of a value object inside one), as they enter its key."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        rule = f.metadata.get(_KEY)
        value = getattr(obj, f.name)
        if rule == "no" or (rule == "if_set" and value is None):
            continue
        out[f.name] = json_form(value)
    return out


def task_key(stage: str, inputs: dict[str, Any]) -> str:
    return sha256_json({"cache_format": CACHE_FORMAT, "stage": stage, "inputs": inputs})
