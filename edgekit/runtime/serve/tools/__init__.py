"""Tool calls for chat: `tools` + `tool_choice` → what the prompt says about the tools and the grammar the reply
is constrained to; the reply → `message.tool_calls`.

The format follows the model's chat template (`tool_format`): its own where edgekit knows it, `hermes`
(`<tool_call>` JSON `</tool_call>`: Qwen2.5 / Qwen3, Hermes) or `llama3` (`{"name", "parameters"}`: Llama 3.1+),
where the template lists the tools and renders the history (native.py); else the generic JSON object
llama-server falls back on (generic.py). `tool_choice` picks what the grammar allows: `auto` a call of any tool
or a text reply, `required` a call of any tool, a named function a call of that one, `none` plain text (the
tools are not shown). A call comes back as `tool_calls: [{id, type: "function", function: {name, arguments}}]`
with `finish_reason: "tool_calls"`, its `arguments` a JSON string that validates against the tool's
`parameters`; a reply as `content`; cut by `max_tokens`, the text as it came (`finish_reason: "length"`, it
need not parse). One reply makes at most one call (`parallel_tool_calls` must be false when sent).
"""

from __future__ import annotations

from typing import Any

from edgekit.runtime.serve.tools import generic, hermes, llama3, native
from edgekit.runtime.serve.tools.base import ToolFormat, ToolPlan
from edgekit.runtime.serve.tools.request import tool_request

__all__ = ["ToolFormat", "ToolPlan", "plan", "reply", "tool_format", "with_tools"]

NATIVE = {ToolFormat.HERMES: hermes, ToolFormat.LLAMA3: llama3}
FORMATS = {ToolFormat.GENERIC: generic, **NATIVE}  # each has plan(request) and reply(text)


def tool_format(template: str) -> ToolFormat:
    """The tool format the chat template knows (generic when it knows none edgekit implements)."""
    return next((f for f, module in NATIVE.items() if module.uses(template)), ToolFormat.GENERIC)


def plan(tools: list[Any] | None, choice: object, parallel: bool | None, template: str) -> ToolPlan | None:
    """The plan for a chat body's `tools` and `tool_choice` (None: no tool can be called), or a 400."""
    request = tool_request(tools, choice, parallel)
    if request is None:
        return None
    return FORMATS[tool_format(template)].plan(request)


def with_tools(
    messages: list[dict[str, Any]], tool_plan: ToolPlan | None, template: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages as the chat template takes them, and the tools it is given to list (None: none)."""
    if tool_format(template) in NATIVE:
        return native.history(messages), (tool_plan.tools if tool_plan is not None else None)
    out = generic.history(messages, template)
    return (generic.with_system(out, tool_plan.system) if tool_plan is not None else out), None


def reply(tool_plan: ToolPlan, text: str, finish: str) -> tuple[dict[str, Any], str]:
    """The assistant message for a constrained reply, and its finish reason: a tool call ("tool_calls"), a text
    reply ("stop"), or, cut by max_tokens ("length"), the text as it came (it need not parse)."""
    if finish != "stop":
        return {"role": "assistant", "content": text}, finish
    return FORMATS[tool_plan.format].reply(text)
