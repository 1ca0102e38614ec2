"""The recipe reference, written from the pydantic schema at `mkdocs build` time so it cannot drift.

Every section of `edgekit.recipe.schema.RecipeModel` becomes a table of its keys: type, default, allowed values
and description. A key's description is its `Field(description=...)`, else the comment beside it in the schema's
source, else a note in `recipe_notes.NOTES`; a key with none of them is reported as undocumented (a warning,
which `mkdocs build --strict` turns into a failure). Each registered backend's `[targets.options]` model, its
schemes, default gates and default ladder are written the same way.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from recipe_notes import NOTES

PRAGMAS = ("fmt:", "noqa", "type:", "pragma")


@dataclass
class Rendered:
    """The page's markdown, and what it could not document (key paths)."""

    markdown: str
    undocumented: list[str] = field(default_factory=list)
    unused_notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Section:
    path: str  # "validation.cloze"; "targets" for the array of tables
    model: type[BaseModel]
    array: bool = False  # [[path]] rather than [path]


def anchor(path: str) -> str:
    return path.replace(".", "-").replace("_", "-")


def toml_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}" if value else "{}"
    if isinstance(value, BaseModel):
        return toml_value(value.model_dump(exclude_defaults=True))
    return repr(value)


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else repr(value)


def constraints(metadata: list[Any]) -> list[str]:
    """What annotated_types / pydantic metadata allow, in words."""
    found: dict[str, Any] = {}
    for item in metadata:
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            if getattr(item, name, None) is not None:
                found.setdefault(name, getattr(item, name))
    words = []
    low = ("≥ " + _number(found["ge"])) if "ge" in found else ("> " + _number(found["gt"])) if "gt" in found else ""
    high = ("≤ " + _number(found["le"])) if "le" in found else ("< " + _number(found["lt"])) if "lt" in found else ""
    if "ge" in found and "le" in found:
        words.append(f"{_number(found['ge'])} … {_number(found['le'])}")
    else:
        words += [w for w in (low, high) if w]
    if "min_length" in found or "max_length" in found:
        lo, hi = found.get("min_length"), found.get("max_length")
        words.append(f"length {lo} … {hi}" if lo and hi else f"length ≥ {lo}" if lo else f"length ≤ {hi}")
    if "pattern" in found:
        words.append(f"matches `{found['pattern']}`")
    return words


