"""The HTTP API on a tiny GGUF bundle, in process: OpenAI shapes, SSE, limits, health before and after load.
The live-server behaviour (429 under load, disconnects, run.sh) is in tests/e2e/test_runtime.py."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest

from tests.support.tiny_gguf import write_tiny_bundle, write_tiny_gguf

with warnings.catch_warnings():  # starlette's note that it prefers httpx2 over httpx for its test client
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from edgekit.runtime.loader import inspect_bundle
from edgekit.runtime.serve.app import ServeState, create_app


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeState]:
    root = tmp_path_factory.mktemp("serve")
    bundle = write_tiny_bundle(root, write_tiny_gguf(root / "tiny.gguf"))
    serve_state = ServeState(inspect_bundle(bundle), max_body_bytes=4096)
    yield serve_state
    serve_state.close()


@pytest.fixture(scope="module")
def client(state: ServeState) -> Iterator[TestClient]:
    with TestClient(create_app(state)) as test_client:
        assert test_client.get("/health").status_code == 503  # not loaded yet
        state.load_in_background().join()
        yield test_client


def test_health_models_and_metrics(client: TestClient) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny/gguf-F32" and health["max_sequences"] == 2
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny/gguf-F32"
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain") and "edgekit_ready 1" in metrics.text


def test_completion_and_chat_have_openai_shapes(client: TestClient) -> None:
    body = client.post("/v1/completions", json={"prompt": "the cat", "max_tokens": 5, "temperature": 0}).json()
    assert body["object"] == "text_completion" and body["choices"][0]["finish_reason"] in ("length", "stop")
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] <= 5
    chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    message = chat.json()["choices"][0]["message"]
    assert chat.status_code == 200 and message["role"] == "assistant" and isinstance(message["content"], str)


def test_streaming_is_server_sent_events_ending_in_done(client: TestClient) -> None:
    with client.stream("POST", "/v1/completions", json={"prompt": "the", "max_tokens": 4, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop") and "usage" in chunks[-1]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"prompt": "x" * 5000}, "limit"),  # body over max_body_bytes (4096)
        ({"prompt": "the", "max_tokens": 500}, "max_request_tokens"),  # over 128 tokens per request
        ({"prompt": ""}, "non-empty"),
        ({"prompt": "x", "temperature": 9}, "temperature"),
        ({"prompt": "x", "n": 2}, "n = 1"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
    ],
)
def test_bad_requests_are_400_with_a_message(client: TestClient, body: dict[str, object], fragment: str) -> None:
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    response = client.post(path, json=body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]


def test_invalid_json_is_400(client: TestClient) -> None:
    response = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
