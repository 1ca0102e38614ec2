"""[[targets]] of a recipe, resolved against their backends: options models filled in, ladders expanded.

A target names a backend and a scheme; `scheme = "auto"` names a ladder of candidates instead (the target's
`ladder`, else the backend's `default_ladder`), each a scheme with options over the target's own. Every
candidate is checked like a target of its own, so a bad step is reported before any work, with its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from edgekit._util.suggest import did_you_mean
from edgekit.errors import RecipeProblem
from edgekit.recipe.problems import problems_from
from edgekit.recipe.schema import AUTO, TargetSpec
from edgekit.signoff.gates import Gates

if TYPE_CHECKING:
    from edgekit.backends.base import BuildBackend


@dataclass(frozen=True)
class Candidate:
    """One rung of a ladder: a scheme with its options (the target's, overridden by the step's)."""

    scheme: str
    options: BaseModel
    label: str  # "Q4_K_M+imatrix"


@dataclass(frozen=True)
class Target:
    """A validated target: the backend's own options model is filled in."""

    backend: str
    scheme: str
    name: str
    required: bool
    options: BaseModel
    gates: Gates | None
    note: str | None = None  # shown beside the artifact in the report
    candidates: tuple[Candidate, ...] = ()  # scheme "auto": the ladder, cheapest first
    objective: str = "smallest"


def step_label(scheme: str, options: dict[str, Any]) -> str:
    """A candidate's name in the report: its scheme and the options its step sets, "INT4+ratio=0.8+awq"."""
    parts = [scheme] + [k if v is True else f"{k}={v}" for k, v in options.items()]
    return "+".join(parts)


def _scheme_problem(key: str, backend: BuildBackend, scheme: str) -> RecipeProblem | None:
    if scheme in backend.schemes:
        return None
    return RecipeProblem(
        f"{key}.scheme",
        f"{scheme!r} is not a {backend.name} scheme; expected one of {', '.join(backend.schemes)}"
        + ("" if "ladder" in key else f' or "{AUTO}" (a ladder of them)'),
        did_you_mean(scheme, backend.schemes),
    )


def _checked_options(
    backend: BuildBackend, scheme: str, options: dict[str, Any], key: str
) -> tuple[BaseModel | None, list[RecipeProblem]]:
    """The backend's options model for `options`, or the problems with them (keys under `key`)."""
    try:
        model = backend.options_model.model_validate(options)
    except ValidationError as exc:
        return None, problems_from(exc, backend.options_model, prefix=f"{key}.options", data=options)
    found = backend.check_target(scheme, model)
    return model, [RecipeProblem(f"{key}.{p.key}" if p.key else key, p.problem, p.suggestion) for p in found]


def _ladder(spec: TargetSpec, backend: BuildBackend, key: str) -> tuple[list[Candidate], list[RecipeProblem]]:
    steps = spec.ladder if spec.ladder is not None else backend.default_ladder
    if not steps:
        problem = (
            f'the {backend.name} backend has no default ladder for scheme = "{AUTO}"; list the candidates, e.g. '
            f'ladder = ["{backend.schemes[0]}"]'
        )
        return [], [RecipeProblem(f"{key}.ladder", problem)]
    candidates, problems = [], []
    for j, step in enumerate(steps):
        if isinstance(step, tuple):  # a backend's default: (scheme, options)
            scheme, own = step[0], dict(step[1])
        else:
            scheme, own = (step, {}) if isinstance(step, str) else (step.scheme, dict(step.options))
        where = f"{key}.ladder[{j}]" if spec.ladder is not None else key
        if (refused := _scheme_problem(where, backend, scheme)) is not None:
            problems.append(refused)
            continue
        model, found = _checked_options(backend, scheme, {**spec.options, **own}, where)
        problems += [p for p in found if p not in problems]
        if model is not None and not found:
            candidates.append(Candidate(scheme, model, step_label(scheme, own)))
    labels = [c.label for c in candidates]
    for label in {x for x in labels if labels.count(x) > 1}:
        problems.append(RecipeProblem(f"{key}.ladder", f"candidate {label!r} is listed twice; remove one"))
    return candidates, problems


def _resolve_one(
    spec: TargetSpec, backend: BuildBackend, key: str, name: str
) -> tuple[Target | None, list[RecipeProblem]]:
    if spec.scheme == AUTO:
        candidates, problems = _ladder(spec, backend, key)
        if problems:
            return None, problems
        try:
            base = backend.options_model.model_validate(spec.options)
        except ValidationError as exc:
            return None, problems_from(exc, backend.options_model, prefix=f"{key}.options", data=spec.options)
        objective = spec.objective or "smallest"
        return Target(spec.backend, AUTO, name, spec.required, base, spec.gates, spec.note, tuple(candidates),
                      objective), []  # fmt: skip
    if (problem := _scheme_problem(key, backend, spec.scheme)) is not None:
        return None, [problem]
    options, problems = _checked_options(backend, spec.scheme, spec.options, key)
    if options is None:
        return None, problems
    return Target(spec.backend, spec.scheme, name, spec.required, options, spec.gates, spec.note), problems


def resolve_targets(specs: tuple[TargetSpec, ...]) -> tuple[list[Target], list[RecipeProblem]]:
    """`[[targets]]` (validated TargetSpec tables) resolved against their backends, and every problem found."""
    from edgekit.backends.catalog import build_backends

    backends = build_backends()
    targets: list[Target] = []
    problems: list[RecipeProblem] = []
    seen: dict[str, int] = {}
    for i, t in enumerate(specs):
        key = f"targets[{i}]"
        backend = backends.get(t.backend)
        if backend is None:
            expected = f"unknown backend {t.backend!r}; expected one of {', '.join(sorted(backends))}"
            problems.append(RecipeProblem(f"{key}.backend", expected, did_you_mean(t.backend, backends)))
            continue
        name = t.name or backend.artifact_name(t.scheme)
        target, found = _resolve_one(t, backend, key, name)
        problems += found
        if target is None:
            continue
        if name in seen:
            problems.append(RecipeProblem(f"{key}.name", f"artifact name {name!r} is already used by "
                                          f"targets[{seen[name]}]; remove the duplicate or give one of them a "
                                          "distinct `name`"))  # fmt: skip
            continue
        seen[name] = i
        targets.append(target)
    return targets, problems
