"""Which JSON schemas `serve` turns into a grammar: only keywords the grammar enforces, so what it generates
always validates against the schema. Any other keyword is a 400 naming it (its path in the schema) and why.

The grammar (llama.cpp's converter, see `structured`) enforces: `type` (one or a list of them), `enum`, `const`,
`anyOf`, local `$ref`s (`#/$defs/…`, `#/definitions/…`), objects' `properties`, `required` and
`additionalProperties`, arrays' `items`, `minItems`, `maxItems` and `prefixItems` (a fixed tuple), strings'
`minLength`, `maxLength` and the formats `date`, `time`, `date-time` and `uuid`. Annotations (`title`,
`description`, `default`, `examples`, …) constrain nothing and are dropped. A schema with no type and no
structure (`{}`) is generated as a JSON object. An object generates no properties its schema does not list
unless `additionalProperties` allows them (stricter than JSON Schema's default, still valid).
"""

from __future__ import annotations

from typing import Any, NoReturn

from edgekit.runtime.serve.api_error import invalid

TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly"}
)
FORMATS = ("date", "time", "date-time", "uuid")
MAX_DEPTH = 32
_DEFS = ("$defs", "definitions")
_BY_TYPE = {
    "object": ("properties", "required", "additionalProperties"),
    "array": ("items", "prefixItems", "minItems", "maxItems"),
    "string": ("minLength", "maxLength", "format"),
}
_WHY = {
    "oneOf": "the grammar cannot make sure exactly one branch matches; use `anyOf`",
    "allOf": "combining schemas is not implemented; merge them into one",
    "pattern": "regular expressions are not implemented; use `enum`, `format` or `maxLength`",
    "patternProperties": "regular expressions are not implemented",
    "minimum": "number ranges are not enforced by the grammar",
    "maximum": "number ranges are not enforced by the grammar",
    "exclusiveMinimum": "number ranges are not enforced by the grammar",
    "exclusiveMaximum": "number ranges are not enforced by the grammar",
    "multipleOf": "number ranges are not enforced by the grammar",
    "uniqueItems": "the grammar cannot compare items",
}
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


