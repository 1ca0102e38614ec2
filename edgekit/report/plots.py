"""The report's figures, drawn with matplotlib from report.json alone (no cache, no model).

Each function takes the report dict and returns PNG bytes, or None when the report holds nothing to
draw (no validation, no bench). The PNGs are embedded in report.html as data URIs and written under
plots/ for report.md, so both work offline and inside the bundle.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from typing import Any

VERDICT_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "inconclusive": "#bf8700"}
NOISE_COLOUR = "#57606a"
OTHER_COLOUR = "#0969da"
SERIES = ("#0969da", "#8250df", "#bf3989", "#1a7f37", "#bc4c00", "#0a3069", "#6e7781", "#4d2d00")
DPI = 144


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 9,
            "axes.titlesize": 10,
            "axes.titleweight": "bold",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "svg.fonttype": "path",
        }
    )
    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _validated(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in report.get("artifacts", []) if a.get("metrics")]


def _colour(verdict: str | None) -> str:
    return VERDICT_COLOURS.get(verdict or "", OTHER_COLOUR)


def _error_bar(value: float, low: float | None, high: float | None) -> list[list[float]] | None:
    """matplotlib's [[below], [above]]; a percentile interval need not hold its point estimate (a mean of ~1e-7
    next to its resamples' rounding), and a bar cannot be negative."""
    if low is None or high is None:
        return None
    return [[max(0.0, value - low)], [max(0.0, high - value)]]


def _est(metrics: dict[str, Any], key: str) -> tuple[float, float | None, float | None] | None:
    m = metrics.get(key)
    if not m or m.get("value") is None or (isinstance(m["value"], float) and math.isnan(m["value"])):
        return None
    low, high = (m.get("ci95") or [None, None])[:2]
    return m["value"], low, high


def size_vs_kld(report: dict[str, Any]) -> bytes | None:
    rows = [a for a in _validated(report) if a.get("size") and _est(a["metrics"], "kld_mean")]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    gate_drawn = False
    for i, a in enumerate(sorted(rows, key=lambda r: r["size"])):
        value, low, high = _est(a["metrics"], "kld_mean")  # type: ignore[misc]
        x = a["size"] / 2**20
        colour = _colour(a["verdict"])
        yerr = _error_bar(value, low, high)
        ax.errorbar([x], [value], yerr=yerr, fmt="o", ms=7, capsize=4, color=colour, zorder=3)
        ax.annotate(
            f"{a['name']}  {value:.3g}\n{a['verdict']}",
            (x, value),
            textcoords="offset points",
            xytext=(-10, -24) if i % 2 == 0 else (9, 4),
            ha="right" if i % 2 == 0 else "left",
            fontsize=8,
            color=colour,
            fontweight="bold",
        )
        gate = (a.get("gates") or {}).get("kld_mean_max")
        if gate:
            ax.plot([x], [gate], marker="_", ms=16, mew=2, color=colour, alpha=0.55, zorder=2,
                    label=None if gate_drawn else "its mean-KLD gate")  # fmt: skip
            ax.plot([x, x], [value, gate], color=colour, alpha=0.25, lw=1, ls=":", zorder=1)
            gate_drawn = True
    noise = (report.get("noise_floor") or {}).get("metrics") or {}
    if _est(noise, "kld_mean"):
        value = _est(noise, "kld_mean")[0]  # type: ignore[index]
        ax.axhline(value, ls="--", color=NOISE_COLOUR, lw=1)
        ax.annotate(
            f"noise floor ({report['noise_floor'].get('dtype')} reference) {value:.2g}",
            (0.01, value),
            xycoords=("axes fraction", "data"),
            textcoords="offset points",
            xytext=(0, 3),
            fontsize=7,
            color=NOISE_COLOUR,
        )
    ax.set_yscale("log")
    ax.set_xlabel("artifact size (MiB)")
    ax.set_ylabel("mean KLD vs reference (nats/token)")
    ax.set_title("Size vs accuracy loss (lower left is better; bars: 95% CI)")
    if gate_drawn:
        ax.legend(fontsize=7, frameon=False, loc="upper right")
    xs = [a["size"] / 2**20 for a in rows]
    span = max(xs) - min(xs) or max(xs) * 0.2
    ax.set_xlim(min(xs) - 0.55 * span, max(xs) + 0.45 * span)
    return _png(fig)


