"""`edgekit serve`: an OpenAI-compatible HTTP server over one bundle (starlette + uvicorn).

    POST /v1/completions        {prompt, max_tokens, temperature, top_p, seed, stop, stream, ignore_eos,
                                 logprobs, response_format}  (schema.py has every field)
    POST /v1/chat/completions   {messages, ..., tools, tool_choice}: the model's chat template, rendered in a
                                jinja2 sandbox; `response_format` and tools constrain decoding (structured.py,
                                tools/)
    GET  /v1/models             the one model this server runs
    GET  /health                200 once the model is loaded and warmed up, 503 before
    GET  /metrics               Prometheus text

The model loads in the background after the port opens, so /health can say "loading". Requests
wait in a bounded queue for one of `max_concurrent` sequence slots (429 when it is full); bodies
and token counts are limited (400 with the limit in the message); a client that disconnects
frees its slot at the next decode step.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from edgekit.errors import EdgekitError
from edgekit.runtime.loader import BundleInfo, LoadedBundle, load
from edgekit.runtime.serve import tools
from edgekit.runtime.serve.api_error import ApiError, invalid
from edgekit.runtime.serve.logprobs import TokenLogprobs, layout
from edgekit.runtime.serve.metrics import CONTENT_TYPE, ServeMetrics
from edgekit.runtime.serve.parse import Parsed, parse
from edgekit.runtime.serve.scheduler import Event, EventKind, QueueFull, Request, Scheduler, ShuttingDown
from edgekit.runtime.serve.schema import Endpoint

log = logging.getLogger("edgekit.serve")
MAX_BODY_BYTES = 1 * 2**20
DISCONNECT_POLL_S = 0.2


class ClientGone(Exception):
    """The client hung up before its request body was complete: nobody to answer."""


class ServeState:
    """What the app needs: the bundle, and once loaded, the engine's scheduler."""

    def __init__(self, info: BundleInfo, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.info = info
        self.metrics = ServeMetrics()
        self.max_body_bytes = max_body_bytes
        self.loaded: LoadedBundle | None = None
        self.scheduler: Scheduler | None = None
        self.error: BaseException | None = None
        self.on_failure: Any = None  # called when loading fails (the CLI stops uvicorn)

    def load_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self._load, name="edgekit-load", daemon=True)
        thread.start()
        return thread

    def _load(self) -> None:
        try:
            loaded = load(self.info, warm_up=True)
            config = loaded.config
            scheduler = Scheduler(
                loaded.engine,
                max_queue=config.max_queue,
                metrics=self.metrics,
                prefill_chunk=config.prefill_chunk,
                max_stall=config.max_stall,
            )
            scheduler.start()
            self.loaded, self.scheduler = loaded, scheduler
            self.metrics.ready.set(1)
            log.info(
                "ready: %s loaded in %.2f s, warmed up in %.2f s",
                self.info.model_name,
                loaded.load_seconds,
                loaded.warmup_seconds,
            )
        except BaseException as exc:
            self.error = exc
            log.error("loading %s failed: %s", self.info.model_name, exc)
            if self.on_failure is not None:
                self.on_failure(exc)

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.loaded is not None:
            self.loaded.engine.close()


def create_app(state: ServeState) -> Starlette:
    async def health(request: HTTPRequest) -> Response:
        if state.scheduler is None:
            status = "failed" if state.error else "loading"
            return JSONResponse({"status": status, "model": state.info.model_name}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                "model": state.info.model_name,
                "active_sequences": state.scheduler.active,
                "max_sequences": state.info.config.max_concurrent,
            }
        )

    async def metrics(request: HTTPRequest) -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    async def models(request: HTTPRequest) -> Response:
        entry = {"id": state.info.model_name, "object": "model", "created": 0, "owned_by": "edgekit"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def completions(request: HTTPRequest) -> Response:
        return await _generate(state, request, Endpoint.COMPLETIONS)

    async def chat_completions(request: HTTPRequest) -> Response:
        return await _generate(state, request, Endpoint.CHAT)

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/metrics", metrics),
            Route("/v1/models", models),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
    )


# --- one generation request -------------------------------------------------------------------


async def _generate(state: ServeState, http: HTTPRequest, endpoint: Endpoint) -> Response:
    chat = endpoint == Endpoint.CHAT
    try:
        if state.scheduler is None or state.loaded is None:
            raise ApiError(
                503, "the model is still loading; retry when /health says ok", "not_ready", {"Retry-After": "2"}
            )
        with state.scheduler.arriving():
            body = await _read_json(http, state.max_body_bytes)
            # Tokenizing a large prompt and running the chat template are CPU work: off the event loop.
            parsed = await run_in_threadpool(
                parse, state.loaded, state.info.model_name, state.metrics, endpoint, body, asyncio.get_running_loop()
            )
            _submit(state.scheduler, parsed.request)
    except ApiError as exc:
        state.metrics.requests.labels(endpoint=endpoint, status=str(exc.status)).inc()
        return exc.response()
    except ClientGone:
        state.metrics.requests.labels(endpoint=endpoint, status="499").inc()
        return Response(status_code=499)
    state.metrics.requests.labels(endpoint=endpoint, status="200").inc()
    meta = {
        "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24],
        "created": int(time.time()),
        "model": state.info.model_name,
    }
    if parsed.stream:
        return StreamingResponse(
            _sse(state, parsed, meta, chat),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return await _whole(state, http, parsed, meta, chat)


def _submit(scheduler: Scheduler, request: Request) -> None:
    try:
        scheduler.submit(request)
    except QueueFull:
        scheduler.metrics.rejected.labels(reason="queue_full").inc()
        raise ApiError(
            429,
            f"the request queue is full ({scheduler.max_queue} waiting); retry shortly",
            "queue_full",
            {"Retry-After": "1"},
        ) from None
    except ShuttingDown:
        raise ApiError(503, "the server is shutting down", "shutting_down") from None


async def _read_json(http: HTTPRequest, limit: int) -> dict[str, Any]:
    declared = http.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(400, f"request body is {int(declared):,} bytes; the limit is {limit:,}", "request_too_large")
    data = bytearray()
    try:
        async for chunk in http.stream():
            data += chunk
            if len(data) > limit:
                raise ApiError(400, f"request body is over the limit of {limit:,} bytes", "request_too_large")
    except ClientDisconnect:
        raise ClientGone() from None
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise invalid("request body is not valid JSON for this server: nested too deeply") from None
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    return body


def _usage(request: Request) -> dict[str, int]:
    n_prompt = len(request.prompt_ids)
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": request.completion_tokens,
        "total_tokens": n_prompt + request.completion_tokens,
    }


