"""Marshmallow schemas: what a request may say and what a response says.

Each request body has one schema, used alike for JSON and for the HTML forms; the same schemas
generate the OpenAPI document. Schemas check shape and limits; rules that need the database
(does the run exist, does a pointer resolve) are the service's.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

import orjson
import rfc8785
from jsonpointer import JsonPointer, JsonPointerException
from marshmallow import (
    EXCLUDE,
    RAISE,
    Schema,
    ValidationError,
    fields,
    post_dump,
    post_load,
    pre_load,
    validate,
    validates_schema,
)
from sqlalchemy.engine import Row

from ..errors import bad_input
from ..grading import PARTS
from ..models import CORRECTION_STATUSES
from ..words import words

UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
KIND_RE = re.compile(r"^(correction|hand)(,(correction|hand))*$")
MAX_ARGS_JSON_CHARS = 4000
VERDICTS = ("right", "wrong")
MAX_SEARCH_CHARS = 200


# ---------------------------------------------------------------- fields


def rfc3339(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, to the millisecond where there is one; naive means UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    spec = "seconds" if value.microsecond == 0 else "milliseconds"
    return value.isoformat(timespec=spec) + "Z"


class Timestamp(fields.DateTime):
    """RFC 3339 timestamps (see `rfc3339`); one without a time zone is refused."""

    def _serialize(self, value: datetime | None, attr: Any, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else rfc3339(value)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> datetime:
        parsed = super()._deserialize(value, attr, data, **kwargs)
        if parsed.tzinfo is None:
            raise self.make_error("invalid", input=value, obj_type="datetime with a time zone")
        return parsed.astimezone(UTC).replace(tzinfo=None)


class ProjectId(fields.String):
    """A project id: a UUID in any case, answered lower-case."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {}).setdefault("format", "uuid")
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if not UUID_RE.match(text):
            raise ValidationError("Not a project id (a UUID).")
        return text.lower()


