"""Tool calls in a chat template's own format: a tiny GGUF whose template is Qwen2.5's kind (it lists the `tools`
itself and writes calls as `<tool_call>` JSON `</tool_call>`, the Hermes format), served on loopback and called
through the official `openai` SDK. The tools reach the prompt as the template lists them, a call comes back as
`tool_calls` whose arguments validate against the tool's parameters, and the history's calls and results go back
through the template's own markup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from edgekit.runtime.serve.tools import ToolFormat, plan, tool_format, with_tools
from edgekit.runtime.text import chat
from tests.support import tool_calls
from tests.support.live_serve import live_server
from tests.support.tiny_gguf import write_tiny_bundle, write_tiny_gguf
from tests.support.tool_calls import WEATHER

# The shape of Qwen2.5-Instruct's template (tools listed in the system turn, calls and results in its tags).
HERMES_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}
{%- else %}You are a helpful assistant.{%- endif %}
{{- '\\n\\n# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n\
</tool_call><|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if (message.role == 'user') or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{{- tool_call.arguments | tojson + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
MODEL = "tiny/gguf-F32"
ALARM = {
    "type": "function",
    "function": {
        "name": "set_alarm",
        "parameters": {"type": "object", "properties": {"hour": {"type": "integer"}}, "required": ["hour"]},
    },
}
TOOLS: list[Any] = [WEATHER, ALARM]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hermes")
    model = write_tiny_gguf(root / "tiny.gguf", chat_template=HERMES_TEMPLATE)
    return write_tiny_bundle(root, model, n_ctx=2048, max_request_tokens=2048)


@pytest.fixture(scope="module")
def client(bundle: Path) -> Iterator[openai.OpenAI]:
    with (
        live_server(bundle, bundle.parent / "serve.log") as url,
        openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk,
    ):
        yield sdk


def history(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
    ]


def test_the_template_lists_the_tools_and_renders_the_history_in_its_own_tags() -> None:
    assert tool_format(HERMES_TEMPLATE) == ToolFormat.HERMES
    messages, listed = with_tools(history('{"city": "Oslo", "unit": "celsius"}'), None, HERMES_TEMPLATE)
    text = chat.render(HERMES_TEMPLATE, chat.normalise_messages(messages), tools=listed)
    assert "<tools>" not in text  # tool_choice none: no tools shown
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>' in text
    )
    assert "<|im_start|>user\n<tool_response>\n18 degrees and sunny\n</tool_response><|im_end|>" in text
    messages, listed = with_tools(ASK, plan(TOOLS, "auto", None, HERMES_TEMPLATE), HERMES_TEMPLATE)
    text = chat.render(HERMES_TEMPLATE, chat.normalise_messages(messages), tools=listed)
    assert json.dumps(WEATHER, ensure_ascii=False) in text and json.dumps(ALARM) in text
    assert "Answer with one JSON object" not in text  # the generic format's instructions are not added


def test_required_named_and_auto_calls_validate(client: openai.OpenAI) -> None:
    """`required` and a named function always give a call; `auto` a call or text that is not the call's markup."""
    alarm = {"type": "function", "function": {"name": "set_alarm"}}
    for choice, names in (("required", set(PARAMETERS)), (alarm, {"set_alarm"})):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=TOOLS,
            tool_choice=choice,
            max_tokens=200,
            temperature=0,  # type: ignore[arg-type]
        )
        tool_calls.one_call(answer, names, PARAMETERS)
    for seed in range(3):
        reply = client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, max_tokens=60, temperature=1.0, seed=seed
        ).choices[0]
        if reply.finish_reason != "tool_calls":
            assert not reply.message.tool_calls and not (reply.message.content or "").startswith("<")
        else:
            tool_calls.check_call(reply.message.tool_calls[0], set(PARAMETERS), PARAMETERS)  # type: ignore[index]


def test_a_streamed_call_and_a_tool_result_round_trip(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200, temperature=0, stream=True
    )
    delta = tool_calls.streamed_call(stream, set(PARAMETERS), PARAMETERS)
    messages = history(delta.function.arguments)  # as if get_weather had been called with them
    alarm = {"type": "function", "function": {"name": "set_alarm"}}
    answer = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, tool_choice=alarm, max_tokens=200, temperature=0
    )
    tool_calls.one_call(answer, {"set_alarm"}, PARAMETERS)


def test_max_tokens_cutting_a_call_says_length(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=5, temperature=0
    )
    result = answer.choices[0]
    assert result.finish_reason == "length" and not result.message.tool_calls
    assert result.message.content and "<tool_call>".startswith(result.message.content)  # the frame, cut
