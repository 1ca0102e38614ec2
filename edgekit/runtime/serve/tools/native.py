"""The history as a chat template with its own tool format takes it: an assistant message's `tool_calls` as they
came, with `arguments` parsed (as transformers passes them to templates), and a `tool` message as a `tool` turn
with its `tool_call_id`; the template renders both in its own markup."""

from __future__ import annotations

from typing import Any

from edgekit.runtime.serve.tools.request import history_calls, plain, tool_result


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
