"""The Llama 3.1 / 3.2 / 3.3 tool format, native to Meta's chat templates: the template lists the tools (it is
given `tools`; by default in the first user turn) and asks for a call as one JSON object,

    {"name": "<function>", "parameters": {…}}

which a grammar holds to the function's `parameters` schema; with `tool_choice: auto` the reply may instead be
text that does not start with `{`. The history goes to the template as native.py passes it; the template
renders a `tool` turn as its `ipython` turn. Llama 3's built-in tools (`<|python_tag|>`, brave_search, …) are
not offered.
"""

from __future__ import annotations

import json
from typing import Any

from edgekit.runtime.serve.tools.base import ToolFormat, ToolPlan, call_schema, native_tools
from edgekit.runtime.serve.tools.reply import call_message
from edgekit.runtime.serve.tools.request import ToolRequest

ARGUMENTS = "parameters"


def uses(template: str) -> bool:
    """Meta's templates: they write calls as `"parameters": …` and results as `ipython` turns."""
    return f'"{ARGUMENTS}": ' in template and "ipython" in template and "tools" in template


def plan(request: ToolRequest) -> ToolPlan:
    schema = call_schema(request.functions, request.picked, arguments_key=ARGUMENTS)
    text_unless = "{" if request.picked == "auto" else None
    return ToolPlan(ToolFormat.LLAMA3, schema, tools=native_tools(request.functions), text_unless=text_unless)


def reply(text: str) -> tuple[dict[str, Any], str]:
    if not text.startswith("{"):
        return {"role": "assistant", "content": text}, "stop"
    call = json.loads(text)
    return call_message(call["name"], call[ARGUMENTS])
