"""The request bodies `serve` takes: one pydantic model per endpoint, `extra="forbid"` and strict types.

A field edgekit does not implement is refused with a 400 that names it (`param`), says why, and points to the
closest field edgekit does take where there is one: nothing a client sends is dropped without a word. Fields
edgekit implements only at their no-op value (`n`, the repetition penalties) take that value and refuse others.
`UNSUPPORTED` lists what OpenAI's API and llama-server's take that edgekit does not; docs/box.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from edgekit._util.suggest import did_you_mean

MAX_STOP = 4
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat's top_logprobs (5 for completions' logprobs; edgekit takes 20)
_STRICT = ConfigDict(extra="forbid", strict=True)
_SHOWN_VALUE = 60  # characters of a bad value quoted back in an error


class Endpoint(StrEnum):
    COMPLETIONS = "/v1/completions"
    CHAT = "/v1/chat/completions"


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = Field(False, description="true or false")


class Message(BaseModel):
    """One chat message. Content parts are checked by `edgekit.runtime.text.chat.normalise_messages`."""

    model_config = _STRICT
    role: str = Field(description="one of system, user, assistant, tool, developer")
    content: str | list[dict[str, Any]] | None = Field("", description="a string, or a list of text parts")
    tool_calls: list[dict[str, Any]] | None = Field(None, description="an assistant's list of tool calls")
    tool_call_id: str | None = Field(None, description="on a `tool` message: the id of the call it answers")


class _Body(BaseModel):
    """The fields both endpoints take."""

    model_config = _STRICT
    model: str | None = Field(None, description="the id GET /v1/models lists")
    max_tokens: int | None = Field(None, ge=1, description="a positive integer")
    max_completion_tokens: int | None = Field(None, ge=1, description="a positive integer")
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False, description="a number from 0 to 2")
    top_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, description="a number from 0 to 1")
    seed: int | None = Field(None, ge=0, lt=2**63, description="an integer from 0 to 2^63-1")
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = Field(
        None, description=f"a string or a list of at most {MAX_STOP} strings"
    )
    stream: bool = Field(False, description="true or false")
    stream_options: StreamOptions | None = Field(None, description='{"include_usage": true or false}')
    ignore_eos: bool = Field(False, description="true or false")
    n: int | None = Field(None, ge=1, le=1, description="1: only n = 1 is supported (one choice per request)")
    presence_penalty: float | None = Field(None, ge=0, le=0, description="0: repetition penalties are not implemented")
    frequency_penalty: float | None = Field(None, ge=0, le=0, description="0: repetition penalties are not implemented")
    response_format: dict[str, Any] | None = Field(
        None, description='an object: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", …}'
    )


class CompletionBody(_Body):
    prompt: str | list[str] = Field(description="a non-empty string")
    logprobs: int | None = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, description=f"an integer from 0 to {MAX_TOP_LOGPROBS} (alternatives per token)"
    )


class ChatBody(_Body):
    messages: list[Message] = Field(description="a non-empty list of {role, content} messages")
    logprobs: bool | None = Field(None, description="true or false")
    top_logprobs: int | None = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, description=f"an integer from 0 to {MAX_TOP_LOGPROBS} (with `logprobs`: true)"
    )
    tools: list[Any] | None = Field(None, description='a list of {"type": "function", "function": {…}}')
    tool_choice: str | dict[str, Any] | None = Field(
        None, description='"auto", "none", "required" or {"type": "function", "function": {"name": …}}'
    )
    parallel_tool_calls: bool | None = Field(None, description="false: at most one tool call per reply")


Body = CompletionBody | ChatBody
BODIES: dict[Endpoint, type[CompletionBody] | type[ChatBody]] = {
    Endpoint.COMPLETIONS: CompletionBody,
    Endpoint.CHAT: ChatBody,
}


@dataclass(frozen=True)
class Unsupported:
    """A field of OpenAI's or llama-server's API that edgekit does not implement: why, and what to use instead."""

    why: str
    instead: str | None = None


_STRUCTURED = Unsupported(
    "it is llama-server's own field; edgekit takes structured output as OpenAI's `response_format`",
    instead="response_format",
)
_FUNCTIONS = Unsupported("it is OpenAI's deprecated form of tool calls", instead="tools")
_SAMPLER = Unsupported("only temperature and nucleus sampling are implemented", instead="top_p")
_PENALTY = Unsupported("repetition penalties are not implemented")
_PLATFORM = Unsupported("it is a feature of OpenAI's platform, not of a model server")

UNSUPPORTED: dict[str, Unsupported] = {
    "n_probs": Unsupported("it is llama-server's name for the alternatives per token", instead="logprobs"),
    "json_schema": _STRUCTURED,
    "grammar": _STRUCTURED,
    "functions": _FUNCTIONS,
    "function_call": Unsupported("it is OpenAI's deprecated form of tool calls", instead="tool_choice"),
    "logit_bias": Unsupported("logit biases are not implemented"),
    "echo": Unsupported("echoing the prompt is not implemented"),
    "best_of": Unsupported("only one candidate is generated per request", instead="n"),
    "suffix": Unsupported("insertion (a suffix after the completion) is not implemented"),
    "top_k": _SAMPLER,
    "min_p": _SAMPLER,
    "typical_p": _SAMPLER,
    "mirostat": _SAMPLER,
    "dynatemp_range": _SAMPLER,
    "repeat_penalty": _PENALTY,
    "repeat_last_n": _PENALTY,
    "n_predict": Unsupported("it is llama-server's name for the token limit", instead="max_tokens"),
    "cache_prompt": Unsupported("the server reuses prompt prefixes by itself (runtime.toml `prefix_cache`)"),
    "user": _PLATFORM,
    "store": _PLATFORM,
    "metadata": _PLATFORM,
    "service_tier": _PLATFORM,
    "prediction": _PLATFORM,
    "modalities": Unsupported("this server generates text only"),
    "audio": Unsupported("this server generates text only"),
    "reasoning_effort": Unsupported("reasoning controls are not implemented"),
    "web_search_options": _PLATFORM,
}

# Message keys of OpenAI's API that edgekit's chat does not implement.
UNSUPPORTED_MESSAGE_KEYS: dict[str, Unsupported] = {
    "name": Unsupported("participant names are not passed to the chat template"),
    "function_call": Unsupported("it is OpenAI's deprecated form of tool calls", instead="tool_calls"),
    "refusal": Unsupported("refusals are not implemented"),
    "audio": Unsupported("this server takes text only"),
}


@dataclass(frozen=True)
class FieldProblem:
    """Why a body was refused: the field (`param`, as OpenAI names it: `messages[0].name`) and the message."""

    param: str
    message: str


def validate(endpoint: Endpoint, body: dict[str, Any]) -> Body | FieldProblem:
    """The typed body, or the first problem with it (an unsupported field before a bad value)."""
    try:
        return BODIES[endpoint].model_validate(body)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        return _problem(endpoint, errors[0])


def _problem(endpoint: Endpoint, error: ErrorDetails) -> FieldProblem:
    loc = error["loc"]
    if loc[0] == "messages" and len(loc) >= 3 and isinstance(loc[1], int):
        param, key = f"messages[{loc[1]}].{loc[2]}", str(loc[2])
        if error["type"] == "extra_forbidden":
            return FieldProblem(param, _unsupported(param, key, UNSUPPORTED_MESSAGE_KEYS, Message, "a message"))
        return FieldProblem(param, _bad_value(param, Message.model_fields[key].description, error))
    if loc[0] == "messages" and len(loc) == 2:  # a message that is not an object
        return FieldProblem(f"messages[{loc[1]}]", f"`messages[{loc[1]}]` must be a {{role, content}} object")
    field, body = str(loc[0]), BODIES[endpoint]
    if error["type"] == "extra_forbidden" and len(loc) == 1:
        return FieldProblem(field, _unsupported(field, field, UNSUPPORTED, body, endpoint))
    if error["type"] == "extra_forbidden" and field == "stream_options":
        param = f"{field}.{loc[-1]}"
        return FieldProblem(field, _unsupported(param, str(loc[-1]), {}, StreamOptions, "`stream_options`"))
    return FieldProblem(field, _bad_value(field, body.model_fields[field].description, error))


def _unsupported(param: str, key: str, known: dict[str, Unsupported], model: type[BaseModel], where: str) -> str:
    """`param` is not implemented (why, and the closest field there is), or not known (did you mean, the fields)."""
    fields = list(model.model_fields)
    entry = known.get(key)
    if entry is not None:
        instead = f"; the closest field edgekit takes is `{entry.instead}`" if entry.instead else ""
        return f"`{param}` is not supported in {where}: {entry.why}{instead}"
    guess = did_you_mean(key, fields)
    hint = f"; did you mean `{guess}`?" if guess else ""
    return f"`{param}` is not a field of {where}{hint} (it takes {', '.join(f'`{f}`' for f in fields)})"


def _bad_value(param: str, description: str | None, error: ErrorDetails) -> str:
    if error["type"] == "missing":
        got = "nothing"
    else:
        got = repr(error.get("input"))
        got = got if len(got) <= _SHOWN_VALUE else got[:_SHOWN_VALUE] + "…"
    return f"`{param}` must be {description or 'valid'} (got {got})"
