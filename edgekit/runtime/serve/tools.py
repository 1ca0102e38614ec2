"""Tool calls for chat: `tools` + `tool_choice` → a system message describing the tools and a JSON schema the
reply is constrained to (`structured`), and the reply → `message.tool_calls`.

Every model gets one generic format, the one llama-server falls back on for a chat template without a tool
format of its own: the model answers with one JSON object, `{"tool_call": {"name", "arguments"}}` to call a
tool or `{"response": "…"}` to reply in text, and a grammar built from the tools' `parameters` schemas makes
sure it does. `tool_choice` picks the schema: `auto` either of the two, `required` a call of any tool, a named
function a call of that one, `none` plain text (the tools are not shown). A call comes back as
`tool_calls: [{id, type: "function", function: {name, arguments}}]` with `finish_reason: "tool_calls"`, its
`arguments` a JSON string that validates against the tool's `parameters`; a reply as `content`. Native tool
formats of chat templates (Hermes' `<tool_call>`, Llama 3's, …) are not implemented, and one reply makes at most
one call (`parallel_tool_calls` must be false when sent).

In the history, an assistant message's `tool_calls` are rendered as the JSON the model would have written, and a
`tool` message (`tool_call_id`) as the tool's result: a `tool` turn where the chat template has that role, else a
user turn holding `{"tool_response": {"name", "tool_call_id", "content"}}`.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from edgekit.runtime.serve.api_error import invalid
from edgekit.runtime.serve.json_schema_checks import checked_schema

CHOICES = ("auto", "none", "required")
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FUNCTION_KEYS = ("name", "description", "parameters", "strict")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolPlan:
    """What a request's tools add: a system text for the prompt, and the schema of the reply."""

    system: str
    schema: dict[str, Any]


def plan(tools: list[Any] | None, choice: object, parallel: bool | None) -> ToolPlan | None:
    """The plan for a chat body's `tools` and `tool_choice` (None: no tool can be called), or a 400."""
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
    if picked == "none":
        return None
    calls = [_call_schema(f["name"]) for f in functions if picked in ("auto", "required", f["name"])]
    reply = _wrap("tool_call", calls[0] if len(calls) == 1 else {"anyOf": calls})
    how = 'call a tool with {"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}}'
    if picked == "auto":
        reply = {"anyOf": [reply, _wrap("response", {"type": "string"})]}
        how = f'either {how}, or reply to the user with {{"response": "<your reply>"}}'
    elif picked != "required":
        how = f'call the tool `{picked}` with {{"tool_call": {{"name": "{picked}", "arguments": {{<its arguments>}}}}}}'
    definitions = {}
    for f in functions:
        key = _definition(f["name"])
        definitions[key] = _rerooted(f["checked"], f"#/$defs/{key}/")
    listed = json.dumps([{k: f[k] for k in ("name", "description", "parameters") if k in f} for f in functions])
    system = f"You can call these tools (their arguments are described as JSON schemas):\n{listed}\n\n"
    return ToolPlan(system=system + f"Answer with one JSON object: {how}.", schema={**reply, "$defs": definitions})


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


def _call_schema(name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": {"$ref": f"#/$defs/{_definition(name)}"}},
        "required": ["name", "arguments"],
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


def _wrap(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: schema}, "required": [key], "additionalProperties": False}


def with_tools(messages: list[dict[str, Any]], tool_plan: ToolPlan | None, template: str) -> list[dict[str, Any]]:
    """The messages as the chat template takes them (role and text content): the history's tool calls and
    results rendered as text, and the plan's system text first."""
    tool_role = "'tool'" in template or '"tool"' in template
    names: dict[str, str] = {}  # tool_call_id → the function's name, for the results
    out = [_rendered(m, i, names, tool_role) for i, m in enumerate(messages)]
    if tool_plan is None:
        return out
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        return [{"role": "system", "content": f"{out[0]['content']}\n\n{tool_plan.system}"}, *out[1:]]
    return [{"role": "system", "content": tool_plan.system}, *out]


def _rendered(message: dict[str, Any], i: int, names: dict[str, str], tool_role: bool) -> dict[str, Any]:
    calls, call_id = message.get("tool_calls"), message.get("tool_call_id")
    role = message.get("role")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise invalid(f"`messages[{i}].tool_calls` must be a list, on an assistant message", f"messages[{i}]")
        if message.get("content"):
            raise invalid(f"`messages[{i}]` has both `content` and `tool_calls`: send one", f"messages[{i}]")
        lines = [json.dumps({"tool_call": _history_call(c, i, j, names)}) for j, c in enumerate(calls)]
        return {"role": "assistant", "content": "\n".join(lines)}
    if role == "tool":
        if not isinstance(call_id, str):
            raise invalid(f"`messages[{i}].tool_call_id` must be the id of the call it answers", f"messages[{i}]")
        content = message.get("content") or ""
        if isinstance(content, list):  # text parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if tool_role:
            return {"role": "tool", "content": content}
        result = {"name": names.get(call_id, ""), "tool_call_id": call_id, "content": content}
        return {"role": "user", "content": json.dumps({"tool_response": result})}
    if call_id is not None:
        raise invalid(f"`messages[{i}].tool_call_id` belongs on a `tool` message", f"messages[{i}]")
    return {k: v for k, v in message.items() if k not in ("tool_calls", "tool_call_id")}


def _history_call(call: Any, i: int, j: int, names: dict[str, str]) -> dict[str, Any]:
    where = f"messages[{i}].tool_calls[{j}]"
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or call.get("type", "function") != "function" or not isinstance(function, dict):
        raise invalid(f'`{where}` must be {{"id", "type": "function", "function": {{name, arguments}}}}', where)
    name, arguments = function.get("name"), function.get("arguments", "{}")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise invalid(f"`{where}.function` needs a string `name` and `arguments` (a JSON string)", where)
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        raise invalid(f"`{where}.function.arguments` is not JSON", where) from None
    if isinstance(call.get("id"), str):
        names[call["id"]] = name
    return {"name": name, "arguments": parsed}


def reply(text: str, finish: str) -> tuple[dict[str, Any], str]:
    """The assistant message for a constrained reply, and its finish reason: a tool call ("tool_calls"), a text
    reply ("stop"), or, cut by max_tokens ("length"), the text as it came (it need not parse)."""
    if finish != "stop":
        return {"role": "assistant", "content": text}, finish
    value = json.loads(text)
    if "response" in value:
        return {"role": "assistant", "content": value["response"]}, "stop"
    call = value["tool_call"]
    function = {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}
    tool_call = {"id": "call_" + uuid.uuid4().hex[:24], "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}, "tool_calls"
