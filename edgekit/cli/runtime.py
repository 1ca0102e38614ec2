"""The edge-box commands of `edgekit`: run, serve, bench, tune, numa. Parse, call `edgekit.runtime`, render.

Nothing here (or in what it calls) imports torch, transformers or the build stages.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import bundle_argument, console, emit_json, err_console, json_option, plain_output, steps
from edgekit.cli.ship import trusted_key_option

artifact_option = click.option("--artifact", help="Artifact to use (default: the one runtime.toml names).")


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        items = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers such as 1,2,4, got {value!r}") from None
    if not items or min(items) < 1:
        raise click.BadParameter("expected positive integers such as 1,2,4")
    return items


@click.command()
@bundle_argument
@click.option("--prompt", "-p", required=True, help="The prompt ('-' reads it from stdin).")
@click.option("--chat", is_flag=True, help="Send the prompt as a user message through the model's chat template.")
@click.option("--system", help="System message (with --chat).")
@click.option("--max-tokens", type=click.IntRange(1, 1_000_000), default=128, show_default=True)
@click.option("--temperature", type=click.FloatRange(0.0, 2.0), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True)
@click.option("--seed", type=int)
@click.option("--stop", multiple=True, help="Stop at this text (repeatable).")
@artifact_option
@click.option("--quiet", "-q", is_flag=True, help="No load and speed summary on stderr.")
@trusted_key_option
def run(
    bundle: str,
    prompt: str,
    chat: bool,
    system: str | None,
    max_tokens: int,
    temperature: float,
    top_p: float,
    seed: int | None,
    stop: tuple[str, ...],
    artifact: str | None,
    quiet: bool,
    trusted_keys: tuple[Path, ...],
) -> None:
    """Stream one completion of PROMPT from BUNDLE (verified against its manifest first)."""
    from edgekit.runtime.engines import Sampling
    from edgekit.runtime.loader import open_bundle
    from edgekit.runtime.text import prompt as prompts
    from edgekit.runtime.text.generate import Completion, stream

    text = sys.stdin.read() if prompt == "-" else prompt
    loaded = open_bundle(Path(bundle), artifact=artifact, trusted_keys=trusted_keys)
    engine = loaded.engine
    try:
        if chat:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
            ids = prompts.chat_ids(engine, loaded.path, messages)
        else:
            ids = prompts.completion_ids(engine, text)
        done = Completion(len(ids))
        sampling = Sampling(temperature=temperature, top_p=top_p, seed=seed)
        for piece in stream(engine, ids, max_tokens=max_tokens, sampling=sampling, stop=list(stop), result=done):
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
    finally:
        engine.close()
    if not quiet:
        speed = f", {done.decode_tok_s:.1f} tok/s" if done.decode_tok_s else ""
        err_console.print(
            f"[dim]{loaded.model_name}: loaded in {loaded.load_seconds:.2f} s; {done.prompt_tokens} prompt tokens, "
            f"{done.completion_tokens} generated ({done.finish_reason}); first token {1000 * (done.ttft_s or 0):.0f} ms"
            f"{speed}; threads {loaded.config.n_threads}/{loaded.config.n_threads_batch}; numa {loaded.numa.policy}[/]",
            highlight=False,
        )


@click.command()
@bundle_argument
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@artifact_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
@trusted_key_option
def serve(
    bundle: str, host: str, port: int, artifact: str | None, log_level: str, trusted_keys: tuple[Path, ...]
) -> None:
    """Serve BUNDLE over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions)."""
    from edgekit.runtime.serve.server import serve as run_server

    colours = False if plain_output(sys.stderr) else None
    run_server(Path(bundle), host=host, port=port, artifact=artifact, log_level=log_level, colours=colours,
               trusted_keys=trusted_keys)  # fmt: skip


def _bench_options(func: Any) -> Any:
    options = [
        click.option("--runs", type=click.IntRange(1, 100), help="Repetitions (medians are reported)."),
        click.option("--prompt-tokens", type=click.IntRange(1, 32768)),
        click.option("--gen-tokens", type=click.IntRange(1, 4096)),
        click.option("--threads", callback=_int_list, help="Thread counts to sweep, e.g. 1,2,4 (default: 1..cores)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command()
@bundle_argument
@_bench_options
@click.option("--concurrency", callback=_int_list, help="Concurrent sequences to measure, e.g. 1,2,4.")
@click.option("--bandwidth-mib", type=click.IntRange(16, 16384), help="Array size of the bandwidth probe.")
@click.option("--no-baseline", is_flag=True, help="Skip the llama-cpp-python Llama() row (its default settings).")
@click.option("--no-peer", is_flag=True, help="Skip llama.cpp's llama-bench on the same files (the peer row).")
@click.option("--no-loads", is_flag=True, help="Skip the mmap/no-mmap/mlock load probes.")
@click.option("--artifact", "artifacts", multiple=True, help="Only this artifact (repeatable).")
@json_option("bench")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the JSON result to this file.")
@trusted_key_option
def bench(
    bundle: str,
    runs: int | None,
    prompt_tokens: int | None,
    gen_tokens: int | None,
    threads: tuple[int, ...] | None,
    concurrency: tuple[int, ...] | None,
    bandwidth_mib: int | None,
    no_baseline: bool,
    no_peer: bool,
    no_loads: bool,
    artifacts: tuple[str, ...],
    as_json: bool,
    out: str | None,
    trusted_keys: tuple[Path, ...],
) -> None:
    """Benchmark BUNDLE's artifacts on this machine, against llama-bench and the bandwidth and compute roofs."""
    from edgekit._util.fsutil import write_json_atomic
    from edgekit.runtime.bench.bundle import bench_bundle

    overrides = {
        "runs": runs,
        "prompt_tokens": prompt_tokens,
        "gen_tokens": gen_tokens,
        "threads": threads,
        "concurrency": concurrency,
        "bandwidth_mib": bandwidth_mib,
        "baseline": False if no_baseline else None,
        "peer": False if no_peer else None,
        "loads": False if no_loads else None,
    }
    with steps("bench") as step:
        result = bench_bundle(Path(bundle), artifacts=list(artifacts) or None, overrides=overrides, log=step,
                              trusted_keys=trusted_keys).to_json()  # fmt: skip
    if out:
        write_json_atomic(Path(out), result)
    if as_json:
        emit_json("bench", result)
        return
    render_bench(result)


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{suffix}"


