"""LangChain's `ChatOpenAI` (langchain-openai) pointed at `edgekit serve` on loopback, on the default model
(SmolLM2-135M Q4_1, the GGUF engine): `with_structured_output` (its `json_schema` method, a `response_format`,
and its `function_calling` method, a named tool with `parallel_tool_calls: false`) gives the pydantic model,
and `bind_tools` gives tool calls that go round with a `ToolMessage`, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Literal

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.support.live_serve import live_server
from tests.support.tiny_gguf import smollm2_gguf, write_tiny_bundle

MODEL = "tiny/gguf-F32"


class City(BaseModel):
    """A city and its country."""

    name: str = Field(max_length=30, description="the city's name")
    country: str = Field(max_length=30)
    size: Literal["small", "large"]


class GetWeather(BaseModel):
    """The current weather in a city."""

    city: str = Field(max_length=30)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("langchain")
    bundle = write_tiny_bundle(root, smollm2_gguf(), n_ctx=1024, max_request_tokens=1024, max_concurrent=2)
    with live_server(bundle, root / "serve.log") as base:
        yield base


def chat(url: str) -> ChatOpenAI:
    return ChatOpenAI(base_url=url + "/v1", api_key="none", model=MODEL, temperature=0, max_tokens=120, max_retries=0)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output_gives_the_model(url: str, method: str) -> None:
    structured = chat(url).with_structured_output(City, method=method)  # type: ignore[arg-type]
    city = structured.invoke("Name the capital of France as JSON.")
    assert isinstance(city, City) and city.name and city.size in ("small", "large")


def test_async_structured_output(url: str) -> None:
    structured = chat(url).with_structured_output(City, method="json_schema")

    async def run() -> list[object]:
        asks = [structured.ainvoke(f"Describe {place} as JSON.") for place in ("Paris", "Oslo")]
        return list(await asyncio.gather(*asks))

    assert all(isinstance(city, City) for city in asyncio.run(run()))


def test_bind_tools_round_trip(url: str) -> None:
    llm = chat(url).bind_tools([GetWeather], tool_choice="GetWeather")
    ask = HumanMessage("What is the weather in Paris?")
    reply = llm.invoke([ask])
    assert len(reply.tool_calls) == 1  # type: ignore[attr-defined]
    call = reply.tool_calls[0]  # type: ignore[attr-defined]
    assert call["name"] == "GetWeather" and GetWeather.model_validate(call["args"]).city
    result = ToolMessage("18 degrees and sunny", tool_call_id=call["id"])
    answer = chat(url).bind_tools([GetWeather], tool_choice="none").invoke([ask, reply, result])
    assert isinstance(answer.content, str) and answer.content and not answer.tool_calls  # type: ignore[attr-defined]
