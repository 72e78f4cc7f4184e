"""The add-case form as plain data: its fields read into the API's body, and a run's calls and
lists offered to fill it.

Pure functions over the form's fields and a run's JSON (no Flask, no database), so the page's
route stays thin and the same rules fill the form with JavaScript (htmx re-renders it) and
without (a "take" button posts the form back).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .grading import element_key
from .schemas.common import TooDeep, parse_json

MAX_LISTS = 20  # lists of a run's output offered at most
MAX_ELEMENTS = 100  # elements of a list taken at most: a case holds 100 items
SHOULD_SAY_CHARS = 4000  # what a `shouldSay` holds (`schemas.corrections.CorrectionBody`)
# A "should call" row's fields: its tool and args, and one argument's matcher (docs/grading.md
# §3): the argument, its values one a line, a tolerance, what text ignores, and whether it may
# be left out (the check boxes are "on" when ticked)
CALL_FIELDS = ("tool", "args", "arg", "anyOf", "tolerance", "ignoreCase", "ignoreSpace",
               "ignorePunctuation", "optional")  # fmt: skip
IGNORE_BOXES = (
    ("case", "ignoreCase"),
    ("space", "ignoreSpace"),
    ("punctuation", "ignorePunctuation"),
)


@dataclass(frozen=True)
class CallOffer:
    """A call the run made, as a "should call" row would show it."""

    tool: str
    args: str  # JSON text, "" for no args


@dataclass(frozen=True)
class ItemOffer:
    """An element of a list in the run's output, as a ranked item row would show it."""

    key: str  # "" when the element has no key: the expert types one
    pointer: str
    rank: int
    value: Any


@dataclass(frozen=True)
class ListOffer:
    """An array in the run's output, offered as a ranked list."""

    pointer: str
    items: list[ItemOffer] = field(default_factory=list)


@dataclass(frozen=True)
class RunOffers:
    """What a run offers the form: its calls and the arrays of its output."""

    calls: list[CallOffer]
    lists: list[ListOffer]


def _token(name: str | int) -> str:
    """One JSON Pointer reference token, escaped (RFC 6901)."""
    return str(name).replace("~", "~0").replace("/", "~1")


def _arrays(value: Any, pointer: str = "") -> Iterator[tuple[str, list[Any]]]:
    """Every array in a JSON value with its pointer, outer ones first, in document order."""
    if isinstance(value, list):
        yield pointer, value
        children: Any = enumerate(value)
    elif isinstance(value, dict):
        children = value.items()
    else:
        return
    for name, child in children:
        yield from _arrays(child, f"{pointer}/{_token(name)}")


def _args_text(args: Any) -> str:
    """A call's args as the form's JSON field shows them: "" when there are none."""
    return json.dumps(args, ensure_ascii=False) if args else ""


def run_offers(output: Any, calls: Any) -> RunOffers:
    """A run's calls, and each array of its output as a ranked list whose elements have the
    pointer at which they are and the key grading would read (their own `key`, else `id`, or
    themselves when a string or number), ranked from 0 in their order."""
    offered_calls = [
        CallOffer(str(call.get("tool", "")), _args_text(call.get("args")))
        for call in calls or []
        if isinstance(call, dict)
    ]
    lists = []
    for pointer, elements in _arrays(output):
        if len(lists) == MAX_LISTS:
            break
        if not elements:
            continue
        items = [
            ItemOffer(element_key(value) or "", f"{pointer}/{rank}", rank, value)
            for rank, value in enumerate(elements[:MAX_ELEMENTS])
        ]
        lists.append(ListOffer(pointer, items))
    return RunOffers(offered_calls, lists)


