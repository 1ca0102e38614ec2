"""Each [[targets]] entry as tasks: quantize (after its importance matrix), validate, and the report-only extras
(the artifact without its matrix, per-layer sensitivity); a `scheme = "auto"` target as its ladder of candidates.

Every candidate of a ladder is a complete target plan whose tasks are keyed like any target's, so a candidate
that is also a target of the recipe (or of another ladder) is built and validated once.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from pydantic import BaseModel

from edgekit.backends.base import BuildBackend
from edgekit.gates import Gates
from edgekit.plan.calibration import Calibration
from edgekit.plan.tasks import (
    AutoTarget,
    Bootstrap,
    Comparison,
    ConvertTask,
    ImatrixTask,
    QuantizeTask,
    ReferenceTask,
    SensitivityTask,
    TargetPlan,
    ValidateTask,
)
from edgekit.recipe import AUTO, Recipe, Target
from edgekit.registry import build_backend

GATE_NAMES = tuple(Gates.model_fields)
REPORT_ONLY = {"sensitivity", "sensitivity_windows", "sensitivity_budget_seconds"}  # never change the artifact
SENSITIVITY_BASE = "Q8_0"


@dataclass(frozen=True)
class TargetInputs:
    """What planning any target of this recipe needs besides the target itself."""

    recipe: Recipe
    convert: ConvertTask
    reference: ReferenceTask | None
    bootstrap: Bootstrap
    calibration: Calibration


def plan_target(inputs: TargetInputs, target: Target, position: int) -> TargetPlan | AutoTarget:
    if target.scheme != AUTO:
        return _candidate(inputs, target, target.scheme, target.options, target.name, "")
    candidates = tuple(
        _candidate(inputs, target, c.scheme, c.options, f"{target.name}.{_slug(c.label)}", c.label)
        for c in target.candidates
    )
    return AutoTarget(target.name, target.backend, target.required, target.note, position, target.objective,
                      candidates)  # fmt: skip


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40]


def _candidate(
    inputs: TargetInputs, target: Target, scheme: str, options: BaseModel, name: str, label: str
) -> TargetPlan:
    backend = build_backend(target.backend)
    levers = backend.levers(scheme, options)
    quantize = _quantize(inputs, backend, scheme, options, name)
    reference = inputs.reference
    validate = ValidateTask(quantize, reference, inputs.bootstrap) if reference is not None else None
    comparisons = []
    for lever, without in levers.without.items() if reference is not None else ():
        twin = _quantize(inputs, backend, scheme, without, f"{name}.no-{lever}")
        comparisons.append(Comparison(lever, twin, ValidateTask(twin, reference, inputs.bootstrap)))  # type: ignore[arg-type]
    sensitivity = None
    if levers.sensitivity is not None and reference is not None and scheme != SENSITIVITY_BASE:
        base_options = backend.options_model()
        base = _quantize(inputs, backend, SENSITIVITY_BASE, base_options, f"{name}.sensitivity-base")
        sensitivity = SensitivityTask(quantize, base, reference, *levers.sensitivity)
    return TargetPlan(
        name=target.name,
        backend=target.backend,
        scheme=scheme,
        required=target.required,
        note=target.note,
        gates=backend.default_gates(scheme).merged(inputs.recipe.spec.validation.gates, target.gates),
        gate_sources=_gate_sources(inputs.recipe, target, scheme),
        quantize=quantize,
        validate=validate,
        comparisons=tuple(comparisons),
        sensitivity=sensitivity,
        label=label,
    )


def _quantize(inputs: TargetInputs, backend: BuildBackend, scheme: str, options: BaseModel, name: str) -> QuantizeTask:
    resolved = backend.resolve_options(scheme, options)
    levers = backend.levers(scheme, resolved)
    calibration = inputs.calibration
    imatrix = None
    if levers.imatrix is not None:
        chunks, context = levers.imatrix
        first = math.ceil(calibration.start_token / context)
        imatrix = ImatrixTask(inputs.convert, calibration.text, first, chunks, context, levers.tools or {},
                              source=calibration.source)  # fmt: skip
    return QuantizeTask(
        converted=inputs.convert,
        backend=backend.name,
        scheme=scheme,
        options=resolved.model_dump(mode="json", exclude=REPORT_ONLY),
        versions=inputs.convert.versions,
        calibration=calibration.text if backend.needs_calibration(scheme, resolved) else None,
        imatrix=imatrix,
        tools=levers.tools,
        name=name,
    )


def _gate_sources(recipe: Recipe, target: Target, scheme: str) -> dict[str, str]:
    """Where each threshold came from: the backend's per-scheme default, [validation.gates] or the target."""
    section = recipe.spec.validation.gates
    overridden = set(section.model_fields_set) if section is not None else set()
    own = set(target.gates.model_fields_set) if target.gates is not None else set()

    def source(gate: str) -> str:
        if gate in own:
            return f"recipe [[targets]] {target.name}"
        return "recipe [validation.gates]" if gate in overridden else f"default for {target.backend} {scheme}"

    return {gate: source(gate) for gate in GATE_NAMES}


def renamed(plan: TargetPlan, name: str) -> TargetPlan:
    """A candidate as the bundle keeps it: under the target's name (names are not part of any key)."""
    quantize = dataclasses.replace(plan.quantize, name=name)
    validate = dataclasses.replace(plan.validate, artifact=quantize) if plan.validate is not None else None
    sensitivity = dataclasses.replace(plan.sensitivity, artifact=quantize) if plan.sensitivity is not None else None
    return dataclasses.replace(plan, name=name, quantize=quantize, validate=validate, sensitivity=sensitivity)
