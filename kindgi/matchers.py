"""Argument matchers: what a `shouldCall` entry's `match` says a right value is, checked and
explained (docs/grading.md §3, "Matchers").

Pure like `kindgi.grading`, which uses it on the server and in the pytest plugin alike: no Flask,
no database. A matcher is one JSON object with exactly one kind (`anyOf`, `text`, `number`,
`schema`) and, on any kind, `optional` and `type`. `problems` says what is wrong with one as the
400 names it; `fits` and `why_not` grade a value against a valid one.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Callable
from typing import Any

KINDS = ("anyOf", "text", "number", "schema")
IGNORABLE = ("case", "space", "punctuation")
TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
MAX_MATCH_JSON_CHARS = 16_000  # an entry's `match`, as canonical JSON
_KEYS = {
    "anyOf": {"anyOf", "optional", "type"},
    "text": {"text", "ignore", "optional", "type"},
    "number": {"number", "tolerance", "optional", "type"},
    "schema": {"schema", "optional", "type"},
}
_COMMON = {"optional": {"type": "boolean"}, "type": {"enum": list(TYPES)}}
_IGNORE_RULE = {
    "oneOf": [
        {"enum": list(IGNORABLE)},
        {
            "type": "object",
            "properties": {"chars": {"type": "string", "minLength": 1}},
            "required": ["chars"],
            "additionalProperties": False,
        },
    ]
}


def _kind(name: str, schema: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: schema, **more, **_COMMON},
        "required": [name],
        "additionalProperties": False,
    }


# One matcher as a JSON Schema, for the OpenAPI document; `problems` is what checks a request
MATCHER_SCHEMA = {
    "oneOf": [
        _kind("anyOf", {"type": "array", "minItems": 1}),
        _kind(
            "text",
            {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                            "minItems": 1}]},
            ignore={"type": "array", "items": _IGNORE_RULE},
        ),
        _kind("number", {"type": "number"}, tolerance={"type": "number", "minimum": 0}),
        _kind("schema", {"type": ["object", "boolean"]}),
    ]
}  # fmt: skip


def json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (1 == 1.0), booleans apart from numbers (true != 1),
    objects and arrays deeply by the same rule. Python's `==` alone would say True == 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return type(a) is type(b) and a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Python's types as JSON names them, bool before int (a bool is an int to Python)
_JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def json_type(value: Any) -> str | None:
    """The JSON type of a value as written: 3 is an integer, 3.0 a number (JSON Schema would
    call both integers); None for what JSON has no name for."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), None)


def _type_fits(wanted: str, value: Any) -> bool:
    got = json_type(value)
    return got == wanted or (wanted == "number" and got == "integer")


# --- checking a matcher ----------------------------------------------------------------------


def _ignore_problems(ignore: Any) -> list[str]:
    if not isinstance(ignore, list):
        return ['ignore: a list of "case", "space", "punctuation" or {"chars": "…"}.']
    said = []
    for rule in ignore:
        if rule in IGNORABLE:
            continue
        if (
            isinstance(rule, dict)
            and rule.keys() == {"chars"}
            and isinstance(rule["chars"], str)
            and rule["chars"]
        ):
            continue
        said.append(f"ignore: {json.dumps(rule)} is not one of {', '.join(IGNORABLE)} or chars.")
    return said


def _kind_problems(kind: str, matcher: dict[str, Any]) -> list[str]:
    value = matcher[kind]
    if kind == "anyOf":
        if not isinstance(value, list) or not value:
            return ["anyOf: a non-empty list of values."]
    elif kind == "text":
        texts = value if isinstance(value, list) else [value]
        if not texts or not all(isinstance(t, str) for t in texts):
            return ["text: a string or a non-empty list of strings."]
        return _ignore_problems(matcher.get("ignore", []))
    elif kind == "number":
        tolerance = matcher.get("tolerance", 0)
        if not _is_number(value) or not math.isfinite(value):
            return ["number: a finite number."]
        if not _is_number(tolerance) or not math.isfinite(tolerance) or tolerance < 0:
            return ["tolerance: a finite number, 0 or more."]
    else:
        return _schema_problems(value)
    return []


