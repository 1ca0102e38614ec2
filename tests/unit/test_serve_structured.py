"""Structured output through the official `openai` SDK against `edgekit serve` on loopback, on the default model
(SmolLM2-135M Q4_1, the GGUF engine): `response_format` `json_schema` and `json_object` constrain decoding, so the
answer parses and validates against the schema (checked with `jsonschema`), streamed and not, sync and async,
with several constrained streams at once; `max_tokens` cutting it says `length`. What the grammar would not
enforce is refused with a 400 naming it, as is every engine that cannot follow a grammar."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from edgekit.backends.gguf.engine import GGUFEngine
from edgekit.backends.onnxruntime.engine import ONNXRuntimeEngine
from edgekit.backends.openvino.engine import OpenVINOEngine
from edgekit.runtime.engines.base import GrammarEngine
from edgekit.runtime.serve.api_error import ApiError
from edgekit.runtime.serve.structured import require_grammar
from tests.support.live_serve import live_server
from tests.support.tiny_gguf import smollm2_gguf, write_tiny_bundle

MODEL = "tiny/gguf-F32"
MESSAGES: list[Any] = [{"role": "user", "content": "Describe the city of Paris in JSON."}]
CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "population": {"type": "integer"},
        "kind": {"enum": ["capital", "town", "village"]},
        "rivers": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 2},
    },
    "required": ["city", "population", "kind"],
    "additionalProperties": False,
}
# What pydantic writes for a model with a nested model and an optional field: $defs, $ref, anyOf with null.
PERSON = {
    "$defs": {
        "Pet": {
            "properties": {"name": {"maxLength": 12, "title": "Name", "type": "string"}, "legs": {"type": "integer"}},
            "required": ["name", "legs"],
            "title": "Pet",
            "type": "object",
        }
    },
    "properties": {
        "name": {"maxLength": 20, "title": "Name", "type": "string"},
        "adult": {"title": "Adult", "type": "boolean"},
        "pet": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}], "default": None},
    },
    "required": ["name", "adult", "pet"],
    "title": "Person",
    "type": "object",
}


JSON_OBJECT = {"type": "json_object"}


def json_schema(schema: dict[str, Any], name: str = "answer") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("structured")
    bundle = write_tiny_bundle(root, smollm2_gguf(), n_ctx=512, max_request_tokens=512, max_concurrent=3)
    with live_server(bundle, root / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk:
        yield sdk


def valid(text: str | None, schema: dict[str, Any]) -> Any:
    assert text is not None
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_answers_validate(client: openai.OpenAI, temperature: float) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=200,
        temperature=temperature,
        seed=5,
        response_format=json_schema(CITY),  # type: ignore[arg-type]
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    valid(choice.message.content, CITY)


def test_a_pydantic_style_schema_with_defs_refs_and_any_of_validates(client: openai.OpenAI) -> None:
    for seed in range(3):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Describe a person and their pet in JSON."}],
            max_tokens=200,
            temperature=1.0,
            seed=seed,
            response_format=json_schema(PERSON, "Person"),  # type: ignore[arg-type]
        )
        assert answer.choices[0].finish_reason == "stop"
        valid(answer.choices[0].message.content, PERSON)


def test_a_streamed_json_schema_answer_is_the_whole_one_in_pieces(client: openai.OpenAI) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 200,
        "temperature": 0,
        "response_format": json_schema(CITY),
    }
    whole = client.chat.completions.create(**body).choices[0].message.content
    pieces, finishes = [], []
    for chunk in client.chat.completions.create(**body, stream=True):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finishes.append(chunk.choices[0].finish_reason)
    assert len(pieces) > 3 and finishes[-1] == "stop"
    assert "".join(pieces) == whole
    valid(whole, CITY)


def test_concurrent_async_streams_each_follow_their_own_schema(url: str) -> None:
    schemas = [CITY, PERSON, {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}]

    async def one(sdk: openai.AsyncOpenAI, schema: dict[str, Any], seed: int) -> tuple[str, str | None]:
        stream = await sdk.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=200,
            temperature=1.0,
            seed=seed,
            stream=True,
            response_format=json_schema(schema),  # type: ignore[arg-type]
        )
        text, finish = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, finish

    async def run() -> list[tuple[str, str | None]]:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as sdk:
            return await asyncio.gather(*(one(sdk, s, i) for i, s in enumerate(schemas)))

    for (text, finish), schema in zip(asyncio.run(run()), schemas, strict=True):
        assert finish == "stop"
        valid(text, schema)


def test_json_object_answers_are_json_objects(client: openai.OpenAI, url: str) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Reply with a JSON object: the name and age of a person."}],
        max_tokens=150,
        temperature=0,
        response_format={"type": "json_object"},
    )
    assert answer.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(answer.choices[0].message.content or ""), dict)
    completion = httpx.post(
        url + "/v1/completions",
        json={"prompt": "A JSON object: ", "max_tokens": 150, "temperature": 0, "response_format": JSON_OBJECT},
        timeout=120,
    ).json()["choices"][0]
    assert completion["finish_reason"] == "stop" and isinstance(json.loads(completion["text"]), dict)


def test_max_tokens_cutting_the_json_says_length(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0, response_format=json_schema(CITY)
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "length" and answer.usage is not None and answer.usage.completion_tokens == 5
    assert (choice.message.content or "").startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice.message.content or "")


def test_text_is_the_no_op_it_is(client: openai.OpenAI) -> None:
    body: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    plain = client.chat.completions.create(**body).choices[0].message.content
    assert client.chat.completions.create(**body, response_format={"type": "text"}).choices[0].message.content == plain


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"response_format": {"type": "xml"}}, "response_format", "must be one of `text`, `json_object`"),
        ({"response_format": {"type": "json_object", "schema": {}}}, "response_format", "`response_format.schema`"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "description": ""}}},
            "response_format",
            "`response_format.json_schema.description` is not supported: it is not passed to the model",
        ),
        ({"response_format": {"type": "json_schema"}}, "response_format", "`response_format.json_schema` must be"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
            "response_format",
            "`response_format.json_schema.schema` is missing",
        ),
        (
            {"response_format": json_schema({"type": "integer", "minimum": 3})},
            "response_format",
            "`response_format.json_schema.schema.minimum` is not supported in a response or tool schema: number",
        ),
        (
            {"response_format": json_schema({"oneOf": [{"type": "integer"}, {"type": "number"}]})},
            "response_format",
            "use `anyOf`",
        ),
        (
            {"response_format": json_schema({"type": "string", "pattern": "^a+$"})},
            "response_format",
            "regular expressions are not implemented",
        ),
        (
            {"response_format": json_schema({"type": "object", "properties": {}, "required": ["x"]})},
            "response_format",
            "`response_format.json_schema.schema.required` names `x`, which is not in `properties`",
        ),
        (
            {"response_format": json_schema({"properties": {"a": {"type": "string", "format": "email"}}})},
            "response_format",
            "`response_format.json_schema.schema.properties.a.format` must be one of date, time",
        ),
        ({"response_format": {"type": "json_object"}, "stop": ["}"]}, "stop", "could cut the JSON the reply is"),
        ({"response_format": {"type": "json_object"}, "ignore_eos": True}, "ignore_eos", "ends it"),
        ({"json_schema": CITY}, "json_schema", "the closest field edgekit takes is `response_format`"),
    ],
)
def test_what_the_grammar_would_not_enforce_is_a_400_naming_it(
    url: str, extra: dict[str, Any], param: str, words: str
) -> None:
    response = httpx.post(
        url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4, **extra}, timeout=60
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize("param", ["response_format", "tools"])
@pytest.mark.parametrize("engine_class", [OpenVINOEngine, ONNXRuntimeEngine])
def test_engines_without_grammars_are_refused_naming_the_engine(engine_class: type, param: str) -> None:
    """The stepwise engines sample in numpy with no grammar: a structured request to them is a 400 naming them.
    (No OpenVINO or ONNX bundle is built here: the check is on the engine's class, which `parse` uses.)"""
    assert issubclass(GGUFEngine, GrammarEngine) and not issubclass(engine_class, GrammarEngine)
    engine = object.__new__(engine_class)  # an instance of the real class, nothing loaded: only its type counts
    with pytest.raises(ApiError) as info:
        require_grammar(engine, param)
    error = info.value
    assert error.status == 400 and error.param == param
    assert f"`{param}` is not supported by the {engine_class.backend} engine" in error.message


def test_a_constrained_stream_frees_its_grammar_for_the_next_request(client: openai.OpenAI) -> None:
    """A slot reused after a cut (length) constrained answer starts its grammar afresh."""
    for max_tokens in (3, 200):
        answer = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=max_tokens, temperature=0, response_format=json_schema(CITY)
        )
    assert answer.choices[0].finish_reason == "stop"
    valid(answer.choices[0].message.content, CITY)


