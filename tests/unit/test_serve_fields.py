"""No request field is dropped without a word: `edgekit serve` on loopback (a child process, the tiny GGUF bundle)
refuses every field it does not implement with a 400 in OpenAI's error shape naming the field, and keeps taking
the ones it does. The table in docs/box.md lists exactly the schema's fields."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgekit.runtime.serve.schema import UNSUPPORTED, ChatBody, CompletionBody, Endpoint
from tests.support.live_serve import live_server
from tests.support.tiny_gguf import write_tiny_bundle, write_tiny_gguf

MODEL = "tiny/gguf-F32"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "box.md"
USER = [{"role": "user", "content": "hi"}]
BASE: dict[Endpoint, dict[str, Any]] = {
    Endpoint.COMPLETIONS: {"prompt": "the cat", "max_tokens": 2},
    Endpoint.CHAT: {"messages": USER, "max_tokens": 2},
}
# A value of the shape OpenAI's API (or llama-server's) takes for the field: refused for what it is, not its type.
VALUES: dict[str, object] = {
    "response_format": {"type": "json_object"},
    "functions": [{"name": "f", "parameters": {"type": "object"}}],
    "logit_bias": {"50256": -100},
    "echo": True,
    "user": "someone",
}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("serve-fields")
    bundle = write_tiny_bundle(root, write_tiny_gguf(root / "tiny.gguf"))
    with live_server(bundle, root / "serve.log") as base:
        yield base


def post(url: str, endpoint: Endpoint, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + endpoint, json=body, timeout=60)


def refusal(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == status
    return error


@pytest.mark.parametrize("endpoint", list(Endpoint))
@pytest.mark.parametrize("field", sorted(UNSUPPORTED))
def test_each_unsupported_field_is_a_400_naming_it(url: str, endpoint: Endpoint, field: str) -> None:
    error = refusal(post(url, endpoint, {**BASE[endpoint], field: VALUES.get(field, 1)}))
    assert error["param"] == field
    assert f"`{field}` is not supported in {endpoint}: {UNSUPPORTED[field].why}" in error["message"]
    instead = UNSUPPORTED[field].instead
    if instead is not None:
        assert f"the closest field edgekit takes is `{instead}`" in error["message"]


@pytest.mark.parametrize(
    ("field", "guess"), [("frobnicate", None), ("temprature", "temperature"), ("max_token", "max_tokens")]
)
@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_an_unknown_field_is_a_400_with_did_you_mean(
    url: str, endpoint: Endpoint, field: str, guess: str | None
) -> None:
    error = refusal(post(url, endpoint, {**BASE[endpoint], field: 1}))
    assert error["param"] == field and f"`{field}` is not a field of {endpoint}" in error["message"]
    assert ("did you mean" in error["message"]) == (guess is not None)
    if guess:
        assert f"did you mean `{guess}`?" in error["message"]
    assert "`max_tokens`" in error["message"]  # the fields it takes are listed


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("n", 2, "n = 1"),
        ("presence_penalty", 0.5, "repetition penalties are not implemented"),
        ("frequency_penalty", -1, "repetition penalties are not implemented"),
        ("stream_options", {"include_usage": True, "continuous_usage_stats": True}, "continuous_usage_stats"),
    ],
)
def test_a_field_taken_only_at_its_no_op_value_refuses_others(url: str, field: str, value: object, words: str) -> None:
    error = refusal(post(url, Endpoint.COMPLETIONS, {**BASE[Endpoint.COMPLETIONS], field: value}))
    assert error["param"] == field and words in error["message"]


@pytest.mark.parametrize(
    ("message", "param", "words"),
    [
        ({"role": "user", "content": "hi", "name": "bob"}, "messages[0].name", "participant names"),
        ({"role": "assistant", "content": None, "function_call": {}}, "messages[0].function_call", "deprecated"),
        ({"role": "user", "content": "hi", "colour": "red"}, "messages[0].colour", "takes `role`, `content`"),
        ({"content": "hi"}, "messages[0].role", "`messages[0].role` must be one of"),
    ],
)
def test_an_unknown_message_key_is_a_400_naming_it(url: str, message: dict[str, Any], param: str, words: str) -> None:
    error = refusal(post(url, Endpoint.CHAT, {"messages": [message], "max_tokens": 2}))
    assert error["param"] == param and param.split(".")[-1] in error["message"] and words in error["message"]


def test_a_text_part_with_another_key_is_refused(url: str) -> None:
    part = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    error = refusal(post(url, Endpoint.CHAT, {"messages": [{"role": "user", "content": [part]}], "max_tokens": 2}))
    assert error["param"] == "messages" and "cache_control" in error["message"]


def test_another_model_is_a_404_naming_the_one_served(url: str) -> None:
    error = refusal(post(url, Endpoint.CHAT, {**BASE[Endpoint.CHAT], "model": "gpt-4o"}), status=404)
    assert error["param"] == "model" and "gpt-4o" in error["message"] and MODEL in error["message"]


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_every_supported_field_still_works(url: str, endpoint: Endpoint) -> None:
    body = {
        **BASE[endpoint],
        "model": MODEL,
        "max_tokens": 3,
        "max_completion_tokens": 3,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["@@@@"],
        "stream": False,
        "ignore_eos": True,
        "n": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        **({"logprobs": 1} if endpoint == Endpoint.COMPLETIONS else {"logprobs": True, "top_logprobs": 1}),
    }
    response = post(url, endpoint, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == MODEL and answer["usage"]["completion_tokens"] == 3  # ignore_eos: exactly max_tokens
    assert answer["choices"][0]["logprobs"] is not None
    again = post(url, endpoint, body).json()["choices"][0]  # the same seed: the same sample
    first = answer["choices"][0]
    assert again.get("text", again.get("message")) == first.get("text", first.get("message"))


def test_two_different_token_limits_are_refused(url: str) -> None:
    error = refusal(post(url, Endpoint.CHAT, {**BASE[Endpoint.CHAT], "max_tokens": 2, "max_completion_tokens": 3}))
    assert error["param"] == "max_tokens" and "max_completion_tokens" in error["message"]


@pytest.mark.parametrize("endpoint", list(Endpoint))
def test_include_usage_sends_a_last_chunk_with_the_usage_and_no_choices(url: str, endpoint: Endpoint) -> None:
    body = {**BASE[endpoint], "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + endpoint, json=body, timeout=60) as response:
        events = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] >= 1
    assert json.loads(events[-3])["choices"][0]["finish_reason"] in ("length", "stop")
    error = refusal(post(url, endpoint, {**BASE[endpoint], "stream_options": {"include_usage": True}}))
    assert error["param"] == "stream_options" and "streamed" in error["message"]


def _docs_table() -> dict[str, tuple[str, str]]:
    """docs/box.md's field table: field → (endpoint column, edgekit column)."""
    section = DOCS.read_text(encoding="utf-8").split("### The request fields serve takes", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| [^|]+ \| [^|]+ \| ([^|]+) \|$", section, flags=re.M)
    return {field: (where, edgekit.strip()) for field, where, edgekit in rows}


def test_the_docs_table_lists_exactly_the_schema_fields() -> None:
    table = _docs_table()
    taken = {f: w for f, (w, e) in table.items() if not e.startswith("**no**")}
    refused = {f for f, (_, e) in table.items() if e.startswith("**no**")}
    completions, chat = set(CompletionBody.model_fields), set(ChatBody.model_fields)
    assert {f for f, w in taken.items() if w in ("both", "completions")} == completions
    assert {f for f, w in taken.items() if w in ("both", "chat")} == chat
    assert refused == set(UNSUPPORTED)
