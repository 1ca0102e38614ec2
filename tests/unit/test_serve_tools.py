"""Tool calls through the official `openai` SDK against `edgekit serve` on loopback, on the default model
(SmolLM2-135M Q4_1, the GGUF engine): `tools` with each `tool_choice` give `tool_calls` whose `arguments`
validate against the tool's `parameters` (checked with `jsonschema`), streamed and not, sync and async; the
history's calls and `tool` results go back through the chat template; what is not implemented is a 400."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from edgekit.runtime.serve.tools import ToolFormat, plan, tool_format, with_tools
from tests.support import tool_calls
from tests.support.live_serve import live_server
from tests.support.tiny_gguf import smollm2_gguf, write_tiny_bundle
from tests.support.tool_calls import WEATHER

MODEL = "tiny/gguf-F32"
# What pydantic (and so LangChain's bind_tools) writes for a model with a nested one: $defs and a $ref.
BOOKING = {
    "type": "function",
    "function": {
        "name": "book_table",
        "description": "Book a table at a restaurant",
        "parameters": {
            "$defs": {
                "Guest": {
                    "properties": {"name": {"type": "string", "maxLength": 20}, "vegetarian": {"type": "boolean"}},
                    "required": ["name", "vegetarian"],
                    "type": "object",
                }
            },
            "properties": {
                "restaurant": {"type": "string", "maxLength": 30},
                "guests": {"type": "array", "items": {"$ref": "#/$defs/Guest"}, "minItems": 1, "maxItems": 2},
            },
            "required": ["restaurant", "guests"],
            "type": "object",
        },
    },
}
TOOLS: list[Any] = [WEATHER, BOOKING]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("tools")
    bundle = write_tiny_bundle(root, smollm2_gguf(), n_ctx=1024, max_request_tokens=1024, max_concurrent=2)
    with live_server(bundle, root / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk:
        yield sdk


def check_call(call: Any, names: set[str]) -> tuple[str, Any]:
    """A tool call of one of `names` whose arguments validate against that tool's parameters."""
    return call.function.name, tool_calls.check_call(call, names, PARAMETERS)


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", {"get_weather", "book_table"}),
        ({"type": "function", "function": {"name": "book_table"}}, {"book_table"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
    ],
)
def test_a_required_or_named_call_validates_against_its_parameters(
    client: openai.OpenAI, choice: Any, names: set[str]
) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=150, temperature=0
    )
    tool_calls.one_call(answer, names, PARAMETERS)


def test_auto_gives_a_valid_call_or_a_text_reply(client: openai.OpenAI) -> None:
    for seed in range(3):
        answer = client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, max_tokens=150, temperature=1.0, seed=seed
        )
        choice = answer.choices[0]
        if choice.finish_reason == "tool_calls":
            assert choice.message.tool_calls and choice.message.content is None
            check_call(choice.message.tool_calls[0], set(PARAMETERS))
        elif choice.finish_reason == "stop":
            assert isinstance(choice.message.content, str) and not choice.message.tool_calls
        else:  # a text reply is not bounded: max_tokens may cut its JSON
            assert choice.finish_reason == "length" and (choice.message.content or "").startswith("{")


def test_none_is_plain_text(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=12, temperature=0
    )
    plain = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=12, temperature=0)
    assert not answer.choices[0].message.tool_calls
    assert answer.choices[0].message.content == plain.choices[0].message.content  # the tools are not shown


def test_a_streamed_call_arrives_as_one_tool_call_delta(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=150, temperature=0, stream=True
    )
    tool_calls.streamed_call(stream, set(PARAMETERS), PARAMETERS)


def test_async_calls_run_concurrently_and_each_validates(url: str) -> None:
    async def run() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk:
            asks = [
                sdk.chat.completions.create(
                    model=MODEL,
                    messages=ASK,
                    tools=TOOLS,
                    tool_choice={"type": "function", "function": {"name": name}},
                    max_tokens=150,
                    temperature=1.0,
                    seed=seed,
                )
                for seed, name in enumerate(["book_table", "get_weather", "book_table"])
            ]
            return list(await asyncio.gather(*asks))

    for answer, name in zip(asyncio.run(run()), ["book_table", "get_weather", "book_table"], strict=True):
        assert answer.choices[0].finish_reason == "tool_calls"
        check_call(answer.choices[0].message.tool_calls[0], {name})


