"""The box side under attack and under load, on a real bundle of the tiny model (tests/support/tiny_project.py).

* `run`, `serve` and `run.sh` refuse a tampered bundle before loading it: exit 4, naming the file.
* `serve` on loopback: every malformed or oversize request is a 400 with a message; clients beyond the
  queue bound get 429 with Retry-After; clients that leave (streaming, or still queued) free their place;
  and a bounded load test — a fixed number of requests within a deadline — ends with zero server errors,
  zero lost responses and the server idle and healthy.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from edgekit.manifest import verify_bundle
from edgekit.runtime.config import LOCAL_FILE
from tests.support.live_serve import free_port, serve_process
from tests.support.stage_cache import linked_copy

BIN = Path(sys.executable).parent
SLOTS, QUEUE, MAX_REQUEST_TOKENS = 2, 2, 256


def edgekit(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


# --- tampered bundles --------------------------------------------------------------------------------


def _replace(path: Path, data: bytes) -> None:
    """Write a new file (the copy's files are hard links to the session's bundle: never write into them)."""
    path.unlink()
    path.write_bytes(data)


def _flip_model_byte(bundle: Path) -> str:
    model = next((bundle / "models").glob("*.gguf"))
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only the sha256 can tell
    _replace(model, bytes(data))
    return f"models/{model.name}: sha256 differs"


def _add_file(bundle: Path) -> str:
    (bundle / "models" / "extra.gguf").write_bytes(b"GGUF")
    return "models/extra.gguf: not in the manifest"


def _remove_file(bundle: Path) -> str:
    (bundle / "tokenizer" / "tokenizer.json").unlink()
    return "tokenizer/tokenizer.json: missing"


def _symlink_model(bundle: Path) -> str:
    model = next((bundle / "models").glob("*.gguf"))
    outside = bundle.parent / "outside.gguf"
    outside.write_bytes(model.read_bytes())
    model.unlink()
    model.symlink_to(outside)
    return f"models/{model.name}: is a link"


def _edit_runtime(bundle: Path) -> str:
    text = (bundle / "runtime.toml").read_text()
    assert "use_mmap = true" in text
    _replace(bundle / "runtime.toml", text.replace("use_mmap = true", "use_mmap = TRUE").encode())  # same size
    return "runtime.toml: sha256 differs"


TAMPERS: dict[str, Callable[[Path], str]] = {
    "one byte of the model": _flip_model_byte,
    "a file added": _add_file,
    "a file removed": _remove_file,
    "the model swapped for a link": _symlink_model,
    "runtime.toml edited": _edit_runtime,
}


def _launch(entry: str, bundle: Path, tmp_path: Path, port: int) -> subprocess.CompletedProcess[str]:
    if entry == "run":
        return edgekit("run", str(bundle), "--prompt", "hi", "--max-tokens", "4")
    if entry == "serve":
        return edgekit("serve", str(bundle), "--port", str(port))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["sh", str(bundle / "run.sh"), "run", "--prompt", "hi", "--max-tokens", "4"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("entry", ["run", "serve", "run.sh"])
@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_bundle_is_refused_before_loading(
    tamper: str, entry: str, tiny_bundle: Path, tmp_path: Path
) -> None:
    bundle = linked_copy(tiny_bundle, tmp_path / "bundle")
    named = TAMPERS[tamper](bundle)
    port = free_port()
    proc = _launch(entry, bundle, tmp_path, port)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == ""  # no completion was produced
    if entry == "serve":
        with socket.socket() as s:  # the port was never opened
            assert s.connect_ex(("127.0.0.1", port)) != 0
    verify_bundle(tiny_bundle)  # the session's bundle was not touched


# --- a live server -------------------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def metric(self, name: str) -> float:
        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith((name + " ", name + "{")):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in /metrics")

    def health(self) -> dict[str, object]:
        return httpx.get(self.url + "/health", timeout=10).json()

    def wait_idle(self, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            health = self.health()
            if health["active_sequences"] == 0 and self.metric("edgekit_queue_depth") == 0:
                return
            time.sleep(0.1)
        raise AssertionError(f"the server is not idle after {timeout} s: {self.health()}")

    def mark(self) -> int:
        """Where the log is now: `assert_healthy(since=mark)` looks at what came after."""
        return self.log.stat().st_size

    def assert_healthy(self, since: int) -> None:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        assert self.health()["status"] == "ok"
        log = self.log.read_bytes()[since:].decode(errors="replace")
        assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


@pytest.fixture(scope="module")
def server(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    bundle = linked_copy(tiny_bundle, tmp_path_factory.mktemp("serve") / "bundle")
    (bundle / LOCAL_FILE).write_text(
        f"[runtime]\nmax_concurrent = {SLOTS}\nmax_queue = {QUEUE}\nmax_request_tokens = {MAX_REQUEST_TOKENS}\n"
    )
    log_path = bundle.parent / "serve.log"
    with serve_process(bundle, log_path) as (url, proc):
        yield Server(url, proc, log_path)


# What a client can get wrong, and the words the 400 must carry. Each is sent as raw bytes.
BAD_REQUESTS: dict[str, tuple[str, bytes, str]] = {
    "not JSON": ("/v1/completions", b"{", "not valid JSON"),
    "empty body": ("/v1/completions", b"", "not valid JSON"),
    "a JSON array": ("/v1/completions", b"[1, 2]", "must be a JSON object"),
    "invalid UTF-8": ("/v1/completions", b'{"prompt": "caf\xe9"}', "not valid JSON"),
    "no prompt": ("/v1/completions", b"{}", "`prompt` must be a non-empty string"),
    "a number as prompt": ("/v1/completions", b'{"prompt": 5}', "`prompt`"),
    "two prompts": ("/v1/completions", b'{"prompt": ["a", "b"]}', "`prompt`"),
    "max_tokens 0": ("/v1/completions", b'{"prompt": "hi", "max_tokens": 0}', "`max_tokens`"),
    "max_tokens a string": ("/v1/completions", b'{"prompt": "hi", "max_tokens": "5"}', "`max_tokens`"),
    "max_tokens a fraction": ("/v1/completions", b'{"prompt": "hi", "max_tokens": 2.5}', "`max_tokens`"),
    "max_tokens 10^30": (
        "/v1/completions",
        b'{"prompt": "hi", "max_tokens": 1000000000000000000000000000000}',
        "limit",
    ),
    "temperature NaN": ("/v1/completions", b'{"prompt": "hi", "temperature": NaN}', "`temperature`"),
    "temperature infinite": ("/v1/completions", b'{"prompt": "hi", "temperature": 1e999}', "`temperature`"),
    "top_p 2": ("/v1/completions", b'{"prompt": "hi", "top_p": 2}', "`top_p`"),
    "five stop strings": ("/v1/completions", b'{"prompt": "hi", "stop": ["a","b","c","d","e"]}', "`stop`"),
    "seed a string": ("/v1/completions", b'{"prompt": "hi", "seed": "x"}', "`seed`"),
    "seed negative": ("/v1/completions", b'{"prompt": "hi", "seed": -5, "max_tokens": 2}', "`seed`"),
    "stream a string": ("/v1/completions", b'{"prompt": "hi", "stream": "yes"}', "`stream`"),
    "ignore_eos a number": ("/v1/completions", b'{"prompt": "hi", "ignore_eos": 1}', "`ignore_eos`"),
    "n 2": ("/v1/completions", b'{"prompt": "hi", "n": 2}', "n = 1"),
    "prompt over the token limit": ("/v1/completions", json.dumps({"prompt": "hello " * 3000}).encode(), "limit"),
    "body over 1 MiB": ("/v1/completions", b'{"prompt": "' + b"x" * (2 * 2**20) + b'"}', "limit"),
    "lone surrogate in the prompt": ("/v1/completions", b'{"prompt": "hi \\ud800", "max_tokens": 2}', "UTF"),
    "JSON nested 100,000 deep": ("/v1/completions", b"[" * 100_000 + b"]" * 100_000, "JSON"),
    "an unknown field": ("/v1/completions", b'{"prompt": "hi", "frobnicate": 1}', "`frobnicate` is not a field"),
    "n_probs": ("/v1/completions", b'{"prompt": "hi", "n_probs": 2}', "the closest field edgekit takes is `logprobs`"),
    "logprobs 99": ("/v1/completions", b'{"prompt": "hi", "logprobs": 99}', "`logprobs` must be an integer"),
    "tools": ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "tools": []}', "`tools`"),
    "a message with a name": (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x", "name": "bob"}]}',
        "`messages[0].name` is not supported",
    ),
    "messages a string": ("/v1/chat/completions", b'{"messages": "hi"}', "`messages`"),
    "no messages": ("/v1/chat/completions", b'{"messages": []}', "`messages`"),
    "unknown role": ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', "role"),
    "image content": (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
        "text only",
    ),
    "1000 messages": (
        "/v1/chat/completions",
        json.dumps({"messages": [{"role": "user", "content": "x"}] * 1000}).encode(),
        "at most",
    ),
    "lone surrogate in a message": (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}',
        "UTF",
    ),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_a_bad_request_is_a_400_with_a_message(name: str, server: Server) -> None:
    path, body, words = BAD_REQUESTS[name]
    since = server.mark()
    with httpx.Client(timeout=30) as client:  # a fresh connection: the server may close one after an error
        response = client.post(server.url + path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert words in error["message"], error
    server.assert_healthy(since)


async def _completion(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> httpx.Response:
    return await client.post(url + "/v1/completions", json=body)


def test_clients_beyond_the_queue_get_429_with_retry_after_and_the_rest_are_served(server: Server) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0}
    clients = 4 * (SLOTS + QUEUE)
    since = server.mark()

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            return await asyncio.gather(*(_completion(client, server.url, body) for _ in range(clients)))

    responses = asyncio.run(burst())
    codes = Counter(r.status_code for r in responses)
    assert set(codes) <= {200, 429}, codes
    assert codes[429] >= 1 and codes[200] >= SLOTS + QUEUE, codes
    for r in responses:
        if r.status_code == 429:
            assert r.headers["retry-after"] and "queue is full" in r.json()["error"]["message"]
        else:
            assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    server.wait_idle()
    server.assert_healthy(since)


def test_clients_that_leave_mid_stream_or_while_queued_free_their_places(server: Server) -> None:
    server.wait_idle()
    since = server.mark()
    cancelled = server.metric("edgekit_cancelled_total")
    body = {"prompt": "Once upon a time", "max_tokens": 240, "temperature": 0, "stream": True}

    async def leave() -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            streams = [client.stream("POST", server.url + "/v1/completions", json=body) for _ in range(SLOTS)]
            opened = [await s.__aenter__() for s in streams]  # both slots busy
            queued = asyncio.ensure_future(client.post(server.url + "/v1/completions", json={**body, "stream": False}))
            for response in opened:  # read a little of each stream, then hang up
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        break
            await asyncio.sleep(0.2)
            queued.cancel()  # the queued client gives up too
            for s in streams:
                await s.__aexit__(None, None, None)

    asyncio.run(leave())
    server.wait_idle(timeout=20)
    assert server.metric("edgekit_cancelled_total") >= cancelled + SLOTS
    # the freed places serve new clients at once
    response = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=30)
    assert response.status_code == 200
    server.assert_healthy(since)


def _half_sent_request(server: Server) -> socket.socket:
    """A connection that sent its headers and only part of its body."""
    host, port = server.url.removeprefix("http://").split(":")
    slow = socket.create_connection((host, int(port)))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    slow.sendall(b'Content-Length: 1000\r\n\r\n{"prompt": "hi')
    return slow


def test_slow_clients_do_not_hold_slots(server: Server) -> None:
    """Clients stuck sending their body tie up connections, never sequences: others are served meanwhile."""
    slow = [_half_sent_request(server) for _ in range(3 * SLOTS)]
    try:
        for _ in range(SLOTS + 1):
            response = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=30)
            assert response.status_code == 200
        assert server.health()["status"] == "ok"
    finally:
        for connection in slow:
            connection.close()
    server.wait_idle()
    assert server.proc.poll() is None


def test_a_client_hanging_up_mid_body_is_not_an_application_error(server: Server) -> None:
    since = server.mark()
    _half_sent_request(server).close()
    time.sleep(1)
    server.assert_healthy(since)


def test_a_repeated_system_prompt_is_not_prefilled_again(server: Server) -> None:
    """Three requests sharing a long system prompt: the 2nd and 3rd reuse its KV cells (counted in /metrics),
    and a reused prefix gives the answer a cold prefill gives (greedy, so the same text)."""
    server.wait_idle()
    since = server.mark()
    names = ("edgekit_prefix_cache_reused_tokens_total", 'edgekit_prefix_cache_hits_total{source="slot"}')
    before = {name: server.metric(name) for name in names}
    system = "You are the assistant of the water pump station. Answer briefly and precisely. " * 4
    questions = ("Is the north valve open?", "Is the north valve open?", "How many pumps run at night?")
    answers = []
    for question in questions:
        body = {"prompt": system + question, "max_tokens": 6, "temperature": 0}
        answers.append(httpx.post(server.url + "/v1/completions", json=body, timeout=60).json())
    prompt_tokens = [a["usage"]["prompt_tokens"] for a in answers]
    assert answers[0]["choices"][0]["text"] == answers[1]["choices"][0]["text"]
    assert server.metric(names[1]) - before[names[1]] >= 2
    reused = server.metric(names[0]) - before[names[0]]
    assert reused >= (prompt_tokens[1] - 1) + prompt_tokens[2] // 2, (reused, prompt_tokens)
    server.assert_healthy(since)


LOAD_REQUESTS, LOAD_CLIENTS, LOAD_DEADLINE_S = 160, 8, 240.0


def test_bounded_load_test_has_no_server_errors_and_loses_no_response(server: Server) -> None:
    """160 requests from 8 clients (twice slots + queue) within 240 s: a mix of completions and chat, streamed
    or not. A 429 is retried after a short random wait; every request must end in one complete answer."""
    server.wait_idle()
    since = server.mark()
    rng = random.Random(0)
    plan = [
        {
            "chat": rng.random() < 0.4,
            "stream": rng.random() < 0.5,
            "max_tokens": rng.randint(1, 32),
            "temperature": rng.choice([0, 0.7]),
            "seed": rng.randint(0, 1000),
        }
        for _ in range(LOAD_REQUESTS)
    ]
    outcome: Counter[str] = Counter()
    problems: list[str] = []
    started = time.time()

    async def one(client: httpx.AsyncClient, spec: dict[str, object]) -> None:
        path = "/v1/chat/completions" if spec["chat"] else "/v1/completions"
        body: dict[str, object] = {k: spec[k] for k in ("stream", "max_tokens", "temperature", "seed")}
        if spec["chat"]:
            body["messages"] = [{"role": "user", "content": "Tell me a story."}]
        else:
            body["prompt"] = "Once upon a time"
        while True:
            if time.time() - started > LOAD_DEADLINE_S:
                problems.append("no answer before the deadline")
                return
            try:
                if spec["stream"]:
                    async with client.stream("POST", server.url + path, json=body) as response:
                        if response.status_code == 429:
                            outcome["429"] += 1
                            await asyncio.sleep(rng.uniform(0.05, 0.3))
                            continue
                        lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
                        if response.status_code != 200 or lines[-1] != "data: [DONE]":
                            problems.append(f"stream {response.status_code}: {lines[-2:]}")
                            return
                        last = json.loads(lines[-2][6:])
                        if last["choices"][0]["finish_reason"] not in ("stop", "length"):
                            problems.append(f"stream ended without a finish reason: {last}")
                            return
                        outcome["200"] += 1
                        return
                response = await client.post(server.url + path, json=body)
                if response.status_code == 429:
                    outcome["429"] += 1
                    await asyncio.sleep(rng.uniform(0.05, 0.3))
                    continue
                choice = response.json()["choices"][0]
                if response.status_code != 200 or choice["finish_reason"] not in ("stop", "length"):
                    problems.append(f"{response.status_code}: {response.text[:200]}")
                    return
                usage = response.json()["usage"]
                if usage["completion_tokens"] > spec["max_tokens"]:  # type: ignore[operator]
                    problems.append(f"{usage['completion_tokens']} tokens for max_tokens {spec['max_tokens']}")
                outcome["200"] += 1
                return
            except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
                return

    async def load() -> None:
        queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        for spec in plan:
            queue.put_nowait(spec)

        async def client_loop() -> None:
            async with httpx.AsyncClient(timeout=60) as client:
                while not queue.empty():
                    await one(client, queue.get_nowait())

        await asyncio.gather(*(client_loop() for _ in range(LOAD_CLIENTS)))

    asyncio.run(load())
    seconds = time.time() - started
    assert problems == [], problems[:5]
    assert outcome["200"] == LOAD_REQUESTS  # none lost
    assert seconds < LOAD_DEADLINE_S
    server.wait_idle()
    server.assert_healthy(since)
    print(f"\nload test: {LOAD_REQUESTS} requests answered in {seconds:.1f} s, {outcome['429']} 429s retried")
