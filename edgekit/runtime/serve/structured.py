"""Structured output: `response_format` → the GBNF grammar the engine samples under (`Sampling.grammar`).

`{"type": "text"}` is the default (no grammar). `{"type": "json_object"}` is any JSON object.
`{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` is a value of that schema: the schema is
turned into a grammar by llama.cpp's own converter (`llama_cpp.llama_grammar.SchemaConverter`, what
llama-server uses), after `json_schema_checks` has refused every keyword the grammar would not enforce (so what
comes back always validates), and with JSON's rule that a string holds no raw control character.

Only the GGUF engine (llama.cpp) follows grammars; on another engine a request with a grammar is a 400 naming
the engine. A grammar ends where the value is complete, so the model's end-of-generation token follows it
(`finish_reason: "stop"`); `max_tokens` can still cut the value short, and then `finish_reason` is `"length"` and
the text need not parse. `stop` strings (which could cut the value) and `ignore_eos` (which would go on past it)
are refused with a grammar.
"""

from __future__ import annotations

import json
from typing import Any

from edgekit.runtime.engines.base import GrammarEngine
from edgekit.runtime.serve.api_error import invalid
from edgekit.runtime.serve.json_schema_checks import checked_schema

FORMAT_TYPES = ("text", "json_object", "json_schema")
JSON_SCHEMA_KEYS = ("name", "schema", "strict")
# JSON strings: any character but `"`, `\` and the control characters, or an escape (RFC 8259 §7).
CHAR_RULE = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def response_schema(value: object) -> dict[str, Any] | None:
    """The JSON schema a `response_format` asks for (None for text), or a 400 naming the sub-field at fault."""
    if not isinstance(value, dict):
        raise invalid('`response_format` must be an object such as {"type": "json_object"}', "response_format")
    kind = value.get("type")
    if kind not in FORMAT_TYPES:
        choices = ", ".join(f"`{t}`" for t in FORMAT_TYPES)
        raise invalid(f"`response_format.type` must be one of {choices} (got {kind!r})", "response_format")
    allowed = {"text": ("type",), "json_object": ("type",), "json_schema": ("type", "json_schema")}[kind]
    _only(value, allowed, "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_OBJECT
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise invalid("`response_format.json_schema` must be an object {name, schema, strict}", "response_format")
    _only(spec, JSON_SCHEMA_KEYS, "response_format.json_schema")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise invalid("`response_format.json_schema.name` must be a non-empty string", "response_format")
    if not isinstance(spec.get("strict", False), bool | None):
        raise invalid("`response_format.json_schema.strict` must be true or false", "response_format")
    if "schema" not in spec:
        raise invalid("`response_format.json_schema.schema` is missing: send the JSON schema", "response_format")
    return checked_schema(spec["schema"], "response_format.json_schema.schema", "response_format")


def _only(value: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in value:
        if key not in keys:
            why = (
                "it is not passed to the model; say it in a message"
                if key == "description"
                else "edgekit does not implement it"
            )
            taken = ", ".join(f"`{k}`" for k in keys)
            raise invalid(f"`{where}.{key}` is not supported: {why} (it takes {taken})", "response_format")


def schema_grammar(
    schema: dict[str, Any], param: str, frame: tuple[str, str] = ("", ""), text_unless: str | None = None
) -> str:
    """GBNF for the values of a checked JSON schema (llama.cpp's converter, JSON's string characters), written
    between the two texts of `frame`; with `text_unless`, or instead any text not starting with that character."""
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    framed = frame != ("", "") or text_unless is not None
    try:
        resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "input")
        value = converter.visit(resolved, "framed" if framed else "")
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:  # the checks should catch all
        raise invalid(f"`{param}`'s schema could not be turned into a grammar: {exc}", param) from None
    if "char" in converter._rules:  # the converter's strings take raw control characters, which JSON forbids
        converter._rules["char"] = CHAR_RULE
    if framed:
        root = " ".join(
            [*([json.dumps(frame[0])] if frame[0] else []), value, *([json.dumps(frame[1])] if frame[1] else [])]
        )
        if text_unless is not None:
            converter._rules["free-text"] = f"[^{_class_char(text_unless)}] .*"
            root = f"{root} | free-text"
        converter._rules["root"] = root
    return str(converter.format_grammar())


def _class_char(char: str) -> str:
    """`char` as it stands in a GBNF character class."""
    return "\\" + char if char in "]^-\\" else char


def require_grammar(engine: object, param: str) -> GrammarEngine:
    """The engine, if it can follow a grammar; else a 400 naming the engine and the field."""
    if not isinstance(engine, GrammarEngine):
        backend = getattr(engine, "backend", type(engine).__name__)
        raise invalid(
            f"`{param}` is not supported by the {backend} engine of this bundle: it cannot constrain its sampling "
            "to a grammar (only the gguf engine, llama.cpp, can); serve a gguf artifact of the bundle for it",
            param,
        )
    return engine


def check_grammar(engine: GrammarEngine, grammar: str, param: str) -> str:
    problem = engine.grammar_problem(grammar)
    if problem is not None:
        raise invalid(f"`{param}` gives a grammar the engine cannot follow: {problem}", param)
    return grammar
