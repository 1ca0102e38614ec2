"""Checks of the tool calls `edgekit serve` returns through the `openai` SDK, shared by the tool-format tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import jsonschema

# A tool both formats' tests call: a bounded string and an enum, so a random-weight model's call ends.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30, "description": "the city"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}


def check_call(call: Any, names: set[str], parameters: dict[str, Any]) -> Any:
    """A tool call of one of `names` whose arguments validate against that tool's parameters; its arguments."""
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in names
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, parameters[call.function.name])
    return arguments


def one_call(answer: Any, names: set[str], parameters: dict[str, Any]) -> Any:
    """A reply that is exactly one valid call (and no text); the call."""
    result = answer.choices[0]
    assert result.finish_reason == "tool_calls" and result.message.content is None
    assert result.message.tool_calls is not None and len(result.message.tool_calls) == 1
    check_call(result.message.tool_calls[0], names, parameters)
    return result.message.tool_calls[0]


def streamed_call(chunks: Iterable[Any], names: set[str], parameters: dict[str, Any]) -> Any:
    """A streamed reply whose call arrives as one delta (index 0) before the `tool_calls` finish; the delta."""
    deltas, finishes = [], []
    for chunk in chunks:
        if chunk.choices:
            deltas += chunk.choices[0].delta.tool_calls or []
            finishes.append(chunk.choices[0].finish_reason)
    assert finishes[-1] == "tool_calls" and len(deltas) == 1 and deltas[0].index == 0
    check_call(deltas[0], names, parameters)
    return deltas[0]
