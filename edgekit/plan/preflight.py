"""Checks that need the file system but no work: run before the first stage, so bad input writes nothing.

The recipe schema (`edgekit.recipe.schema`) checks what a recipe says; these check what it points at: the
validation text and task files can be read, and the bundle can be written where the recipe asks
without replacing something that is not an edgekit bundle. Every finding is a `RecipeProblem` with
the recipe key it comes from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from edgekit.errors import RecipeError, RecipeProblem, SourceError
from edgekit.manifest import MANIFEST
from edgekit.recipe.load import Recipe
from edgekit.sources import resolve_path, resolve_pkg, synthetic

if TYPE_CHECKING:
    from edgekit.backends.base import BuildEnv


def check_eval_files(recipe: Recipe) -> list[RecipeProblem]:
    """The validation and calibration texts are readable UTF-8 files; every task file is well-formed JSONL."""
    from edgekit.signoff.evaldata import load_text, multiple_choice_task

    cfg = recipe.spec.validation
    problems: list[RecipeProblem] = []
    entries = [("validation.text", cfg.text)] + [(f"validation.tasks[{i}]", t) for i, t in enumerate(cfg.tasks)]
    entries = entries if cfg.enabled else []
    if recipe.spec.calibration.text is not None:
        entries.append(("calibration.text", recipe.spec.calibration.text))
    for key, value in entries:
        try:
            path = resolve_path(value, recipe.base_dir)
            if not path.is_file():
                raise SourceError(f"{value}: not a file ({path})", "point it at a text file")
            if key.endswith(".text"):
                if not load_text(value, recipe.base_dir).text.strip():
                    raise SourceError(f"{value}: the eval text is empty", "point it at a longer text")
            else:
                multiple_choice_task(path, lambda text: list(text.encode()), 1, 0)  # structure only: bytes as ids
        except SourceError as exc:
            problems.append(RecipeProblem(key, exc.message + (f"; {exc.hint}" if exc.hint else "")))
        except UnicodeDecodeError as exc:
            problems.append(RecipeProblem(key, f"{value}: not UTF-8 text (byte {exc.start}); save it as UTF-8"))
        except OSError as exc:
            problems.append(RecipeProblem(key, f"{value}: cannot be read ({exc.strerror})"))
    return problems


def check_tokenizer_source(recipe: Recipe) -> list[RecipeProblem]:
    """`[model] tokenizer` exists: a folder, or a pinned revision of an hf:// repository."""
    from edgekit.sources import hub
    from edgekit.sources.local import local_path

    model = recipe.spec.model
    if model.tokenizer is None:
        return []
    if model.tokenizer.startswith("hf://"):
        found = hub.check_hub_source(model.tokenizer, model.tokenizer_revision, False, True)
        return [RecipeProblem("model.tokenizer", found.problem)] if found else []
    try:
        folder = local_path(model.tokenizer, recipe.base_dir)
    except SourceError as exc:
        return [RecipeProblem("model.tokenizer", exc.message)]
    if not folder.is_dir():
        return [RecipeProblem("model.tokenizer", f"{model.tokenizer}: no such folder ({folder}); point it at the "
                              "folder holding the model's tokenizer files")]  # fmt: skip
    return []


def check_output(final: Path, *, from_recipe: bool) -> list[RecipeProblem]:
    """`final` (the bundle folder) can be created, and replacing it would only replace an edgekit bundle."""
    key = "bundle.output_dir" if from_recipe else "--out"
    fix = "choose another [bundle] output_dir or name" if from_recipe else "choose another --out"
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        return [RecipeProblem(key, f"{final} exists and is not a folder; {fix}")]
    if final.is_dir() and any(final.iterdir()) and not (final / MANIFEST).is_file():
        return [
            RecipeProblem(
                key,
                f"{final} is a folder that is not an edgekit bundle (no {MANIFEST}); the build would replace it. "
                f"Move it away or {fix}",
            )
        ]
    probe = final.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return [RecipeProblem(key, f"{probe} is a file, so {final.parent} cannot be created; {fix}")]
    if not os.access(probe, os.W_OK | os.X_OK):
        return [RecipeProblem(key, f"{probe} is not writable; {fix}")]
    return []


def check_model_options(recipe: Recipe, kind: str, location: Path, env: BuildEnv) -> list[RecipeProblem]:
    """Options only the model can judge (tensor name patterns), every ladder candidate's too, keyed like the recipe."""
    from edgekit.backends.base import ModelInfo
    from edgekit.backends.catalog import build_backend

    model = ModelInfo(kind, "", None, location)
    found: list[RecipeProblem] = []
    for i, target in enumerate(recipe.targets):
        backend = build_backend(target.backend)
        for scheme, options in [(c.scheme, c.options) for c in target.candidates] or [(target.scheme, target.options)]:
            for p in backend.check_model(scheme, options, model, env):
                problem = RecipeProblem(f"targets[{i}].{p.key}", p.problem, p.suggestion)
                found += [problem] if problem not in found else []
    return found


def preflight(recipe: Recipe, final: Path | None = None, out_given: bool = False, env: BuildEnv | None = None) -> None:
    """Everything that can be checked before work starts, without writing anything: backends installed,
    sources and files exist and are readable, options fit the model (a local one), and the bundle can go where
    it is asked to (`final`)."""
    from edgekit.backends.catalog import build_backend
    from edgekit.sources import hub
    from edgekit.sources.local import locate_local

    model = recipe.spec.model
    problems: list[RecipeProblem] = []
    for target in recipe.targets:
        build_backend(target.backend).require()  # MissingDependencyError names the extra to install
    try:
        if model.source.startswith("hf://"):
            found = hub.check_hub_source(
                model.source, model.revision, model.allow_pickle, model.allow_patterns is not None
            )
            problems += [found] if found else []
        elif synthetic.is_synthetic(model.source):
            synthetic.parse(model.source)
            if model.tokenizer is None:
                resolve_pkg(synthetic.DEFAULT_TOKENIZER)  # SmolLM2's tokenizer, from its package
        else:
            local = locate_local(model.source, recipe.base_dir, model.allow_pickle)  # exists, right kind; not hashed
            problems += check_model_options(recipe, local.kind, local.path, env) if env is not None else []
    except SourceError as exc:
        problems.append(RecipeProblem("model.source", f"{exc.message}" + (f"; {exc.hint}" if exc.hint else "")))
    problems += check_tokenizer_source(recipe)
    problems += check_eval_files(recipe)
    if final is not None:
        problems += check_output(final, from_recipe=not out_given)
    if problems:
        raise RecipeError(recipe.path, problems)
