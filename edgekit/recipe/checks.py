"""Recipe values that are each valid but cannot all hold: the build would ignore one or fail late.

Checked after the schema, with the targets' backends resolved, before any work.
"""

from __future__ import annotations

from edgekit.errors import RecipeProblem
from edgekit.recipe.schema import AUTO, RecipeModel
from edgekit.recipe.targets import Target


def contradictions(spec: RecipeModel, targets: list[Target]) -> list[RecipeProblem]:
    return _synthetic_validated(spec) + _each_valid_not_together(spec) + _calibration_unused(spec, targets)


def _synthetic_validated(spec: RecipeModel) -> list[RecipeProblem]:
    from edgekit.sources.synthetic import SCHEME

    if not (spec.validation.enabled and spec.model.source.startswith(SCHEME)):
        return []
    return [
        RecipeProblem(
            "validation.enabled",
            "a synthetic:// source has random weights: there is no accuracy to sign off, only speed to measure. "
            "Set [validation] enabled = false",
        )
    ]


def _each_valid_not_together(spec: RecipeModel) -> list[RecipeProblem]:
    """Options that are each valid but cannot all hold: the build would ignore one or fail late."""
    found: list[RecipeProblem] = []
    validation, runtime = spec.validation, spec.bundle.runtime
    if not validation.enabled:
        if spec.bundle.exclude_failed:
            found.append(
                RecipeProblem(
                    "bundle.exclude_failed",
                    "excludes artifacts that fail validation, but [validation] enabled = false; enable validation "
                    "or remove exclude_failed",
                )
            )
        gated = ["validation.gates"] if validation.gates is not None else []
        gated += [f"targets[{i}].gates" for i, t in enumerate(spec.targets) if t.gates is not None]
        found += [
            RecipeProblem(key, "sets accuracy gates, but [validation] enabled = false; enable validation or remove it")
            for key in gated
        ]
        found += [RecipeProblem(f"targets[{i}].scheme", f'is "{AUTO}", which keeps the first candidate that passes '
                                "validation, but [validation] enabled = false; enable validation or name a scheme")
                  for i, t in enumerate(spec.targets) if t.scheme == AUTO]  # fmt: skip
    if not spec.bench.enabled:
        found += [RecipeProblem(f"targets[{i}].objective", '"fastest" picks by the bench, but [bench] enabled = '
                                'false; enable the bench or use objective = "smallest"')
                  for i, t in enumerate(spec.targets) if t.objective == "fastest"]  # fmt: skip
    if validation.enabled and validation.context_length > runtime.n_ctx:
        found.append(
            RecipeProblem(
                "validation.context_length",
                f"{validation.context_length} is larger than the context the bundle runs with (bundle.runtime.n_ctx = "
                f"{runtime.n_ctx}); validation runs each artifact as the box will. Lower context_length or raise n_ctx",
            )
        )
    if runtime.max_request_tokens > runtime.n_ctx:
        found.append(
            RecipeProblem(
                "bundle.runtime.max_request_tokens",
                f"{runtime.max_request_tokens} is larger than the context (bundle.runtime.n_ctx = {runtime.n_ctx}); "
                "no request that long could be served. Lower it or raise n_ctx",
            )
        )
    if spec.model.allow_patterns is not None and not spec.model.source.startswith("hf://"):
        found.append(
            RecipeProblem("model.allow_patterns", "only applies to hf:// sources; remove it for a local or pkg:// one")
        )
    return found


def _calibration_unused(spec: RecipeModel, targets: list[Target]) -> list[RecipeProblem]:
    from edgekit.backends.catalog import build_backend

    steps = [(t.backend, c.scheme, c.options) for t in targets for c in (t.candidates or [t])]
    if spec.calibration.text is None or any(build_backend(b).needs_calibration(s, o) for b, s, o in steps):
        return []
    return [
        RecipeProblem(
            "calibration.text",
            "is set but no target is data-aware (GGUF with imatrix; OpenVINO INT4 with awq, scale_estimation or "
            "ratio < 1; ONNX Runtime with outlier_ratio); remove it or make a target data-aware",
        )
    ]
