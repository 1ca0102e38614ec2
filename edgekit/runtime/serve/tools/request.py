"""A chat body's `tools`, `tool_choice` and `parallel_tool_calls`, and the tool calls and results of its history,
checked: whatever is malformed or not implemented is a 400 naming the field."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from edgekit.runtime.serve.api_error import invalid
from edgekit.runtime.serve.json_schema_checks import checked_schema

CHOICES = ("auto", "none", "required")
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FUNCTION_KEYS = ("name", "description", "parameters", "strict")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolRequest:
    """The checked functions (each with its `checked` parameters schema) and the choice: `auto`, `required` or
    the name of the one function to call."""

    functions: list[dict[str, Any]]
    picked: str


def tool_request(tools: list[Any] | None, choice: object, parallel: bool | None) -> ToolRequest | None:
    """The request's tools (None: no tool can be called, `tool_choice: none` included), or a 400."""
    if parallel:
        raise invalid(
            "`parallel_tool_calls` must be false: edgekit makes at most one tool call per reply", "parallel_tool_calls"
        )
    if tools is None:
        if choice is not None:
            raise invalid("`tool_choice` needs `tools`", "tool_choice")
        return None
    functions = [_function(tool, i) for i, tool in enumerate(tools)]
    if not functions:
        raise invalid("`tools` must list at least one function (or leave it out)", "tools")
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise invalid("`tools` names a function twice", "tools")
    picked = _choice(choice, names)
    return None if picked == "none" else ToolRequest(functions, picked)


def history_call(call: Any, where: str) -> tuple[str, Any]:
    """An assistant message's tool call: its function's name and parsed arguments."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or call.get("type", "function") != "function" or not isinstance(function, dict):
        raise invalid(f'`{where}` must be {{"id", "type": "function", "function": {{name, arguments}}}}', where)
    name, arguments = function.get("name"), function.get("arguments", "{}")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise invalid(f"`{where}.function` needs a string `name` and `arguments` (a JSON string)", where)
    try:
        return name, json.loads(arguments)
    except json.JSONDecodeError:
        raise invalid(f"`{where}.function.arguments` is not JSON", where) from None


def history_calls(message: dict[str, Any], i: int) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls`, checked: [{id, name, arguments (parsed)}]."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        raise invalid(f"`messages[{i}].tool_calls` must be a list, on an assistant message", f"messages[{i}]")
    if message.get("content"):
        raise invalid(f"`messages[{i}]` has both `content` and `tool_calls`: send one", f"messages[{i}]")
    out = []
    for j, call in enumerate(calls):
        name, arguments = history_call(call, f"messages[{i}].tool_calls[{j}]")
        out.append({"id": call.get("id"), "name": name, "arguments": arguments})
    return out


def tool_result(message: dict[str, Any], i: int) -> tuple[str, str]:
    """A `tool` message's call id and text."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise invalid(f"`messages[{i}].tool_call_id` must be the id of the call it answers", f"messages[{i}]")
    content = message.get("content") or ""
    if isinstance(content, list):  # text parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return call_id, content


def plain(message: dict[str, Any], i: int) -> dict[str, Any]:
    """A message without tool calls or results, without those keys."""
    if message.get("tool_call_id") is not None:
        raise invalid(f"`messages[{i}].tool_call_id` belongs on a `tool` message", f"messages[{i}]")
    return {k: v for k, v in message.items() if k not in ("tool_calls", "tool_call_id")}


def _function(tool: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise invalid(f'`{where}` must be {{"type": "function", "function": {{name, parameters}}}}', "tools")
    if set(tool) - {"type", "function"}:
        raise invalid(f"`{where}.{sorted(set(tool) - {'type', 'function'})[0]}` is not supported", "tools")
    function = tool["function"]
    for key in function:
        if key not in FUNCTION_KEYS:
            taken = ", ".join(f"`{k}`" for k in FUNCTION_KEYS)
            raise invalid(f"`{where}.function.{key}` is not supported (a function takes {taken})", "tools")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise invalid(f"`{where}.function.name` must be 1 to 64 letters, digits, `_` or `-` (got {name!r})", "tools")
    if not isinstance(function.get("description", ""), str):
        raise invalid(f"`{where}.function.description` must be a string", "tools")
    if not isinstance(function.get("strict", False), bool | None):
        raise invalid(f"`{where}.function.strict` must be true or false", "tools")
    parameters = function.get("parameters", NO_PARAMETERS)
    checked = checked_schema(parameters, f"{where}.function.parameters", "tools")
    if checked.get("type") != "object":
        raise invalid(f'`{where}.function.parameters` must be an object schema ("type": "object")', "tools")
    return {**function, "parameters": parameters, "checked": checked}


def _choice(choice: object, names: list[str]) -> str:
    """`auto`, `none`, `required` or the name of the one function to call."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise invalid(f"`tool_choice` must be one of {', '.join(CHOICES)} or a named function", "tool_choice")
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or set(choice) != {"type", "function"}:
        raise invalid('`tool_choice` must be a string or {"type": "function", "function": {"name": …}}', "tool_choice")
    if not isinstance(function, dict) or set(function) != {"name"} or name not in names:
        raise invalid(f"`tool_choice.function.name` must name one of the tools ({', '.join(names)})", "tool_choice")
    return str(name)