def kld_distributions(report: dict[str, Any]) -> bytes | None:
    series = [(a["name"], a["kld_distribution"], SERIES[i % len(SERIES)]) for i, a in
              enumerate(x for x in _validated(report) if x.get("kld_distribution"))]  # fmt: skip
    noise = report.get("noise_floor") or {}
    if noise.get("kld_distribution"):
        series.append((f"noise floor ({noise.get('dtype')})", noise["kld_distribution"], NOISE_COLOUR))
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for label, dist, colour in series:
        edges, counts, n = dist["edges"], dist["counts"], max(1, dist["n"])
        fractions = [c / n for c in counts]
        ax.stairs(fractions, edges, label=f"{label} (n={dist['n']:,})", color=colour, lw=1.6)
        median = (dist.get("quantiles") or {}).get("0.5")
        if median and median > 0:
            ax.axvline(median, color=colour, lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("per-token KL(reference ‖ artifact), nats (log scale; dotted: medians)")
    ax.set_ylabel("fraction of scored tokens")
    ax.set_title("Per-token KLD distribution")
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    return _png(fig)


def perplexity(report: dict[str, Any]) -> bytes | None:
    rows = _validated(report)
    if not rows:
        return None
    entries: list[tuple[str, dict[str, Any], str, float | None]] = []
    first = rows[0]["metrics"]
    if _est(first, "ppl_reference"):
        ref = report.get("reference") or {}
        entries.append((f"reference ({ref.get('dtype', '?')})", {"ppl": first["ppl_reference"]}, "#24292f", None))
    noise = report.get("noise_floor") or {}
    if noise.get("metrics"):
        entries.append((f"noise floor ({noise.get('dtype')})", noise["metrics"], NOISE_COLOUR, None))
    for a in rows:
        entries.append((a["name"], a["metrics"], _colour(a["verdict"]), (a.get("gates") or {}).get("ppl_ratio_max")))
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.6, 0.5 * len(entries) + 1.4), sharey=True)
    labels = [e[0] for e in entries]
    ys = list(range(len(entries)))[::-1]
    for y, (_, metrics, colour, gate) in zip(ys, entries, strict=True):
        for ax, key in ((left, "ppl"), (right, "ppl_ratio")):
            est = _est(metrics, key)
            if est is None:
                continue
            value, low, high = est
            xerr = _error_bar(value, low, high)
            ax.errorbar([value], [y], xerr=xerr, fmt="o", color=colour, capsize=3, ms=5)
        if gate:
            right.plot([gate], [y], marker="|", ms=14, mew=2, color=colour, alpha=0.6)
    right.axvline(1.0, color=NOISE_COLOUR, lw=0.8, ls="--")
    left.set_yticks(ys, labels)
    left.set_xlabel("perplexity on the eval text")
    right.set_xlabel("PPL ratio artifact / reference (|: gate)")
    left.set_title("Perplexity (95% CI)")
    right.set_title("Paired PPL ratio (95% CI)")
    fig.tight_layout()
    return _png(fig)


