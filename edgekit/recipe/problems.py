"""Recipe problems from pydantic's validation errors: the key, what was expected, in the words of a TOML file."""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ValidationError

from edgekit._util.suggest import did_you_mean
from edgekit.errors import RecipeProblem

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def _loc_to_key(loc: tuple[str | int, ...]) -> str:
    key = ""
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
    return key


def _unwrap(annotation: Any) -> list[Any]:
    """The classes inside Optional/Union/Annotated/tuple/list annotations."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list):
        found: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not Ellipsis:
                found += _unwrap(arg)
        return found
    return [annotation]


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = next((c for c in _unwrap(field.annotation) if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return current


def _expected(model: type[BaseModel] | None, field_name: str | int) -> str:
    if model is None or not isinstance(field_name, str) or field_name not in model.model_fields:
        return ""
    field = model.model_fields[field_name]
    literals = [a for a in _unwrap(field.annotation) if typing.get_origin(a) is Literal]
    if literals:
        values = [repr(v) for lit in literals for v in typing.get_args(lit)]
        return f"; expected one of {', '.join(values)}"
    return ""


# pydantic's words for the Python types it wanted, in the words of the TOML file being read
TOML_WORDS = {
    "tuple_type": "expected an array",
    "list_type": "expected an array",
    "string_type": "expected a string (in quotes)",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer, not a fraction",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "dict_type": "expected a table",
    "too_short": "must not be empty; add at least one",
    "model_type": "expected a table (a [section] or { key = value, ... })",
    "model_attributes_type": "expected a table (a [section] or { key = value, ... })",
}
BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
    "string_too_long": ("at most this many characters:", "max_length"),
}
NAME_RULE = "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _real_loc(loc: tuple[str | int, ...], data: Any) -> tuple[str | int, ...]:
    """`loc` without pydantic's union-member tags ("tuple[int, ...]"), keeping keys that are in the data."""
    kept: list[str | int] = []
    current = data
    for part in loc:
        in_dict = isinstance(current, dict) and part in current
        if in_dict or (isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)):
            current = current[part]
        elif isinstance(part, str) and "[" in part:
            continue
        else:
            current = None
        kept.append(part)
    return tuple(kept)


def problems_from(
    exc: ValidationError, root: type[BaseModel], prefix: str = "", data: Any = None
) -> list[RecipeProblem]:
    problems: list[RecipeProblem] = []
    for err in exc.errors(include_url=False):
        loc = _real_loc(tuple(err["loc"]), data)
        key = _loc_to_key(loc)
        if prefix:
            key = f"{prefix}.{key}" if key else prefix
        parent = _model_at(root, loc[:-1])
        if err["type"] == "extra_forbidden":
            allowed = list(parent.model_fields) if parent else []
            problems.append(
                RecipeProblem(
                    key,
                    "unknown key"
                    + (
                        f"; expected one of {', '.join(allowed)}"
                        if allowed
                        else "; this table takes no keys"
                        if parent
                        else ""
                    ),
                    did_you_mean(str(loc[-1]), allowed) if allowed and loc else None,
                )
            )
        elif err["type"] == "missing":
            if key == "targets":
                problems.append(RecipeProblem(key, "no targets; add a [[targets]] section with backend and scheme"))
            elif _model_at(root, loc) is not None:
                problems.append(RecipeProblem(key, f"required section [{key}] is missing; add it"))
            else:
                problems.append(RecipeProblem(key, "required key is missing; add it"))
        elif err["type"] == "literal_error":
            allowed_values = [str(v).strip("'") for v in re.findall(r"'([^']*)'", err["msg"])]
            problems.append(
                RecipeProblem(
                    key,
                    f"got {err['input']!r}; {err['msg'].lower()}",
                    did_you_mean(str(err["input"]), allowed_values) if isinstance(err["input"], str) else None,
                )
            )
        else:
            message = TOML_WORDS.get(err["type"]) or err["msg"].removeprefix("Value error, ")
            if err["type"] in BOUNDS:
                word, bound = BOUNDS[err["type"]]
                message = f"must be {word} {err.get('ctx', {}).get(bound)}"
            if err["type"] == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == NAME_PATTERN:
                message = NAME_RULE
            if isinstance(err["input"], dict) and err["type"] == "value_error":  # a whole-section check
                problems.append(RecipeProblem(key, message))
                continue
            if key == "targets" and err["type"] == "tuple_type":
                message += "; write each target as a [[targets]] section"
            shown = _shown(err["input"])
            problems.append(RecipeProblem(key, f"{message} (got {shown}){_expected(parent, loc[-1] if loc else '')}"))
    return _dedupe(problems)


def _dedupe(problems: list[RecipeProblem]) -> list[RecipeProblem]:
    """Drop repeats, and errors about a container whose items already have their own errors."""
    keys = {p.key for p in problems}
    seen: set[tuple[str, str]] = set()
    unique = []
    for p in problems:
        if p.key and any(k != p.key and k.startswith((p.key + ".", p.key + "[")) for k in keys):
            continue
        if (p.key, p.problem) not in seen:
            seen.add((p.key, p.problem))
            unique.append(p)
    return unique
