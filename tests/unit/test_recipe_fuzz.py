"""Fuzzing the recipe loader: whatever the bytes, the answer is a Recipe or a RecipeError, never a crash."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from edgekit.errors import RecipeError
from edgekit.recipe.load import DEFAULT_RECIPE, Recipe, parse_recipe
from edgekit.recipe.schema import RecipeModel

PATH = Path("fuzz.toml")
VALID = DEFAULT_RECIPE.read_bytes()
# A few seconds in the fast suite; EDGEKIT_FUZZ_EXAMPLES=5000 for a deeper search.
EXAMPLES = int(os.environ.get("EDGEKIT_FUZZ_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load(raw: bytes) -> Recipe | None:
    try:
        return parse_recipe(raw, PATH)
    except RecipeError as exc:
        assert exc.problems and all(isinstance(p.problem, str) and p.problem for p in exc.problems)
        assert all(p.key for p in exc.problems if p.problem.startswith("unknown key")), exc.problems
        assert str(exc)  # the message renders
        return None


@SETTINGS
@given(st.binary(max_size=4096))
def test_random_bytes(raw: bytes) -> None:
    _load(raw)


@SETTINGS
@given(st.data())
def test_mutated_valid_recipe_bytes(data: st.DataObject) -> None:
    """Flip, insert and delete bytes of the default recipe."""
    raw = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw)))
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if op == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        elif at < len(raw):
            if op == "flip":
                raw[at] = data.draw(st.integers(0, 255))
            else:
                del raw[at : at + data.draw(st.integers(1, 32))]
    _load(bytes(raw))


def _fields(annotation: Any) -> list[str]:
    """Field names of the pydantic models inside an annotation, recursively."""
    found: list[str] = []
    for arg in getattr(annotation, "__args__", ()):
        found += _fields(arg)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            found += [name, *_fields(field.annotation)]
    return found


# TOML values of every kind, to put where the recipe expects something else
toml_scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.datetimes()
    | st.dates()
)
# keys: real field names, near misses, and the characters pydantic uses in its own error locations
FIELDS = sorted(set(_fields(RecipeModel)))
toml_keys = st.sampled_from(FIELDS) | st.text(alphabet="abcdeks_[]().,-' ", min_size=1, max_size=12)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(toml_keys, inner, max_size=4),
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


@SETTINGS
@given(st.data())
def test_valid_structure_with_values_replaced_or_keys_added(data: st.DataObject) -> None:
    """Replace any value of a valid recipe by any TOML value, or add a random key anywhere."""
    doc = tomllib.loads(VALID.decode())
    doc["validation"]["tasks"] = []
    doc["bench"]["threads"] = [1]
    doc["targets"][0]["options"] = {}
    doc["targets"][0]["gates"] = {"kld_mean_max": 0.1}
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(doc)))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            parent[data.draw(toml_keys)] = data.draw(toml_values)
        else:
            parent[path[-1]] = data.draw(toml_values)
    try:
        raw = tomli_w.dumps(doc).encode()
    except (TypeError, ValueError):  # a value TOML cannot hold (e.g. a list of mixed tables)
        return
    _load(raw)