def tensor_types(report: dict[str, Any]) -> bytes | None:
    from edgekit.report.text import type_params

    rows = [a for a in report.get("artifacts", []) if a.get("tensor_types")]
    if not rows:
        return None
    totals: dict[str, int] = {}
    for a in rows:
        for t, v in a["tensor_types"].items():
            totals[t] = totals.get(t, 0) + type_params(v)
    order = sorted(totals, key=lambda t: -totals[t])
    palette = ("#0969da", "#1a7f37", "#bf8700", "#cf222e", "#8250df", "#57606a", "#bc4c00", "#bf3989", "#0a3069")
    colours = {t: palette[i % len(palette)] for i, t in enumerate(order)}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(rows) + 1.3))
    ys = list(range(len(rows)))[::-1]
    for y, a in zip(ys, rows, strict=True):
        total = sum(type_params(v) for v in a["tensor_types"].values()) or 1
        left = 0.0
        for t in order:
            share = type_params(a["tensor_types"].get(t)) / total
            if share <= 0:
                continue
            ax.barh(y, share, left=left, color=colours[t], edgecolor="white", height=0.6)
            if share >= 0.06:
                ax.text(left + share / 2, y, t, ha="center", va="center", fontsize=7, color="white")
            left += share
    ax.set_yticks(ys, [a["name"] for a in rows])
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_xlabel("share of parameters by tensor type actually written")
    ax.set_title("Tensor-type mix per artifact")
    ax.grid(axis="y", visible=False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[t]) for t in order]
    ax.legend(handles, order, fontsize=7, frameon=False, ncol=min(8, len(order)), loc="upper center",
              bbox_to_anchor=(0.5, -0.35 if len(rows) < 3 else -0.2))  # fmt: skip
    return _png(fig)


# --- bench ---------------------------------------------------------------------------------------
# The bench stage (edgekit.stages.bench) documents its layout; these read what they know of it and
# ignore the rest, so a report from an older or newer bench still renders.