def take(shown: dict[str, Any], offers: RunOffers, choice: str) -> dict[str, Any]:
    """The form's fields with one of the run's offers taken into them (a new dict):

    - `call:N`: the run's N-th call as a new "should call" row, its args editable;
    - `not:N`: the N-th call's tool added to "must not call" (once);
    - `list:POINTER`: the array's elements as the ranked item rows, each not judged yet, or
      with the verdict its row already had.

    Either list of calls is only allowed with the decisions judged wrong, so taking a call says
    so. A choice that names nothing the run offers (a stale form) changes nothing."""
    kind, _, what = choice.partition(":")
    shown = dict(shown)
    if kind in ("call", "not") and what.isdigit() and int(what) < len(offers.calls):
        call = offers.calls[int(what)]
        shown["decisions"] = "wrong"
        if kind == "call":
            shown["shouldCall"] = [*shown["shouldCall"], {"tool": call.tool, "args": call.args}]
        else:
            banned = shown["mustNotCall"].splitlines()
            if call.tool not in (line.strip() for line in banned):
                shown["mustNotCall"] = "\n".join([*banned, call.tool]).strip()
    elif kind == "list":
        found = next((offer for offer in offers.lists if offer.pointer == what), None)
        if found is not None:
            verdicts = {row["pointer"]: row["verdict"] for row in shown["items"]}
            shown["items"] = [
                {
                    "key": item.key,
                    "pointer": item.pointer,
                    "rank": str(item.rank),
                    "verdict": verdicts.get(item.pointer, ""),
                }
                for item in found.items
            ]
    return shown


# ---------------------------------------------------------------- reading the form


def _rows(form: Mapping[str, str], prefix: str, names: tuple[str, ...]) -> list[dict[str, str]]:
    """Repeated rows `prefix-N-name`, in order, leaving out rows left empty."""
    indexes = sorted(
        {
            int(k.split("-")[1])
            for k in form
            if k.startswith(prefix + "-") and k.count("-") == 2 and k.split("-")[1].isdigit()
        }
    )
    rows = [{n: form.get(f"{prefix}-{i}-{n}", "").strip() for n in names} for i in indexes]
    return [r for r in rows if any(r.values())]


def calls_taken(body: dict[str, Any], result: dict[str, Any] | None) -> dict[str, Any]:
    """A case's body with the calls a candidate made as what it should call (run triage: the
    candidate was right and the expectation wrong): its other parts as they are."""
    calls = [
        {"tool": call["tool"], **({"args": call["args"]} if call.get("args") else {})}
        for call in (result or {}).get("calls") or []
        if isinstance(call, dict) and isinstance(call.get("tool"), str)
    ]
    out = {k: v for k, v in body.items() if k not in ("decisions", "shouldCall", "mustNotCall")}
    if calls:
        return {"decisions": "wrong", "shouldCall": calls, **out}
    return {"decisions": "right", **out}


def answer_taken(body: dict[str, Any], result: dict[str, Any] | None) -> dict[str, Any]:
    """A case's body with the candidate's answer as what it should say (run triage: the
    corrected run's answer was wrong, the candidate's is right): `answer: wrong` with its output
    as `shouldSay` (a string as it is, else as JSON, cut at the 4,000 characters a `shouldSay`
    holds); its other parts as they are. A candidate with no output changes nothing."""
    output = (result or {}).get("output")
    if output is None or output == "":
        return dict(body)
    said = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    out = {k: v for k, v in body.items() if k not in ("answer", "shouldSay", "why")}
    return {**out, "answer": "wrong", "shouldSay": said[:SHOULD_SAY_CHARS]}


TAKES = {"calls": calls_taken, "answer": answer_taken}  # what triage takes from a candidate


def shown_fields(form: Mapping[str, str]) -> dict[str, Any]:
    """The add-case form's fields as typed, trimmed, empty rows left out: what to show again."""
    shown: dict[str, Any] = {
        k: form.get(k, "").strip()
        for k in ("runId", "decisions", "answer", "shouldSay", "why", "mustNotCall", "exactly")
    }
    shown["shouldCall"] = _rows(form, "shouldCall", CALL_FIELDS)
    shown["items"] = _rows(form, "items", ("key", "pointer", "rank", "verdict"))
    return shown