class _Checker:
    def __init__(self, root: Any, where: str, param: str) -> None:
        self.root, self.where, self.param = root, where, param
        self.refs: set[str] = set()  # references whose targets are checked (or being checked: recursive schemas)

    def fail(self, path: str, message: str) -> NoReturn:
        raise invalid(f"`{self.where}{path}` {message}", self.param)

    def schema(self, node: Any, path: str, depth: int = 0) -> dict[str, Any]:
        if depth > MAX_DEPTH:
            self.fail(path, f"nests more than {MAX_DEPTH} schemas deep")
        if not isinstance(node, dict):
            self.fail(path, f"must be a schema object (got {type(node).__name__}: boolean schemas are not supported)")
        out = {k: v for k, v in node.items() if k not in ANNOTATIONS}
        for key in out:
            if key not in _ALLOWED:
                why = _WHY.get(key, "the grammar does not enforce it")
                self.fail(f"{path}.{key}", f"is not supported in a response or tool schema: {why}")
        for defs in _DEFS:
            if defs in out:
                out[defs] = self.mapping(out[defs], f"{path}.{defs}", depth)
        if "$ref" in out:
            return self.ref(out, path, depth)
        if "anyOf" in out:
            return self.any_of(out, path, depth)
        kind = out.get("type")
        if isinstance(kind, list):
            return self.type_list(out, kind, path)
        if kind is not None and kind not in TYPES:
            self.fail(f"{path}.type", f"must be one of {', '.join(TYPES)} (got {kind!r})")
        if "enum" in out or "const" in out:
            return self.constants(out, kind, path)
        for owner, keys in _BY_TYPE.items():
            for key in keys:
                untyped_ok = kind is None and key not in ("minLength", "maxLength")  # the converter needs the type
                if key in out and kind != owner and not untyped_ok:
                    self.fail(f"{path}.{key}", f'applies to `"type": "{owner}"` (the type here is {kind!r})')
        if kind in ("object", None) and any(k in out for k in _BY_TYPE["object"]):
            self.object(out, path, depth)
        if kind in ("array", None) and any(k in out for k in _BY_TYPE["array"]):
            self.array(out, path, depth)
        if "format" in out and out["format"] not in FORMATS:
            self.fail(f"{path}.format", f"must be one of {', '.join(FORMATS)} (got {out['format']!r})")
        if "format" in out and ("minLength" in out or "maxLength" in out):
            self.fail(f"{path}.format", "cannot be combined with `minLength` or `maxLength`")
        for key in ("minLength", "maxLength"):
            if key in out:
                self.count(out, key, path)
        return out

    def mapping(self, value: Any, path: str, depth: int) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, "must be an object of schemas")
        return {name: self.schema(sub, f"{path}.{name}", depth + 1) for name, sub in value.items()}

    def ref(self, out: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        ref, others = out["$ref"], [k for k in out if k not in ("$ref", *_DEFS)]
        if others:
            self.fail(f"{path}.{others[0]}", "cannot be used beside `$ref` (the grammar follows only the reference)")
        if not isinstance(ref, str) or not ref.startswith("#/") or "~" in ref:
            self.fail(f"{path}.$ref", "must be a reference inside the schema, such as `#/$defs/Name`")
        target: Any = self.root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict) or part not in target:
                self.fail(f"{path}.$ref", f"points to nothing in the schema ({ref})")
            target = target[part]
        if ref not in self.refs:
            self.refs.add(ref)
            self.schema(target, f"{path}.$ref({ref})", depth + 1)
        return out

    def any_of(self, out: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        others = [k for k in out if k not in ("anyOf", *_DEFS)]
        if others:
            self.fail(f"{path}.{others[0]}", "cannot be used beside `anyOf`; put it in each branch")
        branches = out["anyOf"]
        if not isinstance(branches, list) or not branches:
            self.fail(f"{path}.anyOf", "must be a non-empty list of schemas")
        out["anyOf"] = [self.schema(b, f"{path}.anyOf[{i}]", depth + 1) for i, b in enumerate(branches)]
        return out

    def type_list(self, out: dict[str, Any], kinds: list[Any], path: str) -> dict[str, Any]:
        others = [k for k in out if k not in ("type", *_DEFS)]
        if others:
            self.fail(f"{path}.{others[0]}", "cannot be used beside a list of types; use `anyOf` of one schema each")
        if not kinds or any(k not in TYPES for k in kinds):
            self.fail(f"{path}.type", f"must list types among {', '.join(TYPES)} (got {kinds!r})")
        return out

    def constants(self, out: dict[str, Any], kind: str | None, path: str) -> dict[str, Any]:
        others = [k for k in out if k not in ("enum", "const", "type", *_DEFS)]
        if others:
            self.fail(f"{path}.{others[0]}", "cannot be used beside `enum` or `const` (the grammar lists the values)")
        values = out["enum"] if "enum" in out else [out["const"]]
        if "enum" in out and "const" in out:
            self.fail(f"{path}.const", "cannot be used beside `enum`")
        if not isinstance(values, list) or not values:
            self.fail(f"{path}.enum", "must be a non-empty list of values")
        for value in values:
            if kind is not None and not _is_type(value, kind):
                self.fail(path, f"lists {value!r}, which is not of its type {kind!r}")
        return out

    def object(self, out: dict[str, Any], path: str, depth: int) -> None:
        properties = self.mapping(out.get("properties", {}), f"{path}.properties", depth)
        if "properties" in out:
            out["properties"] = properties
        required = out.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            self.fail(f"{path}.required", "must be a list of property names")
        missing = [r for r in required if r not in properties]
        if missing:
            self.fail(f"{path}.required", f"names `{missing[0]}`, which is not in `properties`")
        extra = out.get("additionalProperties")
        if extra is not None and not isinstance(extra, bool):
            out["additionalProperties"] = self.schema(extra, f"{path}.additionalProperties", depth + 1)

    def array(self, out: dict[str, Any], path: str, depth: int) -> None:
        if "prefixItems" in out:
            others = [k for k in ("items", "minItems", "maxItems") if k in out]
            if others:
                self.fail(f"{path}.{others[0]}", "cannot be used beside `prefixItems` (a fixed tuple)")
            items = out["prefixItems"]
            if not isinstance(items, list) or not items:
                self.fail(f"{path}.prefixItems", "must be a non-empty list of schemas")
            out["prefixItems"] = [self.schema(s, f"{path}.prefixItems[{i}]", depth + 1) for i, s in enumerate(items)]
            return
        if "items" not in out:
            self.fail(f"{path}.items", "is needed with `minItems` or `maxItems`")
        out["items"] = self.schema(out["items"], f"{path}.items", depth + 1)
        for key in ("minItems", "maxItems"):
            if key in out:
                self.count(out, key, path)
        if out.get("minItems", 0) > out.get("maxItems", out.get("minItems", 0)):
            self.fail(f"{path}.minItems", "is more than `maxItems`")

    def count(self, out: dict[str, Any], key: str, path: str) -> None:
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(f"{path}.{key}", f"must be a non-negative integer (got {value!r})")
        if key == "maxLength" and out.get("minLength", 0) > value:
            self.fail(f"{path}.minLength", "is more than `maxLength`")


_ALLOWED = frozenset({"type", "enum", "const", "anyOf", "$ref", *_DEFS} | {k for ks in _BY_TYPE.values() for k in ks})


def _is_type(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PY_TYPES[kind])


def checked_schema(schema: Any, where: str, param: str) -> dict[str, Any]:
    """`schema` without its annotations, if the grammar enforces all of it; else a 400 naming the keyword."""
    return _Checker(schema, where, param).schema(schema, "")
