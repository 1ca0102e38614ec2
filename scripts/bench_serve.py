#!/usr/bin/env python3
"""Load a running `edgekit serve` with K concurrent streaming clients; print latency and throughput as JSON.

    scripts/bench_serve.py --url http://127.0.0.1:8080 --clients 4 --requests 32 --max-tokens 32

Bounded twice: at most --requests requests in all, and no new request after --duration seconds.
Each request streams /v1/completions (or /v1/chat/completions with --chat); TTFT is the time to
the first chunk carrying text, tokens come from the final chunk's usage. A response is "lost"
when its stream ends without a finish_reason and [DONE]; "rejected" is a 429/503 from the
server's bounded queue. Exit code 1 when any request failed or was lost. Needs httpx (dev extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx

PROMPT = "The operator of the water pump station checks the pressure valves every morning, because"


@dataclass
class Outcome:
    status: str  # ok | failed | rejected | lost
    ttft_s: float | None = None
    seconds: float = 0.0
    tokens: int = 0
    detail: str = ""


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def one_request(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Outcome:
    started = time.perf_counter()
    ttft = None
    tokens = 0
    finished = done = False
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code in (429, 503):
                await response.aread()
                return Outcome("rejected", seconds=time.perf_counter() - started, detail=str(response.status_code))
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:300]
                return Outcome("failed", seconds=time.perf_counter() - started, detail=f"{response.status_code} {text}")
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: ") :]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    return Outcome("failed", detail=chunk["error"].get("message", "error"))
                choice = chunk["choices"][0]
                text = choice.get("text") or (choice.get("delta") or {}).get("content")
                if text and ttft is None:
                    ttft = time.perf_counter() - started
                if choice.get("finish_reason"):
                    finished = True
                    tokens = chunk.get("usage", {}).get("completion_tokens", tokens)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError) as exc:
        return Outcome("failed", seconds=time.perf_counter() - started, detail=f"{type(exc).__name__}: {exc}")
    status = "ok" if finished and done else "lost"
    return Outcome(status, ttft, time.perf_counter() - started, tokens)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    path = "/v1/chat/completions" if args.chat else "/v1/completions"
    body: dict[str, Any] = {"max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True}
    body.update({"messages": [{"role": "user", "content": args.prompt}]} if args.chat else {"prompt": args.prompt})
    outcomes: list[Outcome] = []
    budget = {"left": args.requests}
    deadline = time.perf_counter() + args.duration
    started = time.perf_counter()

    async def client_loop(client: httpx.AsyncClient) -> None:
        while budget["left"] > 0 and time.perf_counter() < deadline:
            budget["left"] -= 1
            outcomes.append(await one_request(client, args.url.rstrip("/") + path, body))

    timeout = httpx.Timeout(args.timeout, connect=10.0)
    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(args.clients)))
    wall = time.perf_counter() - started
    ok = [o for o in outcomes if o.status == "ok"]
    ttfts = [o.ttft_s * 1000 for o in ok if o.ttft_s is not None]
    latencies = [o.seconds * 1000 for o in ok]
    tokens = sum(o.tokens for o in ok)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ok", "failed", "rejected", "lost")}

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        "url": args.url,
        "endpoint": path,
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "requests": {"sent": len(outcomes), **counts},
        "ttft_ms": {
            "p50": rounded(percentile(ttfts, 50)),
            "p99": rounded(percentile(ttfts, 99)),
            "max": rounded(max(ttfts, default=None)),
        },
        "latency_ms": {"p50": rounded(percentile(latencies, 50)), "p99": rounded(percentile(latencies, 99))},
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "wall_s": round(wall, 2),
        "errors": sorted({o.detail for o in outcomes if o.status in ("failed", "lost") and o.detail})[:10],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (K)")
    parser.add_argument("--requests", type=int, default=32, help="requests in all, at most")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds after which no request starts")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    parser.add_argument("--timeout", type=float, default=120.0, help="per-request read timeout, seconds")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.requests < 1:
        parser.error("--clients and --requests must be at least 1")
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    return 0 if result["requests"]["failed"] == 0 and result["requests"]["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
