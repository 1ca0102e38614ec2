#!/usr/bin/env python3
"""Load OpenAI-compatible servers (`edgekit serve`, `llama-server`) and print latency and throughput as JSON.

    scripts/bench_serve.py --url http://127.0.0.1:8080 --clients 4 --requests 32 --max-tokens 32
    scripts/bench_serve.py --url http://127.0.0.1:8080 --url2 http://127.0.0.1:8081 --load all --runs 3
    scripts/bench_serve.py --launch dist/smollm2-135m --load all --runs 3      # starts both servers itself

Two loads:
* `repeated` (the default): K concurrent streaming clients, the same prompt for every request, at most
  --requests requests and no new one after --duration seconds. Aggregate tokens/s, P50/P99 time to first
  token (TTFT) and request latency. A response is "lost" when its stream ends without a finish_reason
  and [DONE]; "rejected" is a 429/503 from the server's bounded queue.
* `mixed`: --streams streaming clients decode (distinct short prompts); once each has its first tokens,
  one long prompt (--long-words words of a public-domain novel, about 1,500 tokens) arrives, --rounds
  times one after another while the streams keep running. The first round is cold, the next ones meet
  the same prompt again (prefix reuse). P50/P99/max gap between tokens of the running streams, and the
  long prompt's TTFT, per round.

With --url2 (or --launch) every run puts both servers through the same loads, alternating which goes
first, and the summary gives medians over --runs runs with the ratio url ÷ url2; a side-by-side table
goes to stderr. --launch BUNDLE starts `edgekit serve BUNDLE` and the toolchain's `llama-server` with
the bundle's runtime.toml settings (threads, context, slots, batch, mmap/mlock, NUMA) on free ports.
Every request asks for `ignore_eos` (edgekit, llama-server and vLLM understand it), so each generates
exactly its max_tokens and both servers carry the same load.
Exit code 1 when any request failed or was lost. Needs httpx (dev extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

PROMPT = "The operator of the water pump station checks the pressure valves every morning, because"
NOVEL = Path(__file__).resolve().parents[1] / "edgekit" / "data" / "botchan.txt"
STREAM_PROMPTS = (
    "Write a long story about a lighthouse keeper and the storm that changed her life.",
    "Explain in detail how a steam engine works, step by step, for a curious child.",
    "Describe a walk through a busy market in a mountain town on a cold morning.",
    "List the reasons a small farm might switch from cows to goats, with examples.",
)


@dataclass
class Outcome:
    status: str  # ok | failed | rejected | lost
    ttft_s: float | None = None
    seconds: float = 0.0
    tokens: int = 0
    detail: str = ""
    token_times: list[float] = field(default_factory=list)  # perf_counter() of every chunk carrying text


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


async def one_request(client: httpx.AsyncClient, url: str, body: dict[str, Any], out: Outcome | None = None) -> Outcome:
    """One streamed request; `out` (if given) is filled as chunks arrive, so a caller can watch it."""
    started = time.perf_counter()
    out = out or Outcome("lost")
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
                    return Outcome("failed", detail=str(chunk["error"].get("message", "error")))
                usage = chunk.get("usage") or {}
                out.tokens = usage.get("completion_tokens", out.tokens)
                for choice in chunk.get("choices") or []:  # a usage-only chunk has none
                    if choice.get("text") or (choice.get("delta") or {}).get("content"):
                        out.token_times.append(time.perf_counter())
                    finished = finished or bool(choice.get("finish_reason"))
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        return Outcome("failed", seconds=time.perf_counter() - started, detail=f"{type(exc).__name__}: {exc}")
    out.status = "ok" if finished and done else "lost"
    out.seconds = time.perf_counter() - started
    out.ttft_s = out.token_times[0] - started if out.token_times else None
    out.tokens = out.tokens or len(out.token_times)
    return out


def request_body(args: argparse.Namespace, prompt: str, max_tokens: int) -> tuple[str, dict[str, Any]]:
    path = "/v1/chat/completions" if args.chat else "/v1/completions"
    body: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": args.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},  # llama-server sends usage only when asked
        # Every request generates exactly max_tokens on both servers: where a greedy run stops at an end
        # token depends on batch numerics, and requests of uneven length change the load's timing.
        "ignore_eos": True,
    }
    body.update({"messages": [{"role": "user", "content": prompt}]} if args.chat else {"prompt": prompt})
    return path, body


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return {
        "sent": len(outcomes),
        **{s: sum(o.status == s for o in outcomes) for s in ("ok", "failed", "rejected", "lost")},
    }


def errors(outcomes: list[Outcome]) -> list[str]:
    return sorted({o.detail for o in outcomes if o.status in ("failed", "lost") and o.detail})[:10]


async def repeated_load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """K clients, the same prompt for every request."""
    path, body = request_body(args, args.prompt, args.max_tokens)
    outcomes: list[Outcome] = []
    budget = {"left": args.requests}
    deadline = time.perf_counter() + args.duration
    started = time.perf_counter()

    async def client_loop(client: httpx.AsyncClient) -> None:
        while budget["left"] > 0 and time.perf_counter() < deadline:
            budget["left"] -= 1
            outcomes.append(await one_request(client, url.rstrip("/") + path, body))

    async with client_for(args, args.clients) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(args.clients)))
    wall = time.perf_counter() - started
    ok = [o for o in outcomes if o.status == "ok"]
    ttfts = [o.ttft_s * 1000 for o in ok if o.ttft_s is not None]
    latencies = [o.seconds * 1000 for o in ok]
    tokens = sum(o.tokens for o in ok)
    return {
        "url": url,
        "load": "repeated",
        "endpoint": path,
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "requests": counts(outcomes),
        "ttft_ms": {
            "p50": rounded(percentile(ttfts, 50)),
            "p99": rounded(percentile(ttfts, 99)),
            "max": rounded(max(ttfts, default=None)),
        },
        "latency_ms": {"p50": rounded(percentile(latencies, 50)), "p99": rounded(percentile(latencies, 99))},
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "wall_s": round(wall, 2),
        "errors": errors(outcomes),
    }


def client_for(args: argparse.Namespace, connections: int) -> httpx.AsyncClient:
    timeout = httpx.Timeout(args.timeout, connect=10.0)
    return httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=connections))


def long_prompt(words: int, run: int = 0) -> str:
    """`words` words of the novel, the same on both servers within a run and another passage each run:
    servers keep prompts they have seen, so a passage of an earlier run would not be cold."""
    text = NOVEL.read_text(encoding="utf-8").split()
    start = 200 + run * words % max(1, len(text) - 200 - words)
    return "Summarise the following text in one sentence.\n\n" + " ".join(text[start : start + words])


async def mixed_round(url: str, args: argparse.Namespace, client: httpx.AsyncClient, prompt: str) -> dict[str, Any]:
    """--streams streams decode; once each has --warm-tokens tokens the long prompt arrives; when it is
    answered and every stream has --warm-tokens more, the streams are closed."""
    base = url.rstrip("/")
    outs = [Outcome("lost") for _ in range(args.streams)]
    tasks = []
    for i, out in enumerate(outs):
        path, body = request_body(args, STREAM_PROMPTS[i % len(STREAM_PROMPTS)], args.stream_tokens)
        tasks.append(asyncio.ensure_future(one_request(client, base + path, body, out)))

    def streamed(least: list[int]) -> bool:
        return all(len(o.token_times) >= n or t.done() for o, t, n in zip(outs, tasks, least, strict=True))

    await until(lambda: streamed([args.warm_tokens] * len(outs)), args)
    path, body = request_body(args, prompt, args.long_max_tokens)
    long = await one_request(client, base + path, body)
    after = [len(o.token_times) + args.warm_tokens for o in outs]
    outlived = not any(t.done() for t in tasks)
    await until(lambda: streamed(after), args)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for out, task in zip(outs, tasks, strict=True):
        if task.cancelled() and out.token_times:  # closed on purpose, mid-stream
            out.status, out.tokens = "ok", len(out.token_times)
    return {**_round_figures(long, outs), "streams_outlived_the_prompt": outlived}


async def until(condition: Any, args: argparse.Namespace) -> None:
    deadline = time.perf_counter() + args.timeout
    while not condition() and time.perf_counter() < deadline:
        await asyncio.sleep(0.005)


def _round_figures(long: Outcome, streams: list[Outcome]) -> dict[str, Any]:
    gaps = [(b - a) * 1000 for s in streams for a, b in zip(s.token_times, s.token_times[1:], strict=False)]
    sent_at = long.token_times[0] - long.ttft_s if long.token_times and long.ttft_s is not None else None
    during = [
        (b - a) * 1000
        for s in streams
        for a, b in zip(s.token_times, s.token_times[1:], strict=False)
        if sent_at is not None and b >= sent_at and a <= long.token_times[0]
    ]
    return {
        "long_status": long.status,
        "long_ttft_ms": rounded(long.ttft_s * 1000 if long.ttft_s is not None else None),
        "gap_ms": {
            "p50": rounded(percentile(gaps, 50)),
            "p99": rounded(percentile(gaps, 99)),
            "max": rounded(max(gaps, default=None)),
        },
        "gap_during_prefill_max_ms": rounded(max(during, default=None)),
        "stream_tokens": [s.tokens for s in streams],
        "stream_status": [s.status for s in streams],
        "errors": errors([long, *streams]),
    }


async def mixed_load(url: str, args: argparse.Namespace, run: int = 0) -> dict[str, Any]:
    prompt = long_prompt(args.long_words, run)
    rounds = []
    async with client_for(args, args.streams + 1) as client:
        for _ in range(args.rounds):
            rounds.append(await mixed_round(url, args, client, prompt))
    return {
        "url": url,
        "load": "mixed",
        "streams": args.streams,
        "long_words": args.long_words,
        "rounds": rounds,
        "cold": _mixed_summary(rounds[:1]),
        "warm": _mixed_summary(rounds[1:]),
    }


def _mixed_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str, sub: str | None = None) -> float | None:
        values = [r[key][sub] if sub else r[key] for r in rounds]
        values = [v for v in values if v is not None]
        return rounded(statistics.median(values)) if values else None

    return {"long_ttft_ms": med("long_ttft_ms"), "gap_p50_ms": med("gap_ms", "p50"), "gap_p99_ms": med("gap_ms", "p99")}


def failed(result: dict[str, Any]) -> bool:
    if result["load"] == "repeated":
        return result["requests"]["failed"] > 0 or result["requests"]["lost"] > 0
    return any(r["long_status"] != "ok" or any(s != "ok" for s in r["stream_status"]) for r in result["rounds"])


# --- several servers, several runs -----------------------------------------------------------------------

FIGURES = {  # name -> (load, path into its result, higher is better)
    "tokens/s (repeated)": ("repeated", ("tokens_per_s",), True),
    "TTFT P50 ms (repeated)": ("repeated", ("ttft_ms", "p50"), False),
    "TTFT P99 ms (repeated)": ("repeated", ("ttft_ms", "p99"), False),
    "long TTFT ms, cold (mixed)": ("mixed", ("cold", "long_ttft_ms"), False),
    "long TTFT ms, again (mixed)": ("mixed", ("warm", "long_ttft_ms"), False),
    "gap P50 ms, cold (mixed)": ("mixed", ("cold", "gap_p50_ms"), False),
    "gap P99 ms, cold (mixed)": ("mixed", ("cold", "gap_p99_ms"), False),
    "gap P50 ms, again (mixed)": ("mixed", ("warm", "gap_p50_ms"), False),
    "gap P99 ms, again (mixed)": ("mixed", ("warm", "gap_p99_ms"), False),
}


def dig(result: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = result
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def summarise(urls: list[str], runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians over runs per server and figure; ratio url ÷ url2 of the medians."""
    table: dict[str, Any] = {}
    for name, (load, path, _) in FIGURES.items():
        row: dict[str, Any] = {}
        for url in urls:
            values = [dig(run[url][load], path) for run in runs if load in run.get(url, {})]
            values = [v for v in values if v is not None]
            row[url] = rounded(statistics.median(values), 2) if values else None
        if len(urls) == 2 and row[urls[0]] is not None and row[urls[1]]:
            row["ratio"] = round(row[urls[0]] / row[urls[1]], 3)
        if any(v is not None for v in row.values()):
            table[name] = row
    return table


