"""The recipe: a typed schema for `edgekit build`, loaded from TOML.

Everything wrong with a recipe is reported at once, before any work starts: the file, the key,
what was expected and, for a misspelt key or value, the nearest valid one.
"""

from __future__ import annotations

import hashlib
import re
import stat
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from edgekit.backends.base import Gates
from edgekit.errors import RecipeError, RecipeProblem
from edgekit.suggest import did_you_mean

MAX_RECIPE_BYTES = 256 * 1024
# tomllib's memory grows with the square of a dotted key's length (a.a.a… on one 200 KB line takes
# gigabytes), and nothing in a recipe needs long lines: bound them before parsing.
MAX_LINE_CHARS = 4096
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
DEFAULT_RECIPE = Path(__file__).parent / "recipes" / "smollm2-135m.toml"
SOURCE_SCHEMES = ("hf://", "pkg://", "file://")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    source: str = Field(description="hf://ORG/NAME, pkg://PACKAGE/PATH, or a local folder or file")
    revision: str | None = Field(None, description="branch, tag or commit sha (hf:// only)")
    allow_pickle: bool = False
    allow_patterns: tuple[str, ...] | None = None
    trust_remote_code: Literal[False] = False

    @field_validator("source")
    @classmethod
    def _source_form(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        if "://" in value and not value.startswith(SOURCE_SCHEMES):
            scheme = value.split("://", 1)[0] + "://"
            hint = did_you_mean(scheme, SOURCE_SCHEMES)
            raise ValueError(
                f"unknown source scheme {scheme!r}; expected hf://ORG/NAME, pkg://PACKAGE/PATH or a path"
                + (f" (did you mean {hint!r}?)" if hint else "")
            )
        if value.startswith("hf://") and not re.fullmatch(r"hf://[\w.-]+/[\w.-]+", value):
            raise ValueError("expected hf://ORG/NAME")
        if value.startswith("pkg://") and not re.fullmatch(r"pkg://[A-Za-z_][\w.]*/.+", value):
            raise ValueError("expected pkg://PACKAGE/PATH/INSIDE/IT")
        return value

    @model_validator(mode="after")
    def _revision_for_hub(self) -> ModelSection:
        if self.source.startswith("hf://") and not self.revision:
            raise ValueError(
                "an hf:// source needs a pinned `revision` (a commit sha, or a branch or tag "
                "whose resolved commit is recorded)"
            )
        if self.revision and not self.source.startswith("hf://"):
            raise ValueError("`revision` only applies to hf:// sources; remove it")
        return self


class TargetSpec(_Section):
    backend: str
    scheme: str
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    required: bool = True  # a failing required artifact fails the build
    options: dict[str, Any] = Field(default_factory=dict)
    gates: Gates | None = None
    note: str | None = Field(None, max_length=4000, description="shown beside this artifact in the report")


class ClozeTask(_Section):
    enabled: bool = True
    items: int = Field(400, ge=10, le=100_000, description="at most this many sentence-final words")
    min_word_chars: int = Field(3, ge=1, le=20)


class ValidationSection(_Section):
    enabled: bool = True
    text: str = "pkg://edgekit/data/botchan.txt"
    max_tokens: int = Field(8192, ge=256, le=10_000_000)
    context_length: int = Field(512, ge=32, le=131072)
    reference_device: Literal["auto", "cpu", "cuda"] = "auto"
    reference_dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    noise_floor_dtype: Literal["none", "float32", "float16", "bfloat16"] = "bfloat16"
    top_k: int = Field(64, ge=1, le=1024, description="reference probabilities kept per token")
    tail_samples: int = Field(64, ge=0, le=1024, description="tokens sampled from the reference's tail")
    bootstrap_resamples: int = Field(1000, ge=100, le=100_000)
    bootstrap_block_tokens: int = Field(64, ge=1, le=4096)
    seed: int = 0
    cloze: ClozeTask = ClozeTask()
    tasks: tuple[str, ...] = Field((), description="JSONL multiple-choice task files")
    gates: Gates | None = None
    on_inconclusive: Literal["warn", "fail"] = "warn"

    @model_validator(mode="after")
    def _context_fits(self) -> ValidationSection:
        if self.context_length > self.max_tokens:
            raise ValueError(f"context_length ({self.context_length}) is larger than max_tokens ({self.max_tokens})")
        return self


class BenchSection(_Section):
    enabled: bool = True
    prompt_tokens: int = Field(128, ge=1, le=32768)
    gen_tokens: int = Field(64, ge=1, le=4096)
    runs: int = Field(3, ge=1, le=100)
    threads: Literal["auto"] | tuple[Annotated[int, Field(ge=1, le=1024)], ...] = "auto"
    concurrency: tuple[Annotated[int, Field(ge=1, le=4)], ...] = (1, 2, 4)
    baseline: bool = True
    bandwidth_mib: int = Field(256, ge=16, le=16384, description="array size of the bandwidth probe")
    loads: bool = Field(True, description="time loads with/without mmap (and mlock), cold and warm page cache")
    warmup_tokens: int = Field(4, ge=0, le=256, description="decoded before any timing, as serve's warm-up does")


class RuntimeDefaults(_Section):
    n_ctx: int = Field(2048, ge=64, le=1_048_576)
    n_batch: int = Field(256, ge=1, le=65536)
    max_concurrent: int = Field(4, ge=1, le=4)
    warmup_tokens: int = Field(8, ge=0, le=1024)
    use_mlock: bool = False
    max_queue: int = Field(16, ge=1, le=10_000)
    max_request_tokens: int = Field(512, ge=1, le=1_048_576)


class BundleSection(_Section):
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    output_dir: str = "dist"
    exclude_failed: bool = False
    runtime: RuntimeDefaults = RuntimeDefaults()

    @field_validator("output_dir")
    @classmethod
    def _inside_project(cls, value: str) -> str:
        path = PurePosixPath(value.replace("\\", "/"))
        if path.is_absolute() or re.match(r"^[A-Za-z]:", value):
            raise ValueError(
                "must be a path inside the project (relative); use `edgekit build --out DIR` to write elsewhere"
            )
        if ".." in path.parts:
            raise ValueError("must not leave the project ('..'); use `edgekit build --out DIR` instead")
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class ToolchainSection(_Section):
    llama_cpp_dir: str | None = Field(None, description="an existing llama.cpp checkout to convert with")


class RecipeModel(_Section):
    model: ModelSection
    targets: tuple[TargetSpec, ...] = Field(min_length=1)
    validation: ValidationSection = ValidationSection()
    bench: BenchSection = BenchSection()
    bundle: BundleSection = BundleSection()
    toolchain: ToolchainSection = ToolchainSection()


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


@dataclass(frozen=True)
class Recipe:
    path: Path
    sha256: str
    text: str
    spec: RecipeModel
    targets: tuple[Target, ...]

    @property
    def name(self) -> str:
        if self.spec.bundle.name:
            return self.spec.bundle.name
        stem = re.split(r"[/\\]", self.spec.model.source.rstrip("/"))[-1]
        stem = re.sub(r"\.(gguf|safetensors|bin)$", "", stem, flags=re.I)
        return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.").lower()[:64] or "model"

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve_local(self, value: str) -> Path:
        """A local path from the recipe, relative to the recipe's folder."""
        path = Path(value.removeprefix("file://")).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


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
        line = raw[: exc.start].count(b"\n") + 1
        raise RecipeError(
            path, [RecipeProblem("", f"is not UTF-8 text (byte {exc.start}, line {line}); save it as UTF-8")]
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
        raise RecipeError(path, _problems_from(exc, RecipeModel, data=data)) from None
    targets, problems = _resolve_targets(spec)
    problems += _contradictions(spec)
    if problems:
        raise RecipeError(path, problems)
    return Recipe(
        path=path.resolve(),
        sha256=hashlib.sha256(raw).hexdigest(),
        text=text,
        spec=spec,
        targets=tuple(targets),
    )


def _contradictions(spec: RecipeModel) -> list[RecipeProblem]:
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


def _resolve_targets(spec: RecipeModel) -> tuple[list[Target], list[RecipeProblem]]:
    from edgekit.backends import registry

    backends = registry()
    targets: list[Target] = []
    problems: list[RecipeProblem] = []
    seen: dict[str, int] = {}
    for i, t in enumerate(spec.targets):
        key = f"targets[{i}]"
        backend = backends.get(t.backend)
        if backend is None:
            problems.append(
                RecipeProblem(
                    f"{key}.backend",
                    f"unknown backend {t.backend!r}; expected one of {', '.join(sorted(backends))}",
                    did_you_mean(t.backend, backends),
                )
            )
            continue
        if t.scheme not in backend.schemes:
            problems.append(
                RecipeProblem(
                    f"{key}.scheme",
                    f"{t.scheme!r} is not a {t.backend} scheme; expected one of {', '.join(backend.schemes)}",
                    did_you_mean(t.scheme, backend.schemes),
                )
            )
            continue
        try:
            options = backend.options_model.model_validate(t.options)
        except ValidationError as exc:
            problems += _problems_from(exc, backend.options_model, prefix=f"{key}.options", data=t.options)
            continue
        target_problems = backend.check_target(t.scheme, options)
        problems += [
            RecipeProblem(f"{key}.{p.key}" if p.key else key, p.problem, p.suggestion) for p in target_problems
        ]
        name = t.name or backend.artifact_name(t.scheme)
        if name in seen:
            problems.append(
                RecipeProblem(
                    f"{key}.name",
                    f"artifact name {name!r} is already used by targets[{seen[name]}]; "
                    "remove the duplicate or give one of them a distinct `name`",
                )
            )
            continue
        seen[name] = i
        targets.append(Target(t.backend, t.scheme, name, t.required, options, t.gates, t.note))
    return targets, problems


# --- turning pydantic errors into recipe problems -------------------------------------------------


def _loc_to_key(loc: tuple[str | int, ...]) -> str:
    key = ""
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
    return key


def _unwrap(annotation: Any) -> list[Any]:
    """The classes inside Optional/Union/Annotated/tuple/list annotations."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list):
        found: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not Ellipsis:
                found += _unwrap(arg)
        return found
    return [annotation]


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = next((c for c in _unwrap(field.annotation) if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return current


def _expected(model: type[BaseModel] | None, field_name: str | int) -> str:
    if model is None or not isinstance(field_name, str) or field_name not in model.model_fields:
        return ""
    field = model.model_fields[field_name]
    literals = [a for a in _unwrap(field.annotation) if typing.get_origin(a) is Literal]
    if literals:
        values = [repr(v) for lit in literals for v in typing.get_args(lit)]
        return f"; expected one of {', '.join(values)}"
    return ""


# pydantic's words for the Python types it wanted, in the words of the TOML file being read
TOML_WORDS = {
    "tuple_type": "expected an array",
    "list_type": "expected an array",
    "string_type": "expected a string (in quotes)",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer, not a fraction",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "dict_type": "expected a table",
    "too_short": "must not be empty; add at least one",
    "model_type": "expected a table (a [section] or { key = value, ... })",
    "model_attributes_type": "expected a table (a [section] or { key = value, ... })",
}
BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
    "string_too_long": ("at most this many characters:", "max_length"),
}
NAME_RULE = "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _real_loc(loc: tuple[str | int, ...], data: Any) -> tuple[str | int, ...]:
    """`loc` without pydantic's union-member tags ("tuple[int, ...]"), keeping keys that are in the data."""
    kept: list[str | int] = []
    current = data
    for part in loc:
        in_dict = isinstance(current, dict) and part in current
        if in_dict or (isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)):
            current = current[part]
        elif isinstance(part, str) and "[" in part:
            continue
        else:
            current = None
        kept.append(part)
    return tuple(kept)


def _problems_from(
    exc: ValidationError, root: type[BaseModel], prefix: str = "", data: Any = None
) -> list[RecipeProblem]:
    problems: list[RecipeProblem] = []
    for err in exc.errors(include_url=False):
        loc = _real_loc(tuple(err["loc"]), data)
        key = _loc_to_key(loc)
        if prefix:
            key = f"{prefix}.{key}" if key else prefix
        parent = _model_at(root, loc[:-1])
        if err["type"] == "extra_forbidden":
            allowed = list(parent.model_fields) if parent else []
            problems.append(
                RecipeProblem(
                    key,
                    "unknown key"
                    + (
                        f"; expected one of {', '.join(allowed)}"
                        if allowed
                        else "; this table takes no keys"
                        if parent
                        else ""
                    ),
                    did_you_mean(str(loc[-1]), allowed) if allowed and loc else None,
                )
            )
        elif err["type"] == "missing":
            if key == "targets":
                problems.append(RecipeProblem(key, "no targets; add a [[targets]] section with backend and scheme"))
            elif _model_at(root, loc) is not None:
                problems.append(RecipeProblem(key, f"required section [{key}] is missing; add it"))
            else:
                problems.append(RecipeProblem(key, "required key is missing; add it"))
        elif err["type"] == "literal_error":
            allowed_values = [str(v).strip("'") for v in re.findall(r"'([^']*)'", err["msg"])]
            problems.append(
                RecipeProblem(
                    key,
                    f"got {err['input']!r}; {err['msg'].lower()}",
                    did_you_mean(str(err["input"]), allowed_values) if isinstance(err["input"], str) else None,
                )
            )
        else:
            message = TOML_WORDS.get(err["type"]) or err["msg"].removeprefix("Value error, ")
            if err["type"] in BOUNDS:
                word, bound = BOUNDS[err["type"]]
                message = f"must be {word} {err.get('ctx', {}).get(bound)}"
            if err["type"] == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == NAME_PATTERN:
                message = NAME_RULE
            if isinstance(err["input"], dict) and err["type"] == "value_error":  # a whole-section check
                problems.append(RecipeProblem(key, message))
                continue
            if key == "targets" and err["type"] == "tuple_type":
                message += "; write each target as a [[targets]] section"
            shown = _shown(err["input"])
            problems.append(RecipeProblem(key, f"{message} (got {shown}){_expected(parent, loc[-1] if loc else '')}"))
    return _dedupe(problems)


def _dedupe(problems: list[RecipeProblem]) -> list[RecipeProblem]:
    """Drop repeats, and errors about a container whose items already have their own errors."""
    keys = {p.key for p in problems}
    seen: set[tuple[str, str]] = set()
    unique = []
    for p in problems:
        if p.key and any(k != p.key and k.startswith((p.key + ".", p.key + "[")) for k in keys):
            continue
        if (p.key, p.problem) not in seen:
            seen.add((p.key, p.problem))
            unique.append(p)
    return unique