# Keywords a schema matcher may not use: a regular expression can take the server unbounded
# time on a crafted value (Python's `re` backtracks), and what a reference names must be in the
# schema itself (nothing is fetched)
REFUSED_KEYWORDS = ("pattern", "patternProperties", "$dynamicRef")


def _schema_problems(schema: Any) -> list[str]:
    """What keeps a JSON Schema from being a matcher: not one (2020-12), a refused keyword, or
    a `$ref` that does not resolve within it."""
    if not isinstance(schema, dict | bool):
        return ["schema: a JSON Schema (an object or a boolean)."]
    from jsonschema import Draft202012Validator  # imported when first needed: 0.1 s
    from jsonschema.exceptions import SchemaError
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        return [f"schema: not a valid JSON Schema (2020-12): {err.message}"]
    refs, refused = _keywords(schema)
    if refused:
        return [f"schema: {', '.join(sorted(refused))} not taken here (use text or anyOf)."]
    base = "urn:kindgi:matcher"
    resource = DRAFT202012.create_resource(schema)
    resolver = Registry().with_resource(base, resource).resolver(base_uri=base)
    for ref in refs:
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return [f"schema: $ref {ref!r} is not within the schema."]
    return []


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("prefixItems", "allOf", "anyOf", "oneOf")
_SCHEMA_ONES = (
    "items", "not", "if", "then", "else", "contains", "additionalProperties", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip


def _keywords(schema: Any) -> tuple[list[str], set[str]]:
    """The `$ref`s a schema holds in any of its subschemas, and the refused keywords they use
    (values such as an `enum`'s or a `const` are data, not looked into)."""
    refs: list[str] = []
    refused: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        refused |= set(REFUSED_KEYWORDS) & set(node)
        if isinstance(node.get("$ref"), str):
            refs.append(node["$ref"])
        for name in _SCHEMA_MAPS:
            if isinstance(node.get(name), dict):
                stack += node[name].values()
        for name in _SCHEMA_LISTS:
            if isinstance(node.get(name), list):
                stack += node[name]
        stack += [node[name] for name in _SCHEMA_ONES if name in node]
    return refs, refused


def problems(matcher: Any) -> list[str]:
    """What is wrong with one argument's matcher, in words for a 400; [] when it is valid."""
    if not isinstance(matcher, dict):
        return [f"A matcher is an object with one of {', '.join(KINDS)}."]
    kinds = [k for k in KINDS if k in matcher]
    if len(kinds) != 1:
        unknown = sorted(set(matcher) - {k for keys in _KEYS.values() for k in keys})
        if unknown and not kinds:
            return [f"Unknown matcher {unknown[0]!r}: use one of {', '.join(KINDS)}."]
        return [f"Exactly one of {', '.join(KINDS)}."]
    kind = kinds[0]
    said = [f"Unknown field {key!r} for {kind}." for key in sorted(set(matcher) - _KEYS[kind])]
    if "optional" in matcher and not isinstance(matcher["optional"], bool):
        said.append("optional: true or false.")
    if "type" in matcher and matcher["type"] not in TYPES:
        said.append(f"type: one of {', '.join(TYPES)}.")
    return said + _kind_problems(kind, matcher)


# --- grading a value -------------------------------------------------------------------------


_KEPT = 4096  # normalisers and validators kept, by their rules' text, before starting afresh
_normalisers: dict[str, Callable[[str], str]] = {}
_validators: dict[str, Callable[[Any], bool]] = {}


def _kept(cache: dict[str, Any], key: str, make: Callable[[], Any]) -> Any:
    """`cache[key]`, made once: a request's expectations are new objects each time, so they
    are kept by their text (`repr`: cheap, and as distinct as the JSON values it shows)."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= _KEPT:
            cache.clear()
        found = cache[key] = make()
    return found


def _make_normaliser(ignore: list[Any]) -> Callable[[str], str]:
    """The text as the `ignore` rules see it: case folded, whitespace, punctuation or the
    named characters removed, in the order listed."""
    steps: list[Callable[[str], str]] = []
    for rule in ignore:
        if rule == "case":
            steps.append(str.casefold)
        elif rule == "space":
            steps.append(lambda s: "".join(c for c in s if not c.isspace()))
        elif rule == "punctuation":
            steps.append(
                lambda s: "".join(c for c in s if not unicodedata.category(c).startswith("P"))
            )
        else:
            table = str.maketrans("", "", rule["chars"])
            steps.append(lambda s, table=table: s.translate(table))

    def normalise(text: str) -> str:
        for step in steps:
            text = step(text)
        return text

    return normalise


def _text_fits(matcher: dict[str, Any], value: Any) -> bool:
    if not isinstance(value, str):
        return False
    ignore = matcher.get("ignore") or []
    normalise = _kept(_normalisers, repr(ignore), lambda: _make_normaliser(ignore))
    texts = matcher["text"] if isinstance(matcher["text"], list) else [matcher["text"]]
    said = normalise(value)
    return any(normalise(text) == said for text in texts)


def _present_fits(matcher: dict[str, Any], value: Any) -> bool:
    """Whether a value that is there meets the matcher (its `type`, then its kind)."""
    wanted_type = matcher.get("type")
    if wanted_type is not None and not _type_fits(wanted_type, value):
        return False
    if "anyOf" in matcher:
        return any(json_equal(value, option) for option in matcher["anyOf"])
    if "text" in matcher:
        return _text_fits(matcher, value)
    if "number" in matcher:
        tolerance = matcher.get("tolerance", 0)
        return _is_number(value) and abs(value - matcher["number"]) <= tolerance
    schema = matcher["schema"]
    valid = _kept(_validators, repr(schema), lambda: _schema_test(schema))
    return valid(value)


def _schema_test(schema: Any) -> Callable[[Any], bool]:
    """A JSON Schema's validator (2020-12): `jsonschema` is imported only where a case has a
    schema matcher, so `kindgi test-run` and the pytest plugin start without it."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema).is_valid


def fits(matcher: dict[str, Any], args: dict[str, Any], name: str) -> bool:
    """Whether the argument `name` of a call's `args` meets the matcher: absent fits only an
    optional one."""
    if name not in args:
        return bool(matcher.get("optional"))
    return _present_fits(matcher, args[name])


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def expected_text(matcher: dict[str, Any]) -> str:
    """What the matcher wants, in words: 'any of "NY", "New York"'."""
    if "anyOf" in matcher:
        said = "any of " + ", ".join(_shown(v) for v in matcher["anyOf"])
    elif "text" in matcher:
        texts = matcher["text"] if isinstance(matcher["text"], list) else [matcher["text"]]
        said = "text " + " or ".join(_shown(t) for t in texts)
        rules = [
            r if isinstance(r, str) else f"the characters {_shown(r['chars'])}"
            for r in matcher.get("ignore", [])
        ]
        if rules:
            said += " ignoring " + ", ".join(rules)
    elif "number" in matcher:
        said = f"{_shown(matcher['number'])} ± {_shown(matcher.get('tolerance', 0))}"
    else:
        said = "a value valid against the schema " + _shown(matcher["schema"])
    if "type" in matcher:
        said = f"{'an' if matcher['type'][0] in 'aeiou' else 'a'} {matcher['type']}, {said}"
    return said


def why_not(name: str, matcher: dict[str, Any], args: dict[str, Any]) -> str:
    """Why the argument fails its matcher, naming it: '`city`: got "Boston", expected any of
    "NY", "New York"'."""
    got = "absent" if name not in args else "got " + _shown(args[name])
    return f"`{name}`: {got}, expected {expected_text(matcher)}"


def unnamed(entry: dict[str, Any], args: dict[str, Any]) -> list[str]:
    """The arguments a call passes that the entry names in neither `args` nor `match`."""
    named_args, named_match = entry.get("args") or {}, entry.get("match") or {}
    return [name for name in args if name not in named_args and name not in named_match]