def render(urls: list[str], names: list[str], table: dict[str, Any], runs: int) -> str:
    head = [f"figure (median of {runs} runs)", *names] + (["ratio"] if len(urls) == 2 else [])
    rows = [head] + [
        [name, *(_cell(row.get(u)) for u in urls)] + ([_cell(row.get("ratio"))] if len(urls) == 2 else [])
        for name, row in table.items()
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


async def run_all(urls: list[str], args: argparse.Namespace) -> dict[str, Any]:
    loads = ["repeated", "mixed"] if args.load == "all" else [args.load]
    runs: list[dict[str, dict[str, Any]]] = []
    for i in range(args.runs):
        order = urls if i % 2 == 0 else urls[::-1]  # interleaved: neither server always goes first
        run: dict[str, dict[str, Any]] = {u: {} for u in urls}
        for url in order:
            for load in loads:
                run[url][load] = await (repeated_load(url, args) if load == "repeated" else mixed_load(url, args, i))
        runs.append(run)
    return {"runs": runs, "summary": summarise(urls, runs)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--url2", help="a second server to put through the same loads (e.g. llama-server)")
    parser.add_argument("--launch", metavar="BUNDLE", help="start edgekit serve and llama-server for BUNDLE")
    parser.add_argument("--load", choices=("repeated", "mixed", "all"), default="repeated")
    parser.add_argument("--runs", type=int, default=1, help="interleaved runs (the summary gives medians)")
    parser.add_argument("--clients", type=int, default=4, help="repeated: concurrent clients (K)")
    parser.add_argument("--requests", type=int, default=32, help="repeated: requests in all, at most")
    parser.add_argument("--duration", type=float, default=60.0, help="repeated: seconds after which none starts")
    parser.add_argument("--max-tokens", type=int, default=32, help="repeated: max_tokens per request")
    parser.add_argument("--prompt", default=PROMPT, help="repeated: the prompt")
    parser.add_argument("--streams", type=int, default=3, help="mixed: streams decoding when the long prompt comes")
    parser.add_argument("--stream-tokens", type=int, default=480, help="mixed: max_tokens of each stream")
    parser.add_argument("--warm-tokens", type=int, default=8, help="mixed: stream tokens before and after")
    parser.add_argument("--long-words", type=int, default=1100, help="mixed: words of the long prompt")
    parser.add_argument("--long-max-tokens", type=int, default=8, help="mixed: max_tokens of the long prompt")
    parser.add_argument("--rounds", type=int, default=3, help="mixed: the long prompt, this many times")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-request read timeout, seconds")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.requests < 1 or args.runs < 1 or args.rounds < 1 or args.streams < 1:
        parser.error("--clients, --requests, --runs, --rounds and --streams must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.launch:
        from serve_peers import launched  # needs edgekit; plain URL runs need only httpx

        with launched(Path(args.launch)) as (url, url2):
            return report(args, [url, url2], ["edgekit serve", "llama-server"])
    urls = [args.url] + ([args.url2] if args.url2 else [])
    return report(args, urls, urls)


def report(args: argparse.Namespace, urls: list[str], names: list[str]) -> int:
    if len(urls) == 1 and args.runs == 1 and args.load != "all":
        load = repeated_load if args.load == "repeated" else mixed_load
        result = asyncio.run(load(urls[0], args))
        print(json.dumps(result, indent=2))
        return 1 if failed(result) else 0
    result = asyncio.run(run_all(urls, args))
    result["servers"] = dict(zip(urls, names, strict=True))
    print(json.dumps(result, indent=2))
    print(render(urls, names, result["summary"], args.runs), file=sys.stderr)
    bad = [r for run in result["runs"] for server in run.values() for r in server.values() if failed(r)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