def case_body(shown: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The form's fields as the API's JSON body, and the errors found before the schema (args
    that are not JSON, a rank that is not a number), named as the schema names its own: by
    the body's items (`row_errors` names them by the form's rows). Item rows not judged are
    left out: only the verdicts given are part of a case."""
    body: dict[str, Any] = {
        k: shown[k] for k in ("runId", "decisions", "answer", "shouldSay", "why") if shown[k]
    }
    errors: dict[str, list[str]] = {}
    if shown["mustNotCall"]:
        body["mustNotCall"] = [t.strip() for t in shown["mustNotCall"].splitlines() if t.strip()]
    if shown.get("exactly"):
        body["exactly"] = True
    if shown["shouldCall"]:
        body["shouldCall"] = []
        for i, row in enumerate(shown["shouldCall"]):
            call: dict[str, Any] = {"tool": row["tool"]}
            if row.get("args"):
                try:
                    call["args"] = parse_json(row["args"])
                except TooDeep as err:
                    errors[f"shouldCall.{i}.args"] = [str(err)]
                except ValueError:
                    errors[f"shouldCall.{i}.args"] = [
                        'Not valid JSON: write an object, e.g. {"q": "lease"}.'
                    ]
            if row.get("arg"):
                try:
                    call["match"] = {row["arg"]: _matcher(row)}
                except ValueError as err:
                    errors[f"shouldCall.{i}.match"] = [str(err)]
            body["shouldCall"].append(call)
    judged = _judged(shown)
    if judged:
        body["items"] = []
        for i, row_index in enumerate(judged):
            row = shown["items"][row_index]
            item: dict[str, Any] = {k: row[k] for k in ("key", "pointer", "verdict") if row[k]}
            if row["rank"]:
                if row["rank"].isdigit():
                    item["rank"] = int(row["rank"])
                else:
                    errors[f"items.{i}.rank"] = ["A whole number, 0 for the first."]
            body["items"].append(item)
    return body, errors


def _value(line: str) -> Any:
    """A line of "any of" as a value: JSON when it is (3, true, "3"), else the text itself."""
    try:
        return parse_json(line)
    except ValueError:
        return line


def _matcher(row: dict[str, str]) -> dict[str, Any]:
    """A row's matcher: with a tolerance, a number within it; with something ignored, text
    equal to one of the lines; else any of the lines' values. ValueError says what is wrong."""
    lines = [line.strip() for line in row.get("anyOf", "").splitlines() if line.strip()]
    ignore = [name for name, box in IGNORE_BOXES if row.get(box)]
    if row.get("tolerance"):
        values = [_value(line) for line in lines]
        tolerance = _value(row["tolerance"])
        if (
            len(values) != 1
            or isinstance(values[0], bool)
            or not isinstance(values[0], int | float)
        ):
            raise ValueError("With a tolerance, give one number on the first line.")
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
            raise ValueError("The tolerance is a number, such as 0.5.")
        matcher: dict[str, Any] = {"number": values[0], "tolerance": tolerance}
    elif ignore:
        matcher = {"text": lines, "ignore": ignore}
    else:
        matcher = {"anyOf": [_value(line) for line in lines]}
    if row.get("optional"):
        matcher["optional"] = True
    return matcher


def _judged(shown: dict[str, Any]) -> list[int]:
    """The indexes of the item rows given a verdict: the body's items, in order."""
    return [i for i, row in enumerate(shown["items"]) if row["verdict"]]


def row_errors(errors: dict[str, list[str]], shown: dict[str, Any]) -> dict[str, list[str]]:
    """Errors on the body named by the form's rows: `items.N.…` is the N-th item of the body,
    which is a later row when rows before it were not judged; `shouldCall.N.match.ARG` is the
    row's matcher, `shouldCall.N.match`."""
    judged = _judged(shown)
    named: dict[str, list[str]] = {}
    for name, messages in errors.items():
        parts = name.split(".")
        if parts[0] == "items" and len(parts) > 1 and parts[1].isdigit():
            index = int(parts[1])
            parts[1] = str(judged[index] if index < len(judged) else index)
        if parts[0] == "shouldCall" and parts[2:3] == ["match"]:  # the row's one matcher
            parts = parts[:3]
        named.setdefault(".".join(parts), []).extend(messages)
    return named
