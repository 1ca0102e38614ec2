"""Tool calls for chat: `tools` + `tool_choice` → what the prompt says about the tools and the grammar the reply
is constrained to; the reply → `message.tool_calls`.

The format follows the model's chat template (`tool_format`): `hermes` when the template has one
(`<tool_call>` JSON `</tool_call>`, as Qwen2.5 / Qwen3 and Hermes write it: hermes.py), else the generic JSON
object llama-server falls back on (generic.py). `tool_choice` picks what the grammar allows: `auto` a call of
any tool or a text reply, `required` a call of any tool, a named function a call of that one, `none` plain text
(the tools are not shown). A call comes back as `tool_calls: [{id, type: "function", function: {name,
arguments}}]` with `finish_reason: "tool_calls"`, its `arguments` a JSON string that validates against the
tool's `parameters`; a reply as `content`; cut by `max_tokens`, the text as it came (`finish_reason: "length"`,
it need not parse). One reply makes at most one call (`parallel_tool_calls` must be false when sent). The
history's calls and `tool` results go back through the same format.
"""

from __future__ import annotations

from typing import Any

from edgekit.runtime.serve.tools import generic, hermes
from edgekit.runtime.serve.tools.base import ToolFormat, ToolPlan
from edgekit.runtime.serve.tools.request import tool_request

__all__ = ["ToolFormat", "ToolPlan", "grammar_frame", "plan", "reply", "tool_format", "with_tools"]


def tool_format(template: str) -> ToolFormat:
    """The tool format the chat template knows (generic when it knows none)."""
    return ToolFormat.HERMES if hermes.uses(template) else ToolFormat.GENERIC


def plan(tools: list[Any] | None, choice: object, parallel: bool | None, template: str) -> ToolPlan | None:
    """The plan for a chat body's `tools` and `tool_choice` (None: no tool can be called), or a 400."""
    request = tool_request(tools, choice, parallel)
    if request is None:
        return None
    return hermes.plan(request) if tool_format(template) == ToolFormat.HERMES else generic.plan(request)


def with_tools(
    messages: list[dict[str, Any]], tool_plan: ToolPlan | None, template: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages as the chat template takes them, and the tools it is given to list (None: none)."""
    if tool_format(template) == ToolFormat.HERMES:
        return hermes.history(messages), (tool_plan.tools if tool_plan is not None else None)
    out = generic.history(messages, template)
    return (generic.with_system(out, tool_plan.system) if tool_plan is not None else out), None


def grammar_frame(tool_plan: ToolPlan) -> tuple[str, str] | None:
    """The literal text around the JSON value the grammar constrains (None: the value is the whole reply)."""
    return hermes.grammar_frame() if tool_plan.format == ToolFormat.HERMES else None


def reply(tool_plan: ToolPlan, text: str, finish: str) -> tuple[dict[str, Any], str]:
    """The assistant message for a constrained reply, and its finish reason: a tool call ("tool_calls"), a text
    reply ("stop"), or, cut by max_tokens ("length"), the text as it came (it need not parse)."""
    if finish != "stop":
        return {"role": "assistant", "content": text}, finish
    return hermes.reply(text) if tool_plan.format == ToolFormat.HERMES else generic.reply(text)
