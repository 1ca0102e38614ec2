"""The Hermes tool format, native to the chat templates of Qwen2.5 / Qwen3, Hermes 2 Pro / 3 and the models
tuned on them: the template lists the tools (it is given `tools`) and says how to call one, and the model
answers with

    <tool_call>
    {"name": "<function>", "arguments": {…}}
    </tool_call>

A grammar holds the call to that frame and the JSON inside it to the function's `parameters`; with
`tool_choice: auto` the reply may instead be text that does not start with `<`. The history goes to the
template as native.py passes it; the template renders a `tool` turn as its `<tool_response>`.
"""

from __future__ import annotations

import json
from typing import Any

from edgekit.runtime.serve.tools.base import ToolFormat, ToolPlan, call_schema, native_tools
from edgekit.runtime.serve.tools.reply import call_message
from edgekit.runtime.serve.tools.request import ToolRequest

OPEN, CLOSE = "<tool_call>\n", "\n</tool_call>"
MARKER = "<tool_call>"  # a template that writes it uses this format


def uses(template: str) -> bool:
    return MARKER in template and "tools" in template


def plan(request: ToolRequest) -> ToolPlan:
    schema = call_schema(request.functions, request.picked)
    text_unless = OPEN[0] if request.picked == "auto" else None
    return ToolPlan(ToolFormat.HERMES, schema, tools=native_tools(request.functions), frame=(OPEN, CLOSE),
                    text_unless=text_unless)  # fmt: skip


def reply(text: str) -> tuple[dict[str, Any], str]:
    if not text.startswith(OPEN):
        return {"role": "assistant", "content": text}, "stop"
    call = json.loads(text[len(OPEN) : len(text) - len(CLOSE)])
    return call_message(call["name"], call["arguments"])
