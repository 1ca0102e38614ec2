"""Display models of the sign-off's newer sections: where an artifact differs, how it was validated (engine,
sequential looks), what would decide an open gate, and cache repairs. Reads the report dict only."""

from __future__ import annotations

from typing import Any

from edgekit.report.text import fmt

SHOWN_KLD = 1.0  # a token's background is fully coloured at this KLD (nats)


def engine_text(engine: dict[str, Any] | None) -> str:
    if not engine:
        return ""
    mmap = "mmap" if engine.get("use_mmap", True) else "no mmap"
    return (
        f"{engine.get('backend', '')} runtime engine, as runtime.toml configures it: n_ctx {engine.get('n_ctx')}, "
        f"n_batch {engine.get('n_batch')}, {engine.get('n_threads')} threads, {mmap}"
    )


def sequential_text(seq: dict[str, Any] | None) -> str:
    if not seq:
        return ""
    how = "every gate decided" if seq.get("decided") else "stopped at max_tokens with a gate still undecided"
    return (
        f"Evaluated in looks ([validation] decide): {how} at look {seq['looks']} of {seq['max_looks']} "
        f"({seq['windows']} of {seq['of_windows']} windows, {seq['scored_tokens']:,} scored tokens); intervals at "
        f"{100 * seq['level']:.4g}% for the repeated looks ({seq['method']})."
    )


def to_decide_text(check: dict[str, Any], tokens_per_window: tuple[int, int] | None) -> str:
    """What sample would decide an inconclusive gate at the observed effect."""
    if check.get("verdict") != "inconclusive":
        return ""
    n = check.get("n_to_decide")
    if not n:
        return "the value sits on the threshold: no sample size decides it"
    unit = check.get("unit", "tokens")
    text = f"≈ {n:,} {'scored tokens' if unit == 'tokens' else unit} would decide it"
    if unit == "tokens" and tokens_per_window:
        scored, length = tokens_per_window
        text += f" (max_tokens ≈ {-(-n // scored) * length:,})"
    return text


def _token(t: dict[str, Any]) -> dict[str, Any]:
    differs = t["reference_top1"] != t["artifact_top1"]
    md = _md_token(t["text"])
    if t["worst"] and md.strip():  # bold the word, not the space before it
        core = md.lstrip()
        md = f"{md[: len(md) - len(core)]}**{core}**"
    return {
        "text": t["text"],
        "md": md,
        "kld": fmt(t["kld"]),
        "alpha": f"{min(1.0, max(0.0, t['kld']) / SHOWN_KLD):.2f}",
        "worst": t["worst"],
        "differs": differs,
        "reference": t["reference_top1"],
        "artifact": t["artifact_top1"],
        "md_note": _md_note(t) if differs else "",
    }


def _md_note(t: dict[str, Any]) -> str:
    return f" [ref ‘{_md_token(t['reference_top1'])}’ / art ‘{_md_token(t['artifact_top1'])}’]"


def _md_token(text: str) -> str:
    for raw, shown in (("\n", "⏎"), ("|", "\\|"), ("*", "\\*"), ("_", "\\_"), ("`", "'"), ("[", "\\["), ("]", "\\]")):
        text = text.replace(raw, shown)
    return text


def differences_view(artifact: dict[str, Any]) -> dict[str, Any]:
    found = artifact.get("differences") or {}
    spans = [
        {
            "kld": fmt(s["kld"]),
            "where": f"window {s['window'] + 1}, token {s['token']}",
            "context": s["context"],
            "md_context": s["context"].replace("\n", " ").replace("|", "\\|")[-120:],
            "tokens": [_token(t) for t in s["tokens"]],
        }
        for s in found.get("spans") or []
    ]
    completions = [
        {**c, "identical": c.get("diverges_at") is None, "prompt_md": c["prompt"].replace("|", "\\|")}
        for c in found.get("completions") or []
    ]
    return {"spans": spans, "completions": completions}


def repairs_view(repairs: list[dict[str, Any]] | None) -> list[str]:
    out = []
    for r in repairs or []:
        files = ", ".join(f"{f['file']} (recorded {f['recorded_sha256'][:12]}…, found {f['found_sha256'][:12]}…)"
                          for f in r.get("files", []))  # fmt: skip
        same = "the rebuilt bytes are the ones recorded before" if r.get("rebuilt_identical") else (
            "the rebuilt bytes differ from the recorded ones, so everything measured on them was remade")  # fmt: skip
        out.append(f"{r['artifact']}: the cached artifact differed from its recorded sha256 ({files}); {r['action']}; "
                   f"{same}.")  # fmt: skip
    return out


def memory_view(memory: dict[str, Any] | None, reference: dict[str, Any] | None) -> dict[str, str | None]:
    """One line for the reference's memory mode and one for peak resident memory per stage (None: not measured)."""
    out: dict[str, str | None] = {"reference": None, "peaks": None}
    if reference:
        how = "one decoder layer at a time" if reference["mode"] == "stream" else "the whole model at once"
        out["reference"] = (
            f'{how} (reference_memory = "{reference["requested"]}"; estimated {reference["estimate_full_mib"]:,} MiB '
            f"whole, {reference['estimate_stream_mib']:,} MiB streamed; {reference['available_mib']:,} MiB "
            f"available, {reference['limited_by']})"
        )
    if memory:
        stages = [
            f"{name} {m['rss_anon_peak_mib']:,} + {m['rss_file_peak_mib']:,}" for name, m in memory["stages"].items()
        ]
        build = memory["build"]
        stages.append(f"this build {build['rss_anon_peak_mib']:,} + {build['rss_file_peak_mib']:,}")
        out["peaks"] = "; ".join(stages)
    return out
