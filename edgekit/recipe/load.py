"""Loading a recipe: TOML text → the schema → targets resolved against their backends → contradictions.

Everything wrong with a recipe is reported at once, before any work starts: the file, the key,
what was expected and, for a misspelt key or value, the nearest valid one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from edgekit.errors import RecipeError, RecipeProblem
from edgekit.recipe.checks import contradictions
from edgekit.recipe.problems import problems_from
from edgekit.recipe.schema import BundleSection, RecipeModel
from edgekit.recipe.targets import Target, resolve_targets
from edgekit.sources.synthetic import SCHEME as SYNTHETIC
from edgekit.sources.synthetic import parse as synthetic_spec

MAX_RECIPE_BYTES = 256 * 1024
# tomllib's memory grows with the square of a dotted key's length (a.a.a… on one 200 KB line takes
# gigabytes), and nothing in a recipe needs long lines: bound them before parsing.
MAX_LINE_CHARS = 4096
DEFAULT_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "smollm2-135m.toml"


@dataclass(frozen=True)
class Recipe:
    path: Path
    sha256: str
    text: str
    spec: RecipeModel
    targets: tuple[Target, ...]

    def with_release(self, release: int) -> Recipe:
        """This recipe with `[bundle] release` replaced (`edgekit build --release N`)."""
        try:
            bundle = BundleSection.model_validate({**self.spec.bundle.model_dump(), "release": release})
        except ValidationError as exc:
            raise RecipeError(self.path, [RecipeProblem("bundle.release", exc.errors()[0]["msg"])]) from None
        return dataclasses.replace(self, spec=self.spec.model_copy(update={"bundle": bundle}))

    @property
    def name(self) -> str:
        if self.spec.bundle.name:
            return self.spec.bundle.name
        source = self.spec.model.source
        if source.startswith(SYNTHETIC):
            return synthetic_spec(source).name.lower()
        stem = re.split(r"[/\\]", source.rstrip("/"))[-1]
        stem = re.sub(r"\.(gguf|safetensors|bin)$", "", stem, flags=re.I)
        return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.").lower()[:64] or "model"

    @property
    def base_dir(self) -> Path:
        return self.path.parent


def load_recipe(path: Path | str) -> Recipe:
    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a folder, /dev/zero or a pipe: never read it
            raise RecipeError(path, [RecipeProblem("", "is not a regular file; pass the path of a .toml recipe")])
        with open(path, "rb") as f:
            raw = f.read(MAX_RECIPE_BYTES + 1)  # parse_recipe rejects anything longer
    except FileNotFoundError:
        raise RecipeError(path, [RecipeProblem("", "file not found; pass the path of a .toml recipe")]) from None
    except OSError as exc:
        raise RecipeError(path, [RecipeProblem("", f"cannot be read: {exc.strerror}")]) from None
    return parse_recipe(raw, path)


def parse_recipe(raw: bytes, path: Path) -> Recipe:
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError(
            path,
            [RecipeProblem("", f"is over {MAX_RECIPE_BYTES:,} bytes; a recipe is at most {MAX_RECIPE_BYTES:,} bytes")],
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = raw[: exc.start].count(b"\n") + 1
        raise RecipeError(
            path, [RecipeProblem("", f"is not UTF-8 text (byte {exc.start}, line {line_no}); save it as UTF-8")]
        ) from None
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE_CHARS:
            raise RecipeError(
                path,
                [
                    RecipeProblem(
                        "",
                        f"line {number} is {len(line):,} characters long; a recipe line is at most {MAX_LINE_CHARS:,} "
                        "(split long arrays over several lines)",
                    )
                ],
            )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(path, [RecipeProblem("", f"is not valid TOML: {exc}")]) from None
    except RecursionError:
        raise RecipeError(path, [RecipeProblem("", "nests arrays or tables too deeply to be a recipe")]) from None
    try:
        spec = RecipeModel.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(path, problems_from(exc, RecipeModel, data=data)) from None
    targets, problems = resolve_targets(spec.targets)
    problems += contradictions(spec, targets)
    if problems:
        raise RecipeError(path, problems)
    return Recipe(
        path=path.resolve(),
        sha256=hashlib.sha256(raw).hexdigest(),
        text=text,
        spec=spec,
        targets=tuple(targets),
    )