def test_the_sdks_parse_helper_gets_its_pydantic_model(client: openai.OpenAI) -> None:
    """`client.chat.completions.parse(response_format=<pydantic model>)` sends a strict json_schema and parses."""

    class Country(BaseModel):
        name: str = Field(max_length=30)
        capital: str = Field(max_length=30)
        landlocked: bool

    answer = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe France in JSON."}],
        max_tokens=120,
        temperature=0,
        response_format=Country,
    )
    parsed = answer.choices[0].message.parsed
    assert isinstance(parsed, Country) and parsed.name and parsed.capital


def test_logprobs_of_a_constrained_answer_are_its_tokens(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=200,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        response_format=json_schema(CITY),
    )
    choice = answer.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    assert b"".join(bytes(e.bytes or []) for e in choice.logprobs.content).decode() == choice.message.content
    valid(choice.message.content, CITY)


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"$ref": "#/$defs", "$defs": {"x": {}}}, "`response_format.json_schema.schema.$ref(#/$defs).x` is not"),
        ({"$ref": "#/$defs/Nope", "$defs": {}}, "points to nothing in the schema"),
        ({"type": "object", "properties": {"a": True}}, "boolean schemas are not supported"),
        ({"type": ["string", "null"], "maxLength": 3}, "cannot be used beside a list of types"),
        ({"type": "string", "enum": ["a", 1]}, "lists 1, which is not of its type 'string'"),
        ({"type": "array", "maxItems": 2}, "schema.items` is needed with `minItems` or `maxItems`"),
    ],
)
def test_schemas_the_grammar_cannot_follow_name_the_keyword(url: str, schema: dict[str, Any], words: str) -> None:
    body = {"messages": MESSAGES, "max_tokens": 4, "response_format": json_schema(schema)}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "response_format" and words in response.json()["error"]["message"]
