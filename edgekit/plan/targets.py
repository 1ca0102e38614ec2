"""Each [[targets]] entry as tasks: quantize (after its importance matrix), validate, and the report-only extras
(the artifact without its matrix, per-layer sensitivity); a `scheme = "auto"` target as its ladder of candidates.

Every candidate of a ladder is a complete target plan whose tasks are keyed like any target's, so a candidate
that is also a target of the recipe (or of another ladder) is built and validated once.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from edgekit.backends.base import BuildBackend
from edgekit.backends.catalog import build_backend
from edgekit.plan.calibration import CalibrationSource
from edgekit.plan.tasks import (
    AutoTarget,
    Bootstrap,
    Comparison,
    ConvertTask,
    Decide,
    EngineSettings,
    ImatrixTask,
    QuantizeTask,
    ReferenceTask,
    SensitivityTask,
    SmokeTask,
    TargetPlan,
    ValidateTask,
)
from edgekit.recipe.load import Recipe
from edgekit.recipe.schema import AUTO
from edgekit.recipe.targets import Target
from edgekit.signoff.gates import Gates

GATE_NAMES = tuple(Gates.model_fields)
REPORT_ONLY = {"sensitivity", "sensitivity_windows", "sensitivity_budget_seconds"}  # never change the artifact
SENSITIVITY_BASE = "Q8_0"


@dataclass(frozen=True)
class TargetInputs:
    """What planning any target of this recipe needs besides the target itself."""

    recipe: Recipe
    converts: dict[str, ConvertTask]  # by backend
    reference: ReferenceTask | None
    bootstrap: Bootstrap
    calibration: CalibrationSource | None  # None: no target (nor candidate) is data-aware
    threads: int

    def engine(self) -> EngineSettings:
        """What runtime.toml will hold before the bench tunes the threads: validation runs the engine that way."""
        runtime = self.recipe.spec.bundle.runtime
        return EngineSettings(n_ctx=runtime.n_ctx, n_batch=runtime.n_batch, n_threads=self.threads)

    def validate(self, quantize: QuantizeTask, gates: Gates) -> ValidateTask | None:
        if self.reference is None:
            return None
        cfg = self.recipe.spec.validation
        decide = Decide(gates, cfg.looks) if cfg.decide else None
        return ValidateTask(quantize, self.reference, self.bootstrap, self.engine(), decide)

    def smoke(self, quantize: QuantizeTask) -> SmokeTask:
        from edgekit.runtime import smoke

        runtime = self.recipe.spec.bundle.runtime
        settings = {"n_ctx": runtime.n_ctx, "n_batch": runtime.n_batch, "max_concurrent": 1,
                    "warmup_tokens": runtime.warmup_tokens}  # fmt: skip
        return SmokeTask(quantize, smoke.PROMPTS, smoke.TOKENS, settings, smoke.METHOD)


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
    needs = backend.quantize_needs(scheme, options)
    convert = inputs.converts[target.backend]
    quantize = _quantize(inputs, convert, backend, scheme, options, name)
    reference = inputs.reference
    gates = backend.default_gates(scheme).merged(inputs.recipe.spec.validation.gates, target.gates)
    comparisons = []
    for lever, without in needs.without.items() if reference is not None else ():
        twin = _quantize(inputs, convert, backend, scheme, without, f"{name}.no-{lever}")
        comparisons.append(Comparison(lever, twin, inputs.validate(twin, gates)))  # type: ignore[arg-type]
    sensitivity = None
    if needs.sensitivity is not None and reference is not None and scheme != SENSITIVITY_BASE:
        base_options = backend.options_model()
        base = _quantize(inputs, convert, backend, SENSITIVITY_BASE, base_options, f"{name}.sensitivity-base")
        sensitivity = SensitivityTask(quantize, base, reference, *needs.sensitivity)
    return TargetPlan(
        name=target.name,
        backend=target.backend,
        scheme=scheme,
        required=target.required,
        note=target.note,
        gates=gates,
        gate_sources=_gate_sources(inputs.recipe, target, scheme),
        quantize=quantize,
        validate=inputs.validate(quantize, gates),
        smoke=inputs.smoke(quantize),
        comparisons=tuple(comparisons),
        sensitivity=sensitivity,
        label=label,
    )


def _quantize(inputs: TargetInputs, convert: ConvertTask, backend: BuildBackend[Any], scheme: str,
              options: BaseModel, name: str) -> QuantizeTask:  # fmt: skip
    resolved = backend.resolve_options(scheme, options)
    needs = backend.quantize_needs(scheme, resolved)
    need = backend.calibration_tokens(scheme, resolved)
    calibration = inputs.calibration.cut(need) if need and inputs.calibration is not None else None
    imatrix = None
    if needs.imatrix is not None and calibration is not None:  # the matrix reads the calibration range, not quantize
        chunks, context = needs.imatrix
        char_start = inputs.calibration.char_start(calibration.start)  # type: ignore[union-attr]
        imatrix = ImatrixTask(convert, calibration, inputs.calibration.text, char_start, chunks, context,  # type: ignore[union-attr]
                              needs.tools or {})  # fmt: skip
        calibration = None
    return QuantizeTask(
        converted=convert,
        backend=backend.name,
        scheme=scheme,
        options=resolved.model_dump(mode="json", exclude=REPORT_ONLY),
        versions=convert.versions,
        calibration=calibration,
        imatrix=imatrix,
        tools=needs.tools,
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
    smoke = dataclasses.replace(plan.smoke, artifact=quantize) if plan.smoke is not None else None
    return dataclasses.replace(plan, name=name, quantize=quantize, validate=validate, sensitivity=sensitivity,
                               smoke=smoke)  # fmt: skip
