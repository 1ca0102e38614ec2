"""The assistant message of a tool call, as OpenAI's API gives it."""

from __future__ import annotations

import json
import uuid
from typing import Any


def call_message(name: str, arguments: Any) -> tuple[dict[str, Any], str]:
    """`tool_calls: [{id, type: "function", function: {name, arguments}}]` (`arguments` a JSON string), and the
    finish reason `tool_calls`."""
    function = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
    tool_call = {"id": "call_" + uuid.uuid4().hex[:24], "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}, "tool_calls"
