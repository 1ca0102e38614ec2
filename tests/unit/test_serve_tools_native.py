"""Tool calls in a chat template's own format, for each format edgekit knows: a tiny GGUF whose template is
Qwen2.5's kind (it lists the `tools` itself and writes calls as `<tool_call>` JSON `</tool_call>`, the Hermes
format) or Llama 3.1's (`{"name", "parameters"}`, results as `ipython` turns), served on loopback and called
through the official `openai` SDK. The tools reach the prompt as the template lists them, a call comes back as
`tool_calls` whose arguments validate against the tool's parameters, and the history's calls and results go back
through the template's own markup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
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
# The shape of Llama-3.1/3.2-Instruct's template (tools in the first user turn, results as ipython turns).
LLAMA3_TEMPLATE = """\
{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
{%- set system_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}
{%- if tools_in_user_message and not tools is none %}
{%- set first_user_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}
{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, please respond with a JSON for a \
function call with its proper arguments that best answers the given prompt.\\n\\n' }}
{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{{- 'Do not use variables.\\n\\n' }}
{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}
{{- first_user_message + '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
{%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- elif 'tool_calls' in message %}
{%- set tool_call = message.tool_calls[0].function %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + tool_call.name + '", "parameters": ' }}
{{- tool_call.arguments | tojson + '}<|eot_id|>' }}
{%- elif message.role == 'tool' or message.role == 'ipython' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}
{%- if message.content is mapping or message.content is iterable %}{{- message.content | tojson }}
{%- else %}{{- message.content }}{%- endif %}
{{- '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
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


@dataclass(frozen=True)
class Native:
    """A format's template and what it writes for the history of `history()` and the tools."""

    template: str
    format: ToolFormat
    call: str  # the history's call, as the template renders it
    result: str  # the tool's result, as the template renders it
    tools_listed: str  # WEATHER as the template lists it
    opening: str  # how a call starts


FORMATS = {
    "hermes": Native(
        HERMES_TEMPLATE,
        ToolFormat.HERMES,
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>',
        "<|im_start|>user\n<tool_response>\n18 degrees and sunny\n</tool_response><|im_end|>",
        json.dumps(WEATHER, ensure_ascii=False),
        "<tool_call>",
    ),
    "llama3": Native(
        LLAMA3_TEMPLATE,
        ToolFormat.LLAMA3,
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Oslo", '
        '"unit": "celsius"}}<|eot_id|>',
        '<|start_header_id|>ipython<|end_header_id|>\n\n"18 degrees and sunny"<|eot_id|>',
        json.dumps(WEATHER, ensure_ascii=False, indent=4),
        "{",
    ),
}


@pytest.fixture(scope="module", params=list(FORMATS))
def native(request: pytest.FixtureRequest) -> Native:
    return FORMATS[request.param]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, native: Native) -> Path:
    root = tmp_path_factory.mktemp(native.format.value)
    model = write_tiny_gguf(root / "tiny.gguf", chat_template=native.template)
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


def test_the_template_lists_the_tools_and_renders_the_history_in_its_own_markup(native: Native) -> None:
    template = native.template
    assert tool_format(template) == native.format
    messages, listed = with_tools(history('{"city": "Oslo", "unit": "celsius"}'), None, template)
    text = chat.render(template, chat.normalise_messages(messages), tools=listed)
    assert native.tools_listed not in text  # tool_choice none: the tools are not shown
    assert native.call in text and native.result in text
    messages, listed = with_tools(ASK, plan(TOOLS, "auto", None, template), template)
    text = chat.render(template, chat.normalise_messages(messages), tools=listed)
    assert native.tools_listed in text and "set_alarm" in text
    assert "Answer with one JSON object" not in text  # the generic format's instructions are not added


def test_required_named_and_auto_calls_validate(client: openai.OpenAI, native: Native) -> None:
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
            assert not reply.message.tool_calls and not (reply.message.content or "").startswith(native.opening[0])
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


def test_max_tokens_cutting_a_call_says_length(client: openai.OpenAI, native: Native) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=5, temperature=0
    )
    result = answer.choices[0]
    assert result.finish_reason == "length" and not result.message.tool_calls
    assert result.message.content and result.message.content.startswith(native.opening[:5])  # the call, cut
