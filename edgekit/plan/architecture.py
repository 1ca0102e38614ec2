"""Which requested backends can take this model's architecture: checked before any weights are downloaded.

A Hugging Face source is judged from its config.json and tokenizer files (an hf:// source downloads only
those at planning time); a GGUF source from its header and, when a target exports its dequantized checkpoint,
from how that checkpoint's tokenizer cuts the eval text (`edgekit.plan.tokenizer_check`). Each backend says why
it cannot convert the model (`BuildBackend.unsupported`); the reference needs transformers to build the model.
A required target that cannot be built stops the plan (exit 2, naming the architecture and the backend); an
optional one is left out, and the report says why.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from edgekit.backends.base import BuildEnv, ModelInfo
from edgekit.backends.catalog import build_backend
from edgekit.backends.support import transformers_reason
from edgekit.errors import RecipeError, RecipeProblem
from edgekit.plan.tasks import FetchTask, SkippedTarget
from edgekit.plan.tokenizer_check import gguf_tokenizer_difference
from edgekit.recipe.load import Recipe
from edgekit.recipe.targets import Target
from edgekit.signoff.evaldata import load_text
from edgekit.sources import hub
from edgekit.store.memo import remembered


def model_info(fetch: FetchTask, cache_root: Path) -> ModelInfo:
    if fetch.kind == "gguf":  # reading the header with transformers takes seconds: remember it by the file's hash
        found = remembered(cache_root, "model-info", {"source": fetch.key}, lambda: _gguf_info(Path(fetch.location)))
        return ModelInfo(found["kind"], found["architecture"], found["model_type"], Path(fetch.location))
    folder = hub.download(fetch.uri, fetch.revision, hub.SMALL_PATTERNS) if fetch.kind == "hf" else Path(fetch.location)
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    architecture = (config.get("architectures") or ["(no architectures in config.json)"])[0]
    return ModelInfo(fetch.kind, architecture, config.get("model_type"), folder)


def _gguf_info(path: Path) -> dict[str, str | None]:
    from edgekit.sources.gguf import describe_gguf, transformers_model_type

    architecture = str(describe_gguf(path)["architecture"])
    return {"kind": "gguf", "architecture": architecture, "model_type": transformers_model_type(path)}


def buildable_targets(
    recipe: Recipe, fetch: FetchTask, env: BuildEnv
) -> tuple[list[Target], tuple[SkippedTarget, ...]]:
    """The targets whose backend can take this architecture; optional others are skipped, required ones refused."""
    model = model_info(fetch, env.cache_root)
    exports = any(not build_backend(t.backend).converts_gguf for t in recipe.targets)
    if fetch.kind == "gguf" and exports and model.model_type is not None:  # None: no checkpoint to export at all
        text = load_text(recipe.spec.validation.text, recipe.base_dir)
        model = dataclasses.replace(model, tokenizer_differs=gguf_tokenizer_difference(fetch, text, env.cache_root))
    problems: list[RecipeProblem] = []
    why = None
    if recipe.spec.validation.enabled:  # the reference is built with transformers
        why = transformers_reason(model.model_type, model.architecture, model.kind == "gguf", env.cache_root)
    if why is not None:
        fix = "set [validation] enabled = false to build without a sign-off, or use a Hugging Face checkpoint"
        problems.append(RecipeProblem("validation", f"the reference cannot be built: {why}; {fix}"))
    kept, skipped = [], []
    for i, target in enumerate(recipe.targets):
        why = build_backend(target.backend).unsupported(model, env)
        if why is None:
            kept.append(target)
        elif target.required:
            problem = f"target {target.name!r}: the {target.backend} backend cannot build {model.architecture}: {why}"
            problems.append(RecipeProblem(f"targets[{i}].backend", f"{problem}; remove it or set required = false"))
        else:
            skipped.append(SkippedTarget(target.name, target.backend, target.scheme, why))
    if not kept and not problems:
        problems.append(RecipeProblem("targets", "no target can be built: " + "; ".join(
            f"{t.name}: {t.reason}" for t in skipped)))  # fmt: skip
    if problems:
        raise RecipeError(recipe.path, problems)
    return kept, tuple(skipped)