def test_a_tool_result_round_trip(client: openai.OpenAI) -> None:
    """Call, run the tool, send the call and its result back: the model answers from them."""
    first = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=150, temperature=0
    )
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    history = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"},
    ]
    answer = client.chat.completions.create(
        model=MODEL, messages=history, tools=TOOLS, tool_choice="none", max_tokens=40, temperature=0
    )
    assert answer.choices[0].finish_reason in ("stop", "length") and answer.choices[0].message.content
    again = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=150, temperature=0)
    if again.choices[0].finish_reason == "tool_calls":
        check_call(again.choices[0].message.tool_calls[0], set(PARAMETERS))  # type: ignore[index]
    else:
        assert again.choices[0].finish_reason in ("stop", "length") and again.choices[0].message.content


def test_the_history_is_rendered_for_the_template() -> None:
    """A call is the JSON the model writes; a result is a `tool` turn where the template has the role, else a
    user turn holding it; the plan's instructions join the system message."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "-3"},
    ]
    template = "{{ message['role'] }}"
    assert tool_format(template) == ToolFormat.GENERIC
    chatml, listed = with_tools(messages, plan(TOOLS, "required", None, template), template)
    assert listed is None  # the generic format describes the tools in the system message
    assert chatml[0]["role"] == "system" and chatml[0]["content"].startswith("Be brief.\n\n")
    assert '"get_weather"' in chatml[0]["content"] and "tool_call" in chatml[0]["content"]
    assert json.loads(chatml[1]["content"]) == {"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    result = {"tool_response": {"name": "get_weather", "tool_call_id": "c1", "content": "-3"}}
    assert chatml[2] == {"role": "user", "content": json.dumps(result)}
    native, _ = with_tools(messages, None, "{% if message.role == 'tool' %}")
    assert native[2] == {"role": "tool", "content": "-3"} and native[0] == {"role": "system", "content": "Be brief."}


def test_max_tokens_cutting_a_call_says_length(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=4, temperature=0
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert (choice.message.content or "").startswith("{")


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"tool_choice": "required"}, "tool_choice", "`tool_choice` needs `tools`"),
        ({"tools": TOOLS, "tool_choice": "any"}, "tool_choice", "must be one of auto, none, required"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "must name one of the tools (get_weather, book_table)",
        ),
        ({"tools": TOOLS, "parallel_tool_calls": True}, "parallel_tool_calls", "at most one tool call per reply"),
        ({"tools": []}, "tools", "at least one function"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools", '`tools[0]` must be {"type": "function"'),
        ({"tools": [WEATHER, WEATHER]}, "tools", "names a function twice"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "integer"}}}]},
            "tools",
            "must be an object schema",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
                        },
                    }
                ]
            },
            "tools",
            "`tools[0].function.parameters.properties.n.minimum` is not supported",
        ),
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format", "not both"),
        ({"tools": TOOLS, "logprobs": True}, "logprobs", "`logprobs` with `tools` is not implemented"),
        ({"tools": TOOLS, "stop": ["x"]}, "stop", "could cut the JSON"),
        ({"functions": [WEATHER["function"]]}, "functions", "the closest field edgekit takes is `tools`"),
    ],
)
def test_what_tools_do_not_implement_is_a_400_naming_it(
    url: str, extra: dict[str, Any], param: str, words: str
) -> None:
    response = httpx.post(url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, **extra}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"role": "user", "content": "hi", "tool_call_id": "c1"}, "belongs on a `tool` message"),
        ({"role": "tool", "content": "4"}, "must be the id of the call it answers"),
        ({"role": "user", "content": None, "tool_calls": []}, "on an assistant message"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}],
            },
            "`messages[0].tool_calls[0].function.arguments` is not JSON",
        ),
    ],
)
def test_bad_tool_messages_are_400s(url: str, message: dict[str, Any], words: str) -> None:
    response = httpx.post(url + "/v1/chat/completions", json={"messages": [message], "max_tokens": 2}, timeout=60)
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"]


def test_tools_are_a_chat_field(url: str) -> None:
    response = httpx.post(url + "/v1/completions", json={"prompt": "hi", "tools": TOOLS}, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools"