def _number(value: Any) -> float | None:
    """A plain number, or the median of a {median, min, max, n} summary."""
    if isinstance(value, dict) and "median" in value:
        value = value["median"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(float(value)) else float(value)


def _to_float(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def bench_artifacts(bench: dict[str, Any]) -> dict[str, dict[str, Any]]:
    per = bench.get("artifacts")
    if isinstance(per, list):
        per = {str(a.get("name", i)): a for i, a in enumerate(per) if isinstance(a, dict)}
    if not isinstance(per, dict):
        return {}
    return {str(k): v for k, v in per.items() if isinstance(v, dict) and not v.get("skipped")}


def bench_series(bench: dict[str, Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric → artifact → sorted (x, y) points, for every `{number: number}` map of an artifact
    (decode tok/s by concurrent sequences, by threads, ...) and `[{x_key: x, y_key: y}, ...]` list."""
    found: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for name, data in bench_artifacts(bench).items():
        for key, value in data.items():
            points: list[tuple[float, float]] = []
            if isinstance(value, dict) and "median" not in value:
                for k, v in value.items():
                    x, y = _to_float(k), _number(v)
                    if x is not None and y is not None:
                        points.append((x, y))
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                for item in value:
                    nums = [n for n in (_number(v) for v in item.values()) if n is not None]
                    if len(nums) >= 2:
                        points.append((nums[0], nums[1]))
            if len(points) >= 2 and len(points) == len(value):
                found.setdefault(key, {})[name] = sorted(points)
    return found


def bench_scalars(bench: dict[str, Any]) -> dict[str, dict[str, float]]:
    """metric → {artifact: value} for the numeric scalars (or summaries) of each artifact's bench entry."""
    out: dict[str, dict[str, float]] = {}
    for name, data in bench_artifacts(bench).items():
        for key, value in data.items():
            if (v := _number(value)) is not None:
                out.setdefault(key, {})[name] = v
    return out


def _lines(ax: Any, by_artifact: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str) -> None:
    for i, (name, points) in enumerate(sorted(by_artifact.items())):
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=name, color=SERIES[i % len(SERIES)], ms=4)
    xs = sorted({p[0] for points in by_artifact.values() for p in points})
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, frameon=False)


def _grouped(ax: Any, scalars: dict[str, dict[str, float]], keys: list[tuple[str, str]], title: str, unit: str) -> None:
    names = sorted({n for key, _ in keys for n in scalars.get(key, {})})
    width = 0.8 / max(1, len(keys))
    for j, (key, label) in enumerate(keys):
        values = [scalars.get(key, {}).get(n, float("nan")) for n in names]
        xs = [i + (j - (len(keys) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, values, width=width * 0.95, label=label, color=SERIES[j % len(SERIES)])
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set_title(title)
    ax.set_ylabel(unit)
    ax.grid(axis="x", visible=False)
    ax.legend(fontsize=7, frameon=False)


def bench(report: dict[str, Any]) -> bytes | None:
    data = report.get("bench")
    if not isinstance(data, dict):
        return None
    series, scalars = bench_series(data), bench_scalars(data)
    panels: list[Callable[[Any], None]] = []
    known_series = [
        ("decode_tok_s_by_sequences", "Decode, all sequences together", "concurrent sequences", "tok/s"),
        ("decode_tok_s_by_threads", "Decode by threads (one sequence)", "threads", "tok/s"),
        ("peak_rss_mib_by_sequences", "Peak RSS by concurrent sequences", "concurrent sequences", "MiB"),
    ]
    for key, title, xlabel, ylabel in known_series:
        if key in series:
            panels.append(functools.partial(_lines, by_artifact=series[key], title=title, xlabel=xlabel, ylabel=ylabel))
    known_bars = [
        ([("decode_tok_s", "edgekit"), ("peer_decode_tok_s", "llama-bench"),
          ("baseline_decode_tok_s", "Llama() defaults"), ("roofline_tok_s", "bandwidth roof"),
          ("compute_roof_tok_s", "compute roof")], "Decode, one sequence", "tok/s"),
        ([("prompt_tok_s", "edgekit"), ("peer_prompt_tok_s", "llama-bench")], "Prompt processing", "tok/s"),
        ([("decode_over_peer", "decode ÷ llama-bench"), ("prompt_over_peer", "prompt ÷ llama-bench"),
          ("roofline_ratio", "decode ÷ bandwidth roof"), ("compute_roof_ratio", "decode ÷ compute roof")],
         "Against the peer and the roofs", "ratio"),
        ([("first_token_ms_mmap_cold", "mmap, cold"), ("first_token_ms_no_mmap_cold", "no mmap, cold"),
          ("first_token_ms_mmap_warm", "mmap, warm"), ("first_token_ms_no_mmap_warm", "no mmap, warm")],
         "Load to first token", "ms"),
        ([("ttft_ms", "tuned"), ("baseline_ttft_ms", "Llama() defaults")], "Time to first token (prompt)", "ms"),
    ]  # fmt: skip
    for keys, title, unit in known_bars:
        present = [(k, label) for k, label in keys if k in scalars]
        if present:
            panels.append(functools.partial(_grouped, scalars=scalars, keys=present, title=title, unit=unit))
    if not panels:  # an unknown layout: plot whatever series it has
        for key, by_artifact in sorted(series.items())[:4]:
            panels.append(
                functools.partial(_lines, by_artifact=by_artifact, title=key.replace("_", " "), xlabel="", ylabel="")
            )
    if not panels:
        return None
    plt = _pyplot()
    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(9.6, 3.0 * rows), squeeze=False)
    for ax, draw in zip(axes.flat, panels, strict=False):
        draw(ax)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    machine = found if isinstance(found := data.get("machine"), dict) else {}
    where = f" on {machine.get('cpu_model')}, {machine.get('physical_cores')} cores" if machine.get("cpu_model") else ""
    fig.suptitle(f"Benchmark{where}", fontweight="bold", fontsize=10)
    fig.tight_layout()
    return _png(fig)


FIGURES: dict[str, tuple[str, Callable[[dict[str, Any]], bytes | None]]] = {
    "size_vs_kld": ("Size vs mean KLD", size_vs_kld),
    "kld_distribution": ("Per-token KLD distribution", kld_distributions),
    "perplexity": ("Perplexity and PPL ratio with 95% intervals", perplexity),
    "tensor_types": ("Tensor-type mix", tensor_types),
    "bench": ("Benchmark", bench),
}


def render_all(report: dict[str, Any]) -> dict[str, tuple[str, bytes]]:
    """name → (title, PNG bytes) for every figure the report has data for."""
    out = {}
    for name, (title, fn) in FIGURES.items():
        png = fn(report)
        if png:
            out[name] = (title, png)
    return out