def _pair(a: Any, b: Any) -> str:
    return "—" if a is None and b is None else f"{_fmt(a)} / {_fmt(b)}"


def _ratio_runs(a: dict[str, Any], key: str) -> str:
    """A median ratio with the range of the runs (with 5 runs, a 94% interval for the median)."""
    runs = a.get(f"{key}_runs")
    return _fmt(a.get(key), 2) + (f" ({runs[0]:.2f}–{runs[1]:.2f})" if runs else "")


def _first(measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return next(iter(measured.values()), {})


def render_bench(result: dict[str, Any]) -> None:
    m = result["machine"]
    bw = result["bandwidth"]["best_gib_s_by_processes"]
    console.print(
        f"[bold]{m['cpu_model']}[/] · {m['physical_cores']} physical / {m['logical_cores']} logical cores · "
        f"{m['numa_nodes']} NUMA node(s) · bandwidth " + ", ".join(f"{p}P {v:.1f} GiB/s" for p, v in bw.items())
    )
    if m.get("emulated"):
        console.print(f"[yellow]measured under emulation ({escape(str(m.get('arch')))} through qemu-user): these "
                      "timings describe the emulator, not a box; bench on the box itself[/]")  # fmt: skip
    measured = {name: a for name, a in result["artifacts"].items() if "skipped" not in a}
    table = Table("medians over runs", *measured, title=None)
    with_settings = (a["baseline_settings"] for a in measured.values() if a.get("baseline_settings"))
    defaults: dict[str, Any] = next(with_settings, {})
    llama = f"Llama() defaults ({defaults.get('n_threads', '?')} thread(s))"
    rows: list[tuple[str, Any]] = [
        ("threads decode / prompt", lambda a: f"{a['n_threads']} / {a['n_threads_batch']}"),
        *[
            (f"decode tok/s, {c} seq", lambda a, c=c: _fmt(a["decode_tok_s_by_sequences"].get(c)))
            for c in _first(measured).get("decode_tok_s_by_sequences", {})
        ],
        ("prompt tok/s", lambda a: _fmt(a["prompt_tok_s"])),
        ("time to first token ms", lambda a: _fmt(a["ttft_ms"], 0)),
        ("peak RSS MiB, 1 seq", lambda a: _fmt(a["peak_rss_mib"], 0)),
        ("llama-bench decode / prompt tok/s", lambda a: _pair(a.get("peer_decode_tok_s"), a.get("peer_prompt_tok_s"))),
        ("edgekit ÷ llama-bench, decode", lambda a: _ratio_runs(a, "decode_over_peer")),
        ("edgekit ÷ llama-bench, prompt", lambda a: _ratio_runs(a, "prompt_over_peer")),
        ("bandwidth roof tok/s", lambda a: _fmt(a["roofline_tok_s"], 0)),
        ("compute roof tok/s", lambda a: _fmt(a.get("compute_roof_tok_s"), 0)),
        (
            "decode ÷ lower roof",
            lambda a: _fmt(a.get("roof_ratio"), 2) + (f" ({a['bound_by']})" if a.get("bound_by") else ""),
        ),
        (f"tuned ÷ {llama}, decode", lambda a: _fmt(a.get("tuned_over_baseline_decode"), 2)),
        (f"{llama} ÷ tuned, TTFT", lambda a: _fmt(a.get("baseline_over_tuned_ttft"), 2)),
        ("cold load→1st token ms, mmap", lambda a: _fmt(a.get("first_token_ms_mmap_cold"), 0)),
        ("cold load→1st token ms, no mmap", lambda a: _fmt(a.get("first_token_ms_no_mmap_cold"), 0)),
    ]
    for label, cell in rows:
        table.add_row(label, *[cell(a) for a in measured.values()])
    console.print(table)
    for name, a in result["artifacts"].items():
        if "skipped" in a:
            console.print(f"{name}: {a['skipped']}")
    peer = result.get("peer") or {}
    if peer.get("missing"):
        console.print(f"[yellow]{peer['missing']}[/]", highlight=False)
    for name, why in (peer.get("failed") or {}).items():
        console.print(f"[yellow]llama-bench could not measure {name}: {why}[/]", highlight=False)
    for key, c in result.get("comparisons", {}).items():
        if c.get("ratio"):
            console.print(
                f"{key}: {c['numerator']} ÷ {c['denominator']} decode = {c['ratio']['median']:.2f}× "
                f"(runs {c['ratio']['min']:.2f}–{c['ratio']['max']:.2f}; "
                f"bytes read per token ×{c['bytes_per_token_ratio']})"
            )
    console.print(f"{result['jobs']} measurements in {result['seconds']:.0f} s; --json for everything")


@click.command()
@bundle_argument
@_bench_options
@artifact_option
@json_option("tune")
@trusted_key_option
def tune(
    bundle: str,
    runs: int | None,
    prompt_tokens: int | None,
    gen_tokens: int | None,
    threads: tuple[int, ...] | None,
    artifact: str | None,
    as_json: bool,
    trusted_keys: tuple[Path, ...],
) -> None:
    """Sweep thread counts on this box and write BUNDLE/runtime.local.toml (the signed runtime.toml stays)."""
    from edgekit.runtime.bench.tune import tune as run_tune

    kwargs: dict[str, Any] = {
        k: v
        for k, v in {"runs": runs, "prompt_tokens": prompt_tokens, "gen_tokens": gen_tokens}.items()
        if v is not None
    }
    with steps("tune") as step:
        result = run_tune(Path(bundle), artifact=artifact, threads=threads, log=step, trusted_keys=trusted_keys,
                          **kwargs)  # fmt: skip
    if as_json:
        emit_json("tune", result)
        return
    values = result["values"]
    console.print(
        f"wrote {result['path']}: n_threads={values['n_threads']} n_threads_batch={values['n_threads_batch']} "
        f"numa={values['numa']}"
    )
    console.print(f"[dim]{values['derived_from']}[/]", highlight=False)


@click.command()
@bundle_argument
@click.option("--numactl", "numactl_only", is_flag=True, help="Print only the numactl prefix (for run.sh).")
@json_option("numa")
def numa(bundle: str, numactl_only: bool, as_json: bool) -> None:
    """Show how BUNDLE is placed on this box's NUMA nodes (the policy run.sh applies)."""
    from edgekit.runtime.loader import inspect_bundle
    from edgekit.runtime.numa import read_topology

    topology = read_topology()
    if numactl_only and len(topology.usable) <= 1:
        return  # one node: nothing to place, and nothing of the bundle read before run/serve verify it
    info = inspect_bundle(Path(bundle))  # verified before its runtime config is trusted
    if numactl_only:
        click.echo(" ".join(info.numa.numactl))
        return
    if as_json:
        nodes = [{"id": n.id, "cpus": list(n.cpus), "memory_mib": round(n.mem_total / 2**20)} for n in topology.nodes]
        emit_json("numa", {"bundle": bundle, "nodes": nodes, "policy": info.numa.policy, "node": info.numa.node,
                           "reason": info.numa.reason, "numactl": list(info.numa.numactl)})  # fmt: skip
        return
    for node in topology.nodes:
        console.print(f"node {node.id}: {len(node.cpus)} CPUs, {node.mem_total / 2**30:.1f} GiB")
    console.print(f"policy: [bold]{info.numa.policy}[/] — {info.numa.reason}")
    if info.numa.numactl:
        console.print(f"run.sh starts the runtime under: {' '.join(info.numa.numactl)}")


COMMANDS = (run, serve, bench, tune, numa)
