#!/usr/bin/env python3
"""The Berkeley Function Calling Leaderboard's data as a Kindgi export, to import as cases.

    pip download bfcl-eval --no-deps -d /tmp/bfcl && unzip -q /tmp/bfcl/*.whl -d /tmp/bfcl
    python docs/examples/bfcl.py /tmp/bfcl/bfcl_eval/data --limit 100 > bfcl.jsonl
    flask --app app kindgi import bfcl.jsonl --agent demo.bfcl --project …

Each BFCL entry (its question, its functions and its possible answers) becomes one JSON line
as `GET …/test-set/export` writes it: the run's `input` is the question and the functions, and
`expect` says what BFCL's AST checker says (docs/grading.md §3 and "BFCL"):

- each possible-answer call is a `shouldCall` entry naming every parameter BFCL lists in `match`;
- a parameter's possible values are `anyOf` (`text` for strings, with BFCL's string rule
  `ignore: ["case", {"chars": " ,./-_*^"}]`), and `""` among them makes it `optional` unless
  the function requires it;
- an `integer` parameter is `type: "integer"` (3.0 is not one), a `float` `type: "number"`, a
  `boolean` `type: "boolean"`; a `dict` parameter (or an array of them) is a JSON Schema of its
  possible objects; a parameter BFCL lists that the function does not declare is
  `{"schema": false}`, as BFCL refuses any value for it;
- `exactly: true`: these calls, one to one, and no argument BFCL does not list.

Only the Python categories' AST rules are converted (simple, multiple, parallel,
parallel-multiple and the live ones); Java, JavaScript and the executable, multi-turn and
relevance categories have rules a matcher does not say.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple")
STRING_RULE = ["case", {"chars": " ,./-_*^"}]  # BFCL's standardize_string, but for ' → "
OPTIONAL = ""  # a possible answer of "" means the parameter may be left out
TYPES = {"integer": "integer", "float": "number", "boolean": "boolean"}
VERSION = "bfcl"  # the version the imported runs are recorded as


def read_json_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _object(answer: dict[str, Any]) -> dict[str, Any]:
    """One of BFCL's possible objects (each key's possible values) as a JSON Schema: each key
    optional when "" is among its values, no other key."""
    return {
        "type": "object",
        "properties": {
            key: {"enum": [v for v in values if v != OPTIONAL]} for key, values in answer.items()
        },
        "required": [key for key, values in answer.items() if OPTIONAL not in values],
        "additionalProperties": False,
    }


def _objects(answers: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """BFCL's possible lists of objects: as many objects, each one of its place's."""
    return {"anyOf": [_places(answer) for answer in answers]}


def _places(answer: list[dict[str, Any]]) -> dict[str, Any]:
    if not answer:  # prefixItems may not be empty
        return {"type": "array", "maxItems": 0}
    return {
        "type": "array",
        "prefixItems": [_object(place) for place in answer],
        "items": False,
        "minItems": len(answer),
    }


def _all(values: list[Any], kind: type) -> bool:
    return all(isinstance(v, kind) for v in values)


def matcher(declared: dict[str, Any] | None, possible: list[Any], required: bool) -> dict[str, Any]:
    """One parameter's possible values as the matcher that says the same; `declared` is the
    function's description of it (None: BFCL lists a parameter the function does not declare,
    and refuses any value for it, as it does with no possible value at all)."""
    values = [v for v in possible if v != OPTIONAL]
    kind = (declared or {}).get("type")
    items = ((declared or {}).get("items") or {}).get("type")
    if declared is None or not possible:  # BFCL takes no value (nor its absence, unless "")
        found: dict[str, Any] = {"schema": False}
    elif not values:  # only "": BFCL takes nothing but "" (or no value)
        found = {"anyOf": [OPTIONAL]}
    elif kind in ("string", "any") and _all(values, str):
        found = {"text": values, "ignore": STRING_RULE}
    elif kind == "dict" and _all(values, dict):
        found = {"schema": {"anyOf": [_object(v) for v in values]}}
    elif items == "dict" and _all(values, list) and all(_all(v, dict) for v in values):
        found = {"schema": _objects(values)}
    else:
        found = {"anyOf": values}
        if kind in TYPES and all(_fits(TYPES[kind], v) for v in values):
            found["type"] = TYPES[kind]
        elif kind in ("array", "tuple") and _all(values, list):
            found["type"] = "array"
    if OPTIONAL in possible and not required:
        found["optional"] = True
    return found


def _fits(json_type: str, value: Any) -> bool:
    """Whether a possible answer has the JSON type its parameter declares (BFCL also keeps
    "variables", answers of another type, which then compare as they are)."""
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


def convert(entry: dict[str, Any], answer: dict[str, Any], category: str) -> dict[str, Any]:
    """One BFCL entry and its possible answer as an exported case."""
    functions = {f["name"]: f for f in entry["function"]}
    should_call = []
    for call in answer["ground_truth"]:
        ((name, params),) = call.items()
        declared = functions[name]["parameters"]
        required = set(declared.get("required") or [])
        should_call.append(
            {
                "tool": name,
                "args": {},
                "match": {
                    param: matcher(declared["properties"].get(param), possible, param in required)
                    for param, possible in params.items()
                },
            }
        )
    return {
        "madeOn": VERSION,
        "input": {"bfcl": entry["id"], "category": category, "question": entry["question"],
                  "functions": entry["function"]},
        "output": None,
        "calls": [],
        "expect": {"decisions": {"verdict": "wrong", "shouldCall": should_call, "exactly": True}},
    }  # fmt: skip


def convert_file(data: Path, category: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The first `limit` entries of one category, converted (BFCL_v4_<category>.json and its
    possible_answer/ twin)."""
    name = f"BFCL_v4_{category}.json"
    answers = {a["id"]: a for a in read_json_lines(data / "possible_answer" / name)}
    for count, entry in enumerate(read_json_lines(data / name)):
        if limit is not None and count >= limit:
            return
        yield convert(entry, answers[entry["id"]], category)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path, help="bfcl_eval/data of the unpacked wheel")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--limit", type=int, help="entries per category")
    args = parser.parse_args(argv)
    for category in args.categories.split(","):
        for line in convert_file(args.data, category, args.limit):
            sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
