"""What every tool-call format shares: the plan a request's tools make, and the schema of one call."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ToolFormat(enum.Enum):
    """How the model is told about tools and writes a call."""

    GENERIC = "generic"  # one JSON object, {"tool_call": …} or {"response": …}, described in the system message
    HERMES = "hermes"  # the chat template lists the tools; a call is <tool_call>{"name", "arguments"}</tool_call>
    LLAMA3 = "llama3"  # the chat template lists the tools; a call is {"name", "parameters"}


@dataclass(frozen=True)
class ToolPlan:
    """What a request's tools add to the prompt, and what the reply is constrained to.

    `schema` is the JSON value the model writes, between the two texts of `frame` (hermes: its tags). `system`
    is text the generic format adds to the system message; `tools` what a native template is given to list;
    `text_unless`: the reply may be plain text instead of a call, if it does not start with this character (a
    native format with `tool_choice: auto`; None: it may not).
    """

    format: ToolFormat
    schema: dict[str, Any]
    system: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    frame: tuple[str, str] = ("", "")
    text_unless: str | None = None


def call_schema(functions: list[dict[str, Any]], picked: str, arguments_key: str = "arguments") -> dict[str, Any]:
    """The schema of a call of the picked function(s) (`auto`/`required`: any), `{name, arguments}`, with every
    function's parameters under `$defs`."""
    calls = [_one_call(f["name"], arguments_key) for f in functions if picked in ("auto", "required", f["name"])]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {**schema, "$defs": {_definition(f["name"]): _rerooted(f["checked"], f"#/$defs/{_definition(f['name'])}/")
                                for f in functions}}  # fmt: skip


def native_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The functions as a native chat template takes `tools` (OpenAI's shape, as transformers passes them)."""
    return [{"type": "function", "function": f} for f in listed(functions)]


def listed(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The functions as the request gave them (name, description, parameters)."""
    return [{k: f[k] for k in ("name", "description", "parameters") if k in f} for f in functions]


def _one_call(name: str, arguments_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, arguments_key: {"$ref": f"#/$defs/{_definition(name)}"}},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


def _definition(name: str) -> str:
    return f"tool-{name}"


def _rerooted(schema: Any, prefix: str) -> Any:
    """A tool's parameters schema moved under the reply's `$defs`: its local `$ref`s (`#/…`) start at `prefix`."""
    if isinstance(schema, list):
        return [_rerooted(item, prefix) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = prefix + value[2:]
        elif key in ("enum", "const"):
            out[key] = value
        else:
            out[key] = _rerooted(value, prefix)
    return out
