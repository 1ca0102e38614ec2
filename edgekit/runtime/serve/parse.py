"""A request body → a scheduler `Request`: the typed schema first (`schema`), then what needs the model (the
chat template, tokens against the limits). Runs in a worker thread: tokenizing and templating are CPU work."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from edgekit.errors import UsageError
from edgekit.runtime.engines import Sampling
from edgekit.runtime.engines.base import LogprobsEngine
from edgekit.runtime.loader import LoadedBundle
from edgekit.runtime.serve import tools
from edgekit.runtime.serve.api_error import ApiError, invalid
from edgekit.runtime.serve.metrics import ServeMetrics
from edgekit.runtime.serve.scheduler import Request
from edgekit.runtime.serve.schema import ChatBody, CompletionBody, Endpoint, FieldProblem, validate
from edgekit.runtime.serve.structured import check_grammar, require_grammar, response_schema, schema_grammar
from edgekit.runtime.serve.tools import ToolPlan
from edgekit.runtime.text import chat, prompt

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat's is what the context leaves


@dataclass(frozen=True)
class Parsed:
    request: Request
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage and no choices
    tools: ToolPlan | None = None  # the reply is a constrained tool call or text reply (`tools.reply` shapes it)


def parse(
    loaded: LoadedBundle,
    served: str,
    metrics: ServeMetrics,
    endpoint: Endpoint,
    raw: dict[str, Any],
    loop: asyncio.AbstractEventLoop,
) -> Parsed:
    body = validate(endpoint, raw)
    if isinstance(body, FieldProblem):
        raise invalid(body.message, body.param)
    if body.model is not None and body.model != served:
        raise ApiError(404, f"the model `{body.model}` is not served here; this server runs `{served}`", param="model")
    if body.stream_options is not None and not body.stream:
        raise invalid("`stream_options` is only for streamed requests (`stream`: true)", "stream_options")
    tool_plan, template = None, ""
    if isinstance(body, ChatBody):  # a completion needs no template (finding one may read the bundle's files)
        template = chat.find_template(loaded.engine, loaded.path) or ""
        tool_plan = tools.plan(body.tools, body.tool_choice, body.parallel_tool_calls, template)
    ids = _prompt_ids(loaded, body, tool_plan, template)
    engine, config = loaded.engine, loaded.config
    limit = min(config.max_request_tokens, getattr(engine, "n_ctx", config.n_ctx))
    default = COMPLETION_DEFAULT_MAX_TOKENS if endpoint == Endpoint.COMPLETIONS else limit - len(ids)
    max_tokens = _max_tokens(body, default)
    if len(ids) + max_tokens > limit:
        metrics.rejected.labels(reason="too_many_tokens").inc()
        raise ApiError(
            400,
            f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) is more than this server's limit of {limit} "
            "tokens per request (max_request_tokens / n_ctx in runtime.toml)",
            "context_length_exceeded",
            param="max_tokens",
        )
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    sampling = Sampling(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        seed=body.seed,
        logprobs=_logprobs(loaded, body),
        grammar=_grammar(loaded, body, stop, tool_plan),
    )
    if tool_plan is not None and sampling.logprobs is not None:
        raise invalid("`logprobs` with `tools` is not implemented", "logprobs")
    request = Request(ids, max_tokens, sampling, stop, loop, ignore_eos=body.ignore_eos)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return Parsed(request, body.stream, include_usage, tools=tool_plan)


def _logprobs(loaded: LoadedBundle, body: CompletionBody | ChatBody) -> int | None:
    """How many alternatives per token to report (None: no logprobs), if the engine reports them."""
    if isinstance(body, ChatBody):
        if body.top_logprobs is not None and not body.logprobs:
            raise invalid("`top_logprobs` needs `logprobs`: true", "top_logprobs")
        wanted = (body.top_logprobs or 0) if body.logprobs else None
    else:
        wanted = body.logprobs
    engine = loaded.engine
    if wanted is not None and not isinstance(engine, LogprobsEngine):
        raise invalid(
            f"`logprobs` is not supported by the {engine.backend} engine of this bundle: it does not report the "
            "log-probabilities of the tokens it samples",
            "logprobs",
        )
    return wanted


def _grammar(
    loaded: LoadedBundle, body: CompletionBody | ChatBody, stop: list[str], tool_plan: ToolPlan | None
) -> str | None:
    """The grammar `response_format` or the tools ask for (None: free text), checked against the engine and the
    body."""
    schema = None if body.response_format is None else response_schema(body.response_format)
    if schema is not None and tool_plan is not None:
        raise invalid("send `tools` or a structured `response_format`, not both", "response_format")
    param = "tools" if tool_plan is not None else "response_format"
    schema = tool_plan.schema if tool_plan is not None else schema
    if schema is None:
        return None
    engine = require_grammar(loaded.engine, param)
    if stop:
        raise invalid(f"`stop` cannot be used with `{param}`: it could cut the JSON the reply is", "stop")
    if body.ignore_eos:
        raise invalid(f"`ignore_eos` cannot be used with `{param}`: the JSON the reply is ends it", "ignore_eos")
    frame, text_unless = (tool_plan.frame, tool_plan.text_unless) if tool_plan is not None else (("", ""), None)
    return check_grammar(engine, schema_grammar(schema, param, frame, text_unless), param)


def _prompt_ids(
    loaded: LoadedBundle, body: CompletionBody | ChatBody, tool_plan: ToolPlan | None, template: str
) -> list[int]:
    engine = loaded.engine
    try:
        if isinstance(body, ChatBody):
            messages, listed = tools.with_tools([m.model_dump() for m in body.messages], tool_plan, template)
            return prompt.chat_ids(engine, loaded.path, messages, tools=listed)
        text = body.prompt
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if not isinstance(text, str) or not text:
            raise invalid("`prompt` must be a non-empty string (one prompt per request)", "prompt")
        if not prompt.is_utf8(text):
            raise invalid("`prompt` is not valid UTF-8 text (it holds a lone surrogate)", "prompt")
        return prompt.completion_ids(engine, text)
    except UsageError as exc:
        message = f"{exc.message}; {exc.hint}" if exc.hint else exc.message
        raise invalid(message, "messages" if isinstance(body, ChatBody) else "prompt") from None


def _max_tokens(body: CompletionBody | ChatBody, default: int) -> int:
    values = {v for v in (body.max_tokens, body.max_completion_tokens) if v is not None}
    if len(values) > 1:
        raise invalid("send one of `max_tokens` and `max_completion_tokens`, not two different limits", "max_tokens")
    return values.pop() if values else default