async def _whole(state: ServeState, http: HTTPRequest, parsed: Parsed, meta: dict[str, Any], chat: bool) -> Response:
    assert state.scheduler is not None
    request = parsed.request
    parts: list[str] = []
    tokens: list[TokenLogprobs] = []
    try:
        while True:
            try:
                kind, value, token = await asyncio.wait_for(request.events.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await http.is_disconnected():
                    state.scheduler.cancel(request)
                    return Response(status_code=499)
                continue
            if kind == EventKind.TEXT:
                parts.append(value)
            elif kind == EventKind.TOKEN and token is not None:
                tokens.append(token)
            elif kind == EventKind.ERROR:
                return ApiError(500, value, "server_error").response()
            elif kind == EventKind.DONE:
                break
    except asyncio.CancelledError:
        state.scheduler.cancel(request)
        raise
    text = "".join(parts)
    logprobs = layout(tokens, chat) if request.sampling.logprobs is not None else None
    choice: dict[str, Any] = {"index": 0, "finish_reason": value, "logprobs": logprobs}
    if parsed.tools:
        choice["message"], choice["finish_reason"] = tools.reply(parsed.tools, text, value)
        obj = "chat.completion"
    elif chat:
        choice["message"] = {"role": "assistant", "content": text}
        obj = "chat.completion"
    else:
        choice["text"] = text
        obj = "text_completion"
    return JSONResponse({**meta, "object": obj, "choices": [choice], "usage": _usage(request)})


async def _sse(state: ServeState, parsed: Parsed, meta: dict[str, Any], chat: bool) -> AsyncIterator[bytes]:
    assert state.scheduler is not None
    request = parsed.request
    obj = "chat.completion.chunk" if chat else "text_completion"
    wants_logprobs = request.sampling.logprobs is not None
    pending: list[TokenLogprobs] = []  # tokens whose logprobs go out with the next chunk

    def event(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps({**meta, "object": obj, **payload}, ensure_ascii=False).encode() + b"\n\n"

    def choice(text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
        logprobs = layout(pending, chat) if wants_logprobs and pending else None
        pending.clear()
        if chat:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            if text:
                delta["content"] = text
            return {"choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}
        return {"choices": [{"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}]}

    finished = False
    held: list[str] = []  # a tool request's reply: held to the end, then sent as a tool call or a text reply
    try:
        if chat:
            yield event(choice(None, None, first=True))
        while not finished:
            out = bytearray()
            # What one decode step produced goes out in one write (a step's text, then maybe the finish).
            for kind, value, token in await _available(request.events):
                if kind == EventKind.TOKEN and token is not None:
                    pending.append(token)
                    continue
                if kind == EventKind.TEXT and parsed.tools:
                    held.append(value)
                    continue
                if kind == EventKind.TEXT:
                    out += event(choice(value, None))
                    continue
                if kind == EventKind.ERROR:
                    out += b"data: " + json.dumps({"error": {"message": value, "type": "server_error"}}).encode()
                    out += b"\n\n"
                elif parsed.tools:
                    message, finish = tools.reply(parsed.tools, "".join(held), value)
                    out += event(_tool_chunk(message, finish, _usage(request)))
                else:
                    out += event({**choice(None, value), "usage": _usage(request)})
                    if parsed.include_usage:  # as OpenAI sends it: a last chunk with no choices
                        out += event({"choices": [], "usage": _usage(request)})
                out += b"data: [DONE]\n\n"
                finished = True
                break
            yield bytes(out)
    finally:
        if not finished:  # the client disconnected (the response task was cancelled)
            state.scheduler.cancel(request)


def _tool_chunk(message: dict[str, Any], finish: str, usage: dict[str, int]) -> dict[str, Any]:
    """A tool request's whole reply as one streamed delta: its tool call (with its index) or its text."""
    delta: dict[str, Any] = {"content": message["content"]} if message["content"] is not None else {}
    if "tool_calls" in message:
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    return {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], "usage": usage}


async def _available(events: asyncio.Queue[Event]) -> list[Event]:
    """The next event, and every one already queued behind it."""
    ready = [await events.get()]
    while not events.empty():
        ready.append(events.get_nowait())
    return ready


def describe_error(exc: BaseException) -> str:
    return exc.message if isinstance(exc, EdgekitError) else f"{type(exc).__name__}: {exc}"
