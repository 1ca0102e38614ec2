"""The Hermes tool format, native to the chat templates of Qwen2.5 / Qwen3, Hermes 2 Pro / 3 and the models
tuned on them: the template lists the tools (it is given `tools`) and says how to call one, and the model
answers with

    <tool_call>
    {"name": "<function>", "arguments": {…}}
    </tool_call>

A grammar holds the call to that frame and the JSON inside it to the function's `parameters`; with
`tool_choice: auto` the reply may instead be text that does not start with `<`. In the history, an assistant
message's `tool_calls` go to the template as they came (with `arguments` parsed, as transformers' templates
take them) and a `tool` message as a `tool` turn, which the template renders as its `<tool_response>`.
"""

from __future__ import annotations

import json
from typing import Any

from edgekit.runtime.serve.tools.base import ToolFormat, ToolPlan, call_schema, listed
from edgekit.runtime.serve.tools.reply import call_message
from edgekit.runtime.serve.tools.request import ToolRequest, history_calls, plain, tool_result

OPEN, CLOSE = "<tool_call>\n", "\n</tool_call>"
MARKER = "<tool_call>"  # a template that writes it uses this format


def uses(template: str) -> bool:
    return MARKER in template and "tools" in template


def plan(request: ToolRequest) -> ToolPlan:
    tools = [{"type": "function", "function": f} for f in listed(request.functions)]
    schema = call_schema(request.functions, request.picked)
    return ToolPlan(ToolFormat.HERMES, schema, tools=tools, free_text=request.picked == "auto")


def history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, message in enumerate(messages):
        if message.get("tool_calls") is not None:
            calls = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in history_calls(message, i)
            ]
            out.append({"role": "assistant", "content": "", "tool_calls": calls})
        elif message.get("role") == "tool":
            call_id, content = tool_result(message, i)
            out.append({"role": "tool", "content": content, "tool_call_id": call_id})
        else:
            out.append(plain(message, i))
    return out


def grammar_frame() -> tuple[str, str]:
    return OPEN, CLOSE


def reply(text: str) -> tuple[dict[str, Any], str]:
    if not text.startswith(OPEN):
        return {"role": "assistant", "content": text}, "stop"
    call = json.loads(text[len(OPEN) : len(text) - len(CLOSE)])
    return call_message(call["name"], call["arguments"])