class WholeNumber(fields.Integer):
    """An integer in a query string, written as one: digits only, no fractions or booleans."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool | float):
            raise self.make_error("invalid")
        if isinstance(value, str) and not re.fullmatch(r"-?[0-9]{1,18}", value):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class AsStored(fields.Nested):
    """A value stored already in the shape `nested` describes (a case's `expect`, who did it):
    answered as it is, while the OpenAPI document still shows the nested schema."""

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> Any:
        return value


def _canonical_args(args: dict[str, Any]) -> None:
    """`args`: at most 100 top-level fields and 4000 characters of canonical JSON (RFC 8785)."""
    if len(args) > 100:
        raise ValidationError("At most 100 properties.")
    try:
        canonical = rfc8785.dumps(args).decode("utf-8")
    except Exception:  # non-finite floats, integers JSON can't carry exactly
        raise ValidationError("Not representable as canonical JSON.") from None
    if len(canonical) > MAX_ARGS_JSON_CHARS:
        raise ValidationError(f"At most {MAX_ARGS_JSON_CHARS} characters in canonical JSON.")


def _json_pointer(text: str) -> None:
    try:
        JsonPointer(text)
    except JsonPointerException:
        raise ValidationError("Not a JSON Pointer (RFC 6901), such as /matches/2.") from None


def _nonempty_max(n: int) -> validate.Length:
    return validate.Length(min=1, max=n)


# ---------------------------------------------------------------- request bodies


def _refuse_unstorable(checked: Any, data: Any) -> Any:
    """`data`, unless `checked` (all of it or its known part) holds what no database can store."""
    unstorable = _unstorable(checked)
    if unstorable:
        raise ValidationError(unstorable)
    return data


def _unstorable(data: Any, path: str = "") -> dict[str, list[str]]:
    """What no database can store, anywhere in `data`: NUL characters and lone surrogates in
    text, and numbers past a double (JSON's 1e400 reads as infinity)."""
    if isinstance(data, float) and not math.isfinite(data):
        return {path or "_body": ["A number too large to store (past a double)."]}
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            return {path or "_body": ["Not valid Unicode text (a lone surrogate)."]}
        return {path or "_body": ["No NUL characters."]} if "\x00" in data else {}
    found: dict[str, list[str]] = {}
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        found.update(_unstorable(key, where) if isinstance(key, str) else {})
        found.update(_unstorable(value, where))
    return found


class StrictSchema(Schema):
    """A request body: unknown fields are refused, not ignored, and so is text no database
    can store (NUL, lone surrogates) anywhere in it."""

    class Meta:
        unknown = RAISE

    @pre_load
    def _storable(self, data: Any, **_: Any) -> Any:
        return _refuse_unstorable(data, data)


class CallExpectation(StrictSchema):
    tool = fields.String(required=True, validate=_nonempty_max(200))
    args = fields.Dict(
        keys=fields.String(),
        validate=_canonical_args,
        metadata={
            "description": "Top-level argument fields to compare, by value; "
            "at most 100 properties and 4000 characters in canonical JSON."
        },
    )


class ItemVerdict(StrictSchema):
    key = fields.String(required=True, validate=_nonempty_max(200))
    pointer = fields.String(validate=[validate.Length(max=500), _json_pointer])
    rank = fields.Integer(strict=True, validate=validate.Range(min=0))
    verdict = fields.String(required=True, validate=validate.OneOf(VERDICTS))


class CorrectionBody(StrictSchema):
    """A correction's body: the verdicts on one run. Also the body of a hand case."""

    decisions = fields.String(validate=validate.OneOf(VERDICTS))
    shouldCall = fields.List(fields.Nested(CallExpectation), validate=validate.Length(max=50))
    mustNotCall = fields.List(
        fields.String(validate=_nonempty_max(200)), validate=validate.Length(max=50)
    )
    answer = fields.String(validate=validate.OneOf(VERDICTS))
    shouldSay = fields.String(validate=_nonempty_max(4000))
    why = fields.String(validate=_nonempty_max(4000))
    items = fields.List(fields.Nested(ItemVerdict), validate=validate.Length(max=100))

    @validates_schema
    def _rules(self, data: dict[str, Any], **_: Any) -> None:
        errors: dict[str, list[str]] = {}

        def add(field: str, message: str) -> None:
            errors.setdefault(field, []).append(message)

        if not any(k in data for k in ("decisions", "answer", "items")):
            add("decisions", "Give at least one of decisions, answer and items.")
        calls, banned = data.get("shouldCall"), data.get("mustNotCall")
        if data.get("decisions") == "wrong":
            if not calls and not banned:
                add("decisions", "decisions: wrong needs an entry in shouldCall or mustNotCall.")
        else:
            for name in ("shouldCall", "mustNotCall"):
                if name in data:
                    add(name, 'Only with decisions: "wrong".')
        both = {c["tool"] for c in calls or []} & set(banned or [])
        if both:
            add(
                "mustNotCall",
                f"A tool can't be in both shouldCall and mustNotCall: {', '.join(sorted(both))}.",
            )
        if data.get("answer") == "wrong":
            if "shouldSay" not in data and "why" not in data:
                add("answer", 'answer: "wrong" needs shouldSay or why.')
        elif "shouldSay" in data:
            add("shouldSay", 'Only with answer: "wrong".')
        if "why" in data and "answer" not in data:
            add("why", "Only with answer.")
        keys = [item["key"] for item in data.get("items") or []]
        if len(keys) != len(set(keys)):
            add("items", "Each key once.")
        if errors:
            raise ValidationError(errors)


class AddCaseBody(CorrectionBody):
    runId = fields.String(required=True, validate=_nonempty_max(200))


class RecordCorrectionBody(CorrectionBody):
    group = fields.String(
        validate=_nonempty_max(64), metadata={"description": "The correction's group, if any."}
    )


class CorrectionStatusBody(StrictSchema):
    status = fields.String(required=True, validate=validate.OneOf(CORRECTION_STATUSES))


class RetireBody(StrictSchema):
    reason = fields.String(required=True, validate=_nonempty_max(1000))


class RestoreBody(StrictSchema):
    """Nothing to say: an empty object."""


def _distinct(ids: list[str]) -> None:
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    if twice:
        raise ValidationError(f"Named more than once: {', '.join(twice)}.")


class BulkRestoreBody(StrictSchema):
    """Several cases of one test set, each named once."""

    projectId = ProjectId(required=True)
    caseIds = fields.List(
        fields.String(validate=_nonempty_max(64)),
        required=True,
        validate=[validate.Length(min=1, max=500), _distinct],
    )


class BulkRetireBody(BulkRestoreBody):
    reason = fields.String(required=True, validate=_nonempty_max(1000))


class ToolCall(StrictSchema):
    tool = fields.String(required=True, validate=_nonempty_max(200))
    args = fields.Dict(keys=fields.String(), load_default=dict)


class RecordRunBody(StrictSchema):
    """A run as the agent platform reports it; its id is the server's to make, so no client
    can probe which ids another tenant's runs have."""

    projectId = ProjectId(required=True)
    version = fields.String(required=True, validate=_nonempty_max(100))
    status = fields.String(required=True, validate=validate.OneOf(("running", "finished")))
    input = fields.Raw(allow_none=True)
    output = fields.Raw(allow_none=True)
    calls = fields.List(fields.Nested(ToolCall), validate=validate.Length(max=1000))
    replayOf = fields.String(validate=_nonempty_max(64))


class NewTokenBody(StrictSchema):
    name = fields.String(required=True, validate=_nonempty_max(200))
    expiresAt = Timestamp(allow_none=True)


# ---------------------------------------------------------------- query strings


class QuerySchema(Schema):
    """Query strings: unknown parameters are ignored, known ones checked (text no database can
    store refused, as in a body: PostgreSQL can't even compare a NUL)."""

    class Meta:
        unknown = EXCLUDE

    @pre_load
    def _storable(self, data: Any, **_: Any) -> Any:
        # a cursor is unsealed, never compared in SQL: a spoilt one is 400 `cursor-invalid`
        known = {k: v for k, v in data.items() if k in self.fields and k != "cursor"}
        return _refuse_unstorable(known, data)


class TestSetQuery(QuerySchema):
    projectId = ProjectId(required=True)


class Paging(QuerySchema):
    """A page of a list: how many, and where the last page ended."""

    limit = WholeNumber(load_default=25, validate=validate.Range(min=1, max=100))
    cursor = fields.String(validate=validate.Length(min=1))


class PageQuery(TestSetQuery, Paging):
    """A page of one of an agent's lists in a project."""


class CommaList(fields.String):
    """Comma-separated names, each one of `choices`: loaded as a sorted list without repeats."""

    def __init__(self, choices: tuple[str, ...], **kwargs: Any) -> None:
        self.choices = choices
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> list[str]:
        names = super()._deserialize(value, attr, data, **kwargs).split(",")
        if not all(name in self.choices for name in names):
            raise ValidationError(f"Comma-separated {', '.join(self.choices)}.")
        return sorted(set(names))


class SearchText(fields.String):
    """Words to search for: 1..200 characters with at least one word in them."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        if not 1 <= len(text) <= MAX_SEARCH_CHARS:
            raise ValidationError(f"1 to {MAX_SEARCH_CHARS} characters.")
        if "\x00" in text or not words(text):
            raise ValidationError("Give at least one word to search for.")
        return text


class CasesQuery(PageQuery):
    include = fields.String(validate=validate.OneOf(("retired",)))
    kind = fields.String(
        validate=validate.Regexp(KIND_RE, error="Comma-separated correction and hand.")
    )
    q = SearchText(
        metadata={
            "description": "Words to find, each as a whole word, in any case and with or "
            "without accents: in what the case expects (shouldSay, why, tools, item keys, the "
            "retire reason) and in its run's input and output. Every word must match. A word "
            "is a run of letters and digits: anything else (punctuation, symbols, spaces) "
            "separates words."
        }
    )
    tool = fields.String(
        validate=_nonempty_max(200),
        metadata={
            "description": "Cases whose expectation names this tool (shouldCall or mustNotCall)."
        },
    )
    part = CommaList(
        PARTS,
        metadata={
            "description": "Comma-separated decisions, answer and items: cases with "
            "any of these parts."
        },
    )
    expert = fields.String(
        validate=validate.OneOf(("true", "false")),
        metadata={"description": "true: experts' cases only; false: the others."},
    )
    added_by = fields.String(
        data_key="addedBy",
        validate=_nonempty_max(64),
        metadata={
            "description": "Cases added by this user (its id) or service token (its public id)."
        },
    )
    run_id = fields.String(
        data_key="runId",
        validate=_nonempty_max(200),
        metadata={"description": "Cases of this run."},
    )
    added_after = Timestamp(
        data_key="addedAfter",
        metadata={"description": "Cases added at or after this time (RFC 3339)."},
    )
    added_before = Timestamp(
        data_key="addedBefore",
        metadata={"description": "Cases added before this time (RFC 3339)."},
    )

    @post_load
    def _expert(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if "expert" in data:
            data["expert"] = data["expert"] == "true"
        return data


EXPORT_FORMATS = ("jsonl", "csv")


class ExportQuery(TestSetQuery):
    format = fields.String(load_default="jsonl", validate=validate.OneOf(EXPORT_FORMATS))
    include = fields.String(validate=validate.OneOf(("retired",)))
    version = fields.String(
        validate=_nonempty_max(20), metadata={"description": "A version's name, e.g. `v3`."}
    )


class SearchedText(fields.String):
    """Text to find as it is written: 1..200 characters once trimmed."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        if not 1 <= len(text) <= MAX_SEARCH_CHARS:
            raise ValidationError(f"1 to {MAX_SEARCH_CHARS} characters.")
        return text


class RunsQuery(PageQuery):
    """The runs list's filters (the API's and the runs inbox's); all of them combine."""

    status = fields.String(
        validate=validate.OneOf(("running", "finished")),
        metadata={"description": "Runs with this status."},
    )
    version = fields.String(
        validate=_nonempty_max(100), metadata={"description": "Runs of this agent version."}
    )
    tool = fields.String(
        validate=_nonempty_max(200),
        metadata={"description": "Runs that called this tool (its exact name)."},
    )
    has_case = fields.String(
        data_key="hasCase",
        validate=validate.OneOf(("true", "false")),
        metadata={
            "description": "true: runs a case or correction was made from; false: the others."
        },
    )
    after = Timestamp(metadata={"description": "Runs at or after this time (RFC 3339)."})
    before = Timestamp(metadata={"description": "Runs before this time (RFC 3339)."})
    q = SearchedText(
        metadata={
            "description": "Text found in the run's input or output, as written, in any case "
            "(a substring of their JSON text: keys too, and non-ASCII letters match in their "
            "own case only)."
        }
    )

    @post_load
    def _has_case(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if "has_case" in data:
            data["has_case"] = data["has_case"] == "true"
        return data


# ---------------------------------------------------------------- responses


class OmitEmpty(Schema):
    """Leaves out optional fields that have no value, as the reference's shapes do."""

    OPTIONAL: tuple[str, ...] = ()

    @post_dump
    def _omit(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        for name in self.OPTIONAL:
            if data.get(name) in (None, False):
                data.pop(name, None)
        return data


class Actor(Schema):
    kind = fields.String(required=True, validate=validate.OneOf(("user", "service")))
    id = fields.String(required=True)


class RetiredOut(Schema):
    reason = fields.String(required=True)
    by = fields.Nested(Actor, required=True)
    at = Timestamp(required=True)


class DecisionsOut(Schema):
    verdict = fields.String(required=True, validate=validate.OneOf(VERDICTS))
    shouldCall = fields.List(fields.Nested(CallExpectation))
    mustNotCall = fields.List(fields.String())


class AnswerOut(Schema):
    verdict = fields.String(required=True, validate=validate.OneOf(VERDICTS))
    shouldSay = fields.String()
    why = fields.String()


class ExpectOut(Schema):
    """What a case expects: one part for each verdict its correction gave."""

    decisions = fields.Nested(DecisionsOut)
    answer = fields.Nested(AnswerOut)
    items = fields.List(fields.Nested(ItemVerdict))


class CaseOut(OmitEmpty):
    OPTIONAL = ("retired", "expert")
    id = fields.String(required=True)
    kind = fields.String(required=True, validate=validate.OneOf(("correction", "hand")))
    projectId = fields.String(required=True, attribute="project_id", metadata={"format": "uuid"})
    runId = fields.String(required=True, attribute="run_id")
    madeOn = fields.String(required=True, attribute="made_on")
    expect = AsStored(ExpectOut, required=True)
    addedBy = AsStored(Actor, required=True, attribute="added_by")
    addedAt = Timestamp(required=True, attribute="added_at")
    updatedAt = Timestamp(required=True, attribute="updated_at")
    retired = fields.Nested(RetiredOut)
    expert = fields.Boolean()


# A case's fields in the order `case_json` reads a list's row; the service selects them so.
CASE_FIELDS = (
    "added_at", "id", "kind", "project_id", "run_id", "made_on", "expect", "expert",
    "added_by_kind", "added_by_id", "updated_at", "retired_reason", "retired_by_kind",
    "retired_by_id", "retired_at",
)  # fmt: skip


def case_json(case: Any) -> dict[str, Any]:
    """A case as `CaseOut` describes it, from a `Case` or a row (or tuple) of `CASE_FIELDS`.

    Written out rather than dumped, and a row read by position: marshmallow's per-field
    machinery, then reading a row's fields by name, were most of a list page's time.
    `tests/test_lists.py` checks that it answers exactly what `CaseOut` dumps. A list's row
    holds the expectation as its stored JSON text, written out as it is.
    """
    (added_at, id_, kind, project_id, run_id, made_on, expect, expert, by_kind, by_id, updated_at,
     retired_reason, retired_by_kind, retired_by_id, retired_at) = (
        case if isinstance(case, (Row, tuple)) else [getattr(case, name) for name in CASE_FIELDS]
    )  # fmt: skip
    out: dict[str, Any] = {
        "id": id_,
        "kind": kind,
        "projectId": project_id,
        "runId": run_id,
        "madeOn": made_on,
        "expect": orjson.Fragment(expect) if isinstance(expect, str) else expect,
        "addedBy": {"kind": by_kind, "id": by_id},
        "addedAt": rfc3339(added_at),
        "updatedAt": rfc3339(updated_at),
    }
    if retired_at is not None:
        out["retired"] = {
            "reason": retired_reason,
            "by": {"kind": retired_by_kind, "id": retired_by_id},
            "at": rfc3339(retired_at),
        }
    if expert:
        out["expert"] = True
    return out


def test_set_json(counts: Any) -> dict[str, Any]:
    """A test set's counts (`service.Counts`) as `TestSetOut` describes them."""
    out: dict[str, Any] = {
        "agentId": counts.agent_id,
        "projectId": counts.project_id,
        "cases": {"active": counts.active, "retired": counts.retired},
    }
    if counts.last_added_at is not None:
        out["lastAddedAt"] = counts.last_added_at
    if counts.frozen_version is not None:
        out["frozenVersion"] = {
            "testSetId": f"agent.{counts.agent_id}.{counts.project_id}",
            "version": f"v{counts.frozen_version}",
        }
    return dump(TestSetOut, out)


def page_json(page: Any, dump_item: Callable[[Any], Any]) -> dict[str, Any]:
    """A page of a list (`service.Page`): `data`, `hasMore`, and `nextCursor` while there is
    more."""
    out: dict[str, Any] = {"data": [dump_item(i) for i in page.items], "hasMore": page.has_more}
    if page.next_cursor:
        out["nextCursor"] = page.next_cursor
    return out


class SnapshotOut(Schema):
    input = fields.Raw(allow_none=True)
    output = fields.Raw(allow_none=True)
    calls = fields.Raw(allow_none=True)
    takenAt = Timestamp(attribute="taken_at")


class CaseDetailOut(CaseOut):
    snapshot = fields.Nested(
        SnapshotOut,
        required=True,
        metadata={"description": "The run's content as the case saw it."},
    )


class _Page(Schema):
    """A list's page: `data`, and where the next page starts while there is one."""

    nextCursor = fields.String()
    hasMore = fields.Boolean(required=True)


class CasePage(_Page):
    data = fields.List(fields.Nested(CaseOut), required=True)


class CaseList(Schema):
    """Cases a bulk change changed, in case id order."""

    data = fields.List(fields.Nested(CaseOut), required=True)


class CaseCounts(Schema):
    active = fields.Integer(required=True)
    retired = fields.Integer(required=True)


class FrozenVersion(Schema):
    testSetId = fields.String(required=True)
    version = fields.String(required=True)


class TestSetOut(OmitEmpty):
    OPTIONAL = ("lastAddedAt", "frozenVersion")
    agentId = fields.String(required=True)
    projectId = fields.String(required=True, metadata={"format": "uuid"})
    cases = fields.Nested(CaseCounts, required=True)
    lastAddedAt = Timestamp()
    frozenVersion = fields.Nested(FrozenVersion)


class RunErrorOut(Schema):
    message = fields.String(required=True)


class StoredMessage(fields.Nested):
    """A message stored as text, answered as `{message}` (a run's error)."""

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> Any:
        return None if value is None else {"message": value}


class RunOut(OmitEmpty):
    OPTIONAL = ("replayOf", "error")
    id = fields.String(required=True)
    projectId = fields.String(required=True, attribute="project_id", metadata={"format": "uuid"})
    version = fields.String(required=True)
    status = fields.String(required=True)
    input = fields.Raw(allow_none=True)
    output = fields.Raw(allow_none=True)
    calls = fields.Raw(allow_none=True)
    erased = fields.Boolean(required=True)
    replayOf = fields.String(attribute="replay_of")
    at = Timestamp(required=True)
    error = StoredMessage(
        RunErrorOut,
        metadata={"description": "Why the run failed: its trace's root span's error status."},
    )
    hasCase = fields.Boolean(
        required=True,
        attribute="has_case",
        metadata={"description": "Whether a case or correction was made from the run."},
    )


class RunPage(_Page):
    data = fields.List(fields.Nested(RunOut), required=True)


class CorrectionOut(OmitEmpty):
    OPTIONAL = ("group",)
    id = fields.String(required=True)
    runId = fields.String(required=True, attribute="run_id")
    projectId = fields.String(required=True, attribute="project_id", metadata={"format": "uuid"})
    status = fields.String(required=True, validate=validate.OneOf(CORRECTION_STATUSES))
    group = fields.String(attribute="group_id")
    restricted = fields.Boolean(required=True, attribute="expert")
    expect = AsStored(ExpectOut, required=True)
    by = AsStored(Actor, required=True, attribute="added_by")
    at = Timestamp(required=True, attribute="added_at")


class TokenOut(OmitEmpty):
    OPTIONAL = ("revokedAt",)
    id = fields.String(required=True)
    name = fields.String(required=True)
    createdAt = Timestamp(required=True, attribute="created_at")
    expiresAt = Timestamp(required=True, allow_none=True, attribute="expires_at")
    revokedAt = Timestamp(attribute="revoked_at")


class NewTokenOut(TokenOut):
    secret = fields.String(required=True, metadata={"description": "Shown this once only."})


class TokenPage(_Page):
    data = fields.List(fields.Nested(TokenOut), required=True)


class ErrorBody(Schema):
    code = fields.String(required=True)
    message = fields.String(required=True)
    details = fields.Dict()
    requestId = fields.String(required=True)


class ErrorOut(Schema):
    error = fields.Nested(ErrorBody, required=True)


def flatten_errors(messages: Any, prefix: str = "") -> dict[str, list[str]]:
    """Marshmallow's nested error dict as `path → messages`, e.g. `shouldCall.0.tool`."""
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        return {prefix or "_body": list(messages)}
    if not isinstance(messages, dict):
        return {prefix or "_body": [str(messages)]}
    flat: dict[str, list[str]] = {}
    for key, value in messages.items():
        name = "_body" if key == "_schema" else str(key)
        path = f"{prefix}.{name}" if prefix else name
        for p, msgs in flatten_errors(value, path).items():
            flat.setdefault(p, []).extend(msgs)
    return flat


@cache
def _instance(schema: type[Schema]) -> Schema:
    """One instance per schema: making one deep-copies its fields, and they hold no state."""
    return schema()


def dump(schema: type[Schema], obj: Any) -> Any:
    """`obj` as the answer `schema` describes."""
    return _instance(schema).dump(obj)


def load(schema: type[Schema], data: Any) -> dict[str, Any]:
    """Validate `data` with `schema`: the loaded dict, or 400 `bad-input` naming each field."""
    if not isinstance(data, dict):
        raise bad_input({"_body": ["Send a JSON object."]})
    try:
        return _instance(schema).load(data)
    except ValidationError as err:
        raise bad_input(flatten_errors(err.messages)) from None


from .test_runs import *  # noqa: E402, F403  (the test runs' schemas, beside the test set's)
