"""Corrections and hand cases: the verdicts a body may give, a correction's status, and what a
case expects as the answers show it.
"""

from __future__ import annotations

from typing import Any

import rfc8785
from jsonpointer import JsonPointer, JsonPointerException
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from .. import matchers
from ..models import CORRECTION_STATUSES
from .common import (
    Actor,
    AsStored,
    OmitEmpty,
    StrictSchema,
    Timestamp,
    canonical_args,
    nonempty_max,
)

VERDICTS = ("right", "wrong")


def _json_pointer(text: str) -> None:
    try:
        JsonPointer(text)
    except JsonPointerException:
        raise ValidationError("Not a JSON Pointer (RFC 6901), such as /matches/2.") from None


def _match_size(match: dict[str, Any]) -> None:
    """`match`: at most 100 arguments and `MAX_MATCH_JSON_CHARS` characters of canonical JSON
    (each matcher is checked by the entry, which names its argument)."""
    if len(match) > 100:
        raise ValidationError("At most 100 properties.")
    try:
        canonical = rfc8785.dumps(match).decode("utf-8")
    except Exception:  # non-finite floats, integers JSON can't carry exactly
        raise ValidationError("Not representable as canonical JSON.") from None
    if len(canonical) > matchers.MAX_MATCH_JSON_CHARS:
        raise ValidationError(
            f"At most {matchers.MAX_MATCH_JSON_CHARS} characters in canonical JSON."
        )


class Flag(fields.Boolean):
    """true or false as JSON writes them: 1, "true" and "yes" are not booleans here."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


class CallExpectation(StrictSchema):
    tool = fields.String(required=True, validate=nonempty_max(200))
    args = fields.Dict(
        keys=fields.String(),
        validate=canonical_args,
        metadata={
            "description": "Top-level argument fields to compare, by value; "
            "at most 100 properties and 4000 characters in canonical JSON."
        },
    )
    match = fields.Dict(
        keys=fields.String(),
        validate=_match_size,
        metadata={
            "description": "Top-level argument fields to check by a matcher, each one of "
            '{"anyOf": [v, …]}, {"text": "…" | ["…"], "ignore": ["case" | "space" | '
            '"punctuation" | {"chars": "…"}]}, {"number": x, "tolerance": t} or '
            '{"schema": {…}} (JSON Schema 2020-12: no pattern or patternProperties, each $ref '
            'within it), with "optional": true and "type" on any of them (docs/grading.md §3); '
            "at most 16,000 characters in canonical JSON.",
            "additionalProperties": matchers.MATCHER_SCHEMA,
            "maxProperties": 100,
        },
    )

    @validates_schema
    def _matchers(self, data: dict[str, Any], **_: Any) -> None:
        """Each argument's matcher valid, and no argument both in `args` and `match`: the 400
        names the argument (`shouldCall.0.match.city`)."""
        match, args = data.get("match") or {}, data.get("args") or {}
        errors = {name: said for name, m in match.items() if (said := matchers.problems(m))}
        for name in match:
            if name in args:
                errors.setdefault(name, []).append("Named in both args and match: give it in one.")
        if errors:
            raise ValidationError(errors, "match")


class ItemVerdict(StrictSchema):
    key = fields.String(required=True, validate=nonempty_max(200))
    pointer = fields.String(validate=[validate.Length(max=500), _json_pointer])
    rank = fields.Integer(strict=True, validate=validate.Range(min=0))
    verdict = fields.String(required=True, validate=validate.OneOf(VERDICTS))


class CorrectionBody(StrictSchema):
    """A correction's body: the verdicts on one run. Also the body of a hand case."""

    decisions = fields.String(validate=validate.OneOf(VERDICTS))
    shouldCall = fields.List(fields.Nested(CallExpectation), validate=validate.Length(max=50))
    mustNotCall = fields.List(
        fields.String(validate=nonempty_max(200)), validate=validate.Length(max=50)
    )
    exactly = Flag(
        metadata={
            "description": "With shouldCall: the candidate makes exactly those calls, one to "
            "one, and passes no argument an entry does not name."
        }
    )
    answer = fields.String(validate=validate.OneOf(VERDICTS))
    shouldSay = fields.String(validate=nonempty_max(4000))
    why = fields.String(validate=nonempty_max(4000))
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
        if "exactly" in data and not calls:
            add("exactly", "Only with entries in shouldCall.")
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
    runId = fields.String(required=True, validate=nonempty_max(200))


class RecordCorrectionBody(CorrectionBody):
    group = fields.String(
        validate=nonempty_max(64), metadata={"description": "The correction's group, if any."}
    )


class CorrectionStatusBody(StrictSchema):
    status = fields.String(required=True, validate=validate.OneOf(CORRECTION_STATUSES))


class DecisionsOut(Schema):
    verdict = fields.String(required=True, validate=validate.OneOf(VERDICTS))
    shouldCall = fields.List(fields.Nested(CallExpectation))
    mustNotCall = fields.List(fields.String())
    exactly = fields.Boolean()


class AnswerOut(Schema):
    verdict = fields.String(required=True, validate=validate.OneOf(VERDICTS))
    shouldSay = fields.String()
    why = fields.String()


class ExpectOut(Schema):
    """What a case expects: one part for each verdict its correction gave."""

    decisions = fields.Nested(DecisionsOut)
    answer = fields.Nested(AnswerOut)
    items = fields.List(fields.Nested(ItemVerdict))


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
