"""The generic tool format, for a chat template without one of its own (what llama-server falls back on): the
tools are described in the system message, and the model answers with one JSON object,
`{"tool_call": {"name", "arguments"}}` to call a tool or `{"response": "…"}` to reply in text.

In the history, an assistant message's `tool_calls` become the JSON the model would have written, and a `tool`
message its result: a `tool` turn where the chat template has that role, else a user turn holding
`{"tool_response": {"name", "tool_call_id", "content"}}`.
"""

from __future__ import annotations

import json
from typing import Any

from edgekit.runtime.serve.tools.base import ToolFormat, ToolPlan, call_schema, listed
from edgekit.runtime.serve.tools.reply import call_message
from edgekit.runtime.serve.tools.request import ToolRequest, history_calls, plain, tool_result


def plan(request: ToolRequest) -> ToolPlan:
    picked = request.picked
    call = call_schema(request.functions, picked)
    definitions = call.pop("$defs")
    reply = _wrap("tool_call", call)
    how = 'call a tool with {"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}}'
    if picked == "auto":
        reply = {"anyOf": [reply, _wrap("response", {"type": "string"})]}
        how = f'either {how}, or reply to the user with {{"response": "<your reply>"}}'
    elif picked != "required":
        how = f'call the tool `{picked}` with {{"tool_call": {{"name": "{picked}", "arguments": {{<its arguments>}}}}}}'
    tools = json.dumps(listed(request.functions))
    system = f"You can call these tools (their arguments are described as JSON schemas):\n{tools}\n\n"
    system += f"Answer with one JSON object: {how}."
    return ToolPlan(ToolFormat.GENERIC, {**reply, "$defs": definitions}, system=system)


def history(messages: list[dict[str, Any]], template: str) -> list[dict[str, Any]]:
    """The messages with their tool calls and results as text the chat template takes (role and content)."""
    tool_role = "'tool'" in template or '"tool"' in template
    names: dict[str, str] = {}  # tool_call_id → the function's name, for the results
    out = []
    for i, message in enumerate(messages):
        if message.get("tool_calls") is not None:
            calls = history_calls(message, i)
            names.update({c["id"]: c["name"] for c in calls if isinstance(c["id"], str)})
            lines = [json.dumps({"tool_call": {"name": c["name"], "arguments": c["arguments"]}}) for c in calls]
            out.append({"role": "assistant", "content": "\n".join(lines)})
        elif message.get("role") == "tool":
            call_id, content = tool_result(message, i)
            if tool_role:
                out.append({"role": "tool", "content": content})
            else:
                result = {"name": names.get(call_id, ""), "tool_call_id": call_id, "content": content}
                out.append({"role": "user", "content": json.dumps({"tool_response": result})})
        else:
            out.append(plain(message, i))
    return out


def with_system(messages: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    """The plan's instructions joined to the system message (or as the first one)."""
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{system}"}, *messages[1:]]
    return [{"role": "system", "content": system}, *messages]


def reply(text: str) -> tuple[dict[str, Any], str]:
    value = json.loads(text)
    if "response" in value:
        return {"role": "assistant", "content": value["response"]}, "stop"
    return call_message(value["tool_call"]["name"], value["tool_call"]["arguments"])


def _wrap(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: schema}, "required": [key], "additionalProperties": False}