def describe(annotation: Any, sections: dict[type[BaseModel], str]) -> tuple[str, list[str]]:
    """(type in words, allowed values) of an annotation."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        kind, allowed = describe(args[0], sections)
        return kind, allowed + constraints([m for a in args[1:] for m in getattr(a, "metadata", [a])])
    if origin in (Union, types.UnionType):
        parts = [describe(a, sections) for a in args if a is not type(None)]
        return " or ".join(p[0] for p in parts), [w for p in parts for w in p[1]]
    if origin is Literal:
        kinds = sorted({_scalar(type(a)) for a in args})
        return " or ".join(kinds), ["one of " + ", ".join(f"`{toml_value(a)}`" for a in args)]
    if origin is tuple:
        kind, allowed = describe(args[0], sections)
        return f"list of {kind}", [f"each: {w}" for w in allowed]
    if origin is dict:
        return "table", []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        path = sections.get(annotation)
        return (f"table [{path}](#{anchor(path)})" if path else "table"), []
    return _scalar(annotation), []


def _scalar(kind: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def source_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment written beside each field in the model's own source (`required: bool = True  # ...`)."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        comments = {
            tok.start[0]: tok.string.lstrip("#").strip()
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        }
        body = ast.parse(source).body[0]
        for node in getattr(body, "body", []):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                texts = [comments[n] for n in lines if n in comments and not comments[n].startswith(PRAGMAS)]
                if texts:
                    found[node.target.id] = " ".join(texts)
    return found


def default_of(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "**required**"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see the table"
    return f"`{toml_value(value)}`" if value is not None else "unset"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def key_table(model: type[BaseModel], path: str, sections: dict[type[BaseModel], str], rendered: Rendered) -> list[str]:
    comments = source_comments(model)
    rows = ["| key | type | default | allowed values | description |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        key = f"{path}.{name}"
        kind, allowed = describe(info.annotation, sections)
        allowed += [w for w in constraints(info.metadata) if w not in allowed]
        text = info.description or comments.get(name) or NOTES.get(key)
        if (info.description or comments.get(name)) and key in NOTES:
            rendered.unused_notes.append(key)
        if not text:
            rendered.undocumented.append(key)
        cells = [f"`{name}`", kind, default_of(info), "; ".join(allowed) or "—", text or "—"]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def walk(model: type[BaseModel], path: str = "", array: bool = False) -> Iterator[Section]:
    """Every section (table) reachable from `model`, parents before children."""
    if path:
        yield Section(path, model, array)
    for name, info in model.model_fields.items():
        for inner, is_array in _models_in(info.annotation):
            yield from walk(inner, f"{path}.{name}" if path else name, is_array)


def _models_in(annotation: Any, in_tuple: bool = False) -> Iterator[tuple[type[BaseModel], bool]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, in_tuple
        return
    for arg in get_args(annotation):
        yield from _models_in(arg, in_tuple or get_origin(annotation) is tuple)


def render_sections(root: type[BaseModel], level: str = "##", prefix: str = "") -> Rendered:
    """One table per section of `root`; with `prefix`, paths start there (a backend's `targets.options`)."""
    rendered = Rendered("")
    sections = list(walk(root, prefix) if prefix else walk(root))
    if prefix:
        sections[0] = Section(prefix, root)
    names = {s.model: s.path for s in sections}
    out: list[str] = []
    for section in sections:
        title = f"[[{section.path}]]" if section.array else f"[{section.path}]"
        out += [f"{level} {title} {{ #{anchor(section.path)} }}", ""]
        doc = inspect.getdoc(section.model)
        if doc and section.model.__doc__ and not section.model.__doc__.startswith(section.model.__name__ + "("):
            out += [doc, ""]
        out += [*key_table(section.model, section.path, names, rendered), ""]
    rendered.markdown = "\n".join(out)
    return rendered


def render(recipe: type[BaseModel] | None = None, backends: dict[str, Any] | None = None) -> Rendered:
    """The recipe reference: every section of `recipe` (default: RecipeModel), then each backend's options."""
    if recipe is None:
        from edgekit.recipe.schema import RecipeModel

        recipe = RecipeModel
    if backends is None:
        from edgekit.backends.catalog import build_backends

        backends = build_backends()
    rendered = render_sections(recipe)
    parts = [rendered.markdown, "## Backend options { #backend-options }", "",
             "`[targets.options]` is checked against the target's backend: these are the backends registered "
             "in this installation (built-ins and third-party packages alike).", ""]  # fmt: skip
    for name, backend in sorted(backends.items()):
        parts += backend_section(name, backend, rendered)
    rendered.markdown = "\n".join(parts)
    for key in NOTES:
        if not _documents(key, recipe, backends):
            rendered.unused_notes.append(key)
    return rendered


def backend_section(name: str, backend: Any, rendered: Rendered) -> list[str]:
    path = f"targets.options.{name}"
    out = [f"### {name} {{ #{anchor(path)} }}", "", f"`backend = \"{name}\"`: schemes "
           + ", ".join(f"`{s}`" for s in backend.schemes) + ", or `\"auto\"`.", ""]  # fmt: skip
    options = render_sections(backend.options_model, "####", path)
    rendered.undocumented += options.undocumented
    rendered.unused_notes += options.unused_notes
    out += [options.markdown]
    gates = getattr(backend, "default_scheme_gates", {})
    if gates:
        out += [f"Default gates of `{name}` (a recipe's `[validation.gates]` and `[targets.gates]` override them):", ""]
        out += [*gate_table(gates), ""]
    ladder = getattr(backend, "default_ladder", ())
    if ladder:
        steps = ", ".join(f"`{s}`" + (f" + `{toml_value(o)}`" if o else "") for s, o in ladder)
        out += [f'Default ladder of `scheme = "auto"`, cheapest first: {steps}.', ""]
    return out


def gate_table(gates: dict[str, BaseModel]) -> list[str]:
    fields = type(next(iter(gates.values()))).model_fields
    keys = [k for k in fields if any(getattr(g, k) is not None for g in gates.values())]
    rows = ["| scheme | " + " | ".join(f"`{k}`" for k in keys) + " |", "|---|" + "---|" * len(keys)]
    for scheme, gate in gates.items():
        rows.append(f"| {scheme} | " + " | ".join(toml_value(getattr(gate, k)) for k in keys) + " |")
    return rows


def default_gates() -> str:
    """Every registered backend's default gates per scheme (the sign-off page's table)."""
    from edgekit.backends.catalog import build_backends

    out = []
    for name, backend in sorted(build_backends().items()):
        if getattr(backend, "default_scheme_gates", None):
            out += [f"**{name}**", "", *gate_table(backend.default_scheme_gates), ""]
    return "\n".join(out)


def _documents(key: str, recipe: type[BaseModel], backends: dict[str, Any]) -> bool:
    """Whether `key` (a note's path) names a key of the schema."""
    parts = key.split(".")
    if parts[:2] == ["targets", "options"] and len(parts) >= 3:
        backend = backends.get(parts[2])
        model, parts = (backend.options_model if backend else None), parts[3:]
    else:
        model = recipe
    for i, part in enumerate(parts):
        if model is None or part not in model.model_fields:
            return False
        if i < len(parts) - 1:
            model = next((m for m, _ in _models_in(model.model_fields[part].annotation)), None)
    return True


# The MkDocs hook: a page's `<!-- recipe-reference -->`, `<!-- default-gates -->` and `<!-- backend-contract -->`
# markers become the tables.


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    import logging

    log = logging.getLogger("mkdocs.hooks.recipe_ref")
    if "<!-- recipe-reference -->" in markdown:
        rendered = render()
        for key in rendered.undocumented:
            log.warning("recipe key %s has no description: add Field(description=...) or a note in recipe_notes", key)
        for key in rendered.unused_notes:
            log.warning("recipe_notes.NOTES[%r] documents no undocumented recipe key: remove it", key)
        markdown = markdown.replace("<!-- recipe-reference -->", rendered.markdown)
    if "<!-- default-gates -->" in markdown:
        markdown = markdown.replace("<!-- default-gates -->", default_gates())
    if "<!-- backend-contract -->" in markdown:
        markdown = markdown.replace("<!-- backend-contract -->", backend_contract())
    return markdown


def backend_contract() -> str:
    """`BuildBackend`'s hooks, each with its signature and docstring: the backends page's table."""
    from edgekit.backends.base import BuildBackend

    rows = ["| hook | what it answers (and its default) | abstract |", "|---|---|---|"]
    for name, member in vars(BuildBackend).items():
        if name.startswith("_") or not callable(member):
            continue
        signature = str(inspect.signature(member)).replace("self, ", "").replace("(self)", "()").replace("'", "")
        doc = " ".join((inspect.getdoc(member) or "").split())
        abstract = "yes" if getattr(member, "__isabstractmethod__", False) else ""
        rows.append(f"| `{name}{_cell(signature)}` | {_cell(doc)} | {abstract} |")
    return "\n".join(rows)
