"""`edgekit probe`: what a model of a given size will do on this box, before one is chosen.

The recipe is `edgekit/recipes/probe-1b.toml` (a synthetic:// source: random weights, real tokenizer,
validation off), with the size and the targets the command line asks for. It builds like any recipe
(every stage cached: a second probe only benchmarks again when the bench's inputs changed), and its
bench measures every artifact against llama.cpp's own `llama-bench` when the toolchain has it.
"""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomli_w

from edgekit._util.suggest import did_you_mean
from edgekit.backends.catalog import build_backends
from edgekit.errors import MissingDependencyError, UsageError
from edgekit.recipe.load import Recipe, parse_recipe
from edgekit.sources.synthetic import PRESETS
from edgekit.sources.synthetic import parse as parse_synthetic

PROBE_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "probe-1b.toml"


def probe_recipe(
    params: str | None = None,
    schemes: Sequence[str] | None = None,
    arch: str | None = None,
    runs: int | None = None,
) -> tuple[Recipe, str]:
    """The probe recipe for this size, architecture and targets, and the command that reproduces it."""
    data = tomllib.loads(PROBE_RECIPE.read_text(encoding="utf-8"))
    spec = parse_synthetic(data["model"]["source"])
    size = _preset(params) if params else spec.label
    arch = (arch or spec.arch).lower()
    data["model"]["source"] = f"synthetic://{arch}?params={size}"
    data["targets"] = _targets(schemes) if schemes else _installed(data["targets"])
    if runs is not None:
        data["bench"]["runs"] = runs
    data["bundle"]["name"] = f"probe-{arch}-{size}".lower() if arch != spec.arch else f"probe-{size}".lower()
    command = ["edgekit", "probe", "--params", str(size), "--arch", arch]
    if schemes:
        command += ["--schemes", ",".join(schemes)]
    if runs is not None:
        command += ["--runs", str(runs)]
    text = f"# {shlex.join(command)}\n# from {PROBE_RECIPE.name}, as the command line changed it\n\n"
    text += tomli_w.dumps(data)
    path = PROBE_RECIPE.with_name(f"{data['bundle']['name']}.toml")
    return parse_recipe(text.encode("utf-8"), path), shlex.join(command)


def _preset(params: str) -> str:
    found = next((p for p in PRESETS if p.lower() == params.lower()), None)
    if found is None:
        hint = did_you_mean(params, PRESETS)
        raise UsageError(
            f"--params {params}: not a preset size" + (f" (did you mean {hint}?)" if hint else ""),
            f"use one of {', '.join(PRESETS)}",
        )
    return found


def _targets(schemes: Sequence[str]) -> list[dict[str, Any]]:
    """`Q4_K_M` (a scheme only one backend has) or `openvino:INT8`, as recipe targets."""
    backends = build_backends()
    out: list[dict[str, Any]] = []
    for item in schemes:
        backend, _, scheme = item.rpartition(":")
        owners = [backend] if backend else [n for n, b in backends.items() if scheme in b.schemes]
        if backend and (backend not in backends or scheme not in backends[backend].schemes):
            known = [f"{n}:{s}" for n, b in backends.items() for s in b.schemes]
            hint = did_you_mean(item, known)
            raise UsageError(f"--schemes: no {item!r}" + (f" (did you mean {hint!r}?)" if hint else ""),
                             f"choose from {', '.join(known)}")  # fmt: skip
        if not owners:
            known = sorted({s for b in backends.values() for s in b.schemes})
            hint = did_you_mean(scheme, known)
            hint_text = f" (did you mean {hint!r}?)" if hint else ""
            raise UsageError(f"--schemes: no backend has the scheme {scheme!r}{hint_text}",
                             f"choose from {', '.join(known)}")  # fmt: skip
        if len(owners) > 1:
            raise UsageError(f"--schemes: {scheme} is a scheme of {' and '.join(owners)}",
                             f"say which: {', '.join(f'{o}:{scheme}' for o in owners)}")  # fmt: skip
        out.append({"backend": owners[0], "scheme": scheme})
    return out


def _installed(targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recipe's targets whose backend can build here (the optional ones of a missing backend left out)."""
    backends = build_backends()
    kept = []
    for target in targets:
        try:
            backends[target["backend"]].require()
        except MissingDependencyError:
            if target.get("required", True):
                raise
            continue
        kept.append(target)
    return kept
