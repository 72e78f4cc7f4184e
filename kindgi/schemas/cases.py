"""Cases: the list's query (filters and words), export, retiring and restoring (one case or
several), and the answers: a case, one with its run's snapshot, a page of them.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import orjson
from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema
from sqlalchemy.engine import Row

from ..grading import PARTS
from .common import (
    Actor,
    AsStored,
    OmitEmpty,
    PageOut,
    PageQuery,
    ProjectId,
    StrictSchema,
    TestSetQuery,
    Timestamp,
    nonempty_max,
    rfc3339,
)
from .corrections import CorrectionBody, ExpectOut
from .search import SearchText

KIND_RE = re.compile(r"^(correction|hand)(,(correction|hand))*$")
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
MAX_TAGS = 20  # on one case
TAG_RULE = "lower-case letters, digits and hyphens, 1 to 40, starting with a letter or digit"


def _tag(value: str) -> None:
    if not TAG_RE.fullmatch(value):
        raise ValidationError(f"{value!r} is not a tag: {TAG_RULE}.")


class Tag(fields.String):
    """A tag (`TAG_RE`); a refusal names it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validate=_tag, **kwargs)


FROM_TEST_RUN = {
    "description": "The test run this was done from, on its page: one that graded the case "
    "(a test run of another agent or tenant is 404 test-run-not-found; one that did not grade "
    "the case, 400). The run lists who revised and retired what from it."
}


class RetireBody(StrictSchema):
    reason = fields.String(required=True, validate=nonempty_max(1000))
    fromTestRun = fields.String(validate=nonempty_max(64), metadata=FROM_TEST_RUN)


class ReviseBody(CorrectionBody):
    """A case's new expectation (what a hand case's body gives, but its run: the case keeps
    its run) and why it changed."""

    note = fields.String(
        required=True,
        validate=nonempty_max(1000),
        metadata={"description": "Why the expectation changed."},
    )
    fromTestRun = fields.String(validate=nonempty_max(64), metadata=FROM_TEST_RUN)


class TagsBody(StrictSchema):
    """Tags to add to a case and to take off it (at least one, none in both)."""

    add = fields.List(Tag(), validate=validate.Length(max=MAX_TAGS))
    remove = fields.List(Tag(), validate=validate.Length(max=MAX_TAGS))

    @validates_schema
    def _changes(self, data: dict[str, Any], **_: Any) -> None:
        if not data.get("add") and not data.get("remove"):
            raise ValidationError({"add": ["Give a tag to add or to remove."]})
        both = sorted(set(data.get("add") or []) & set(data.get("remove") or []))
        if both:
            raise ValidationError({"remove": [f"Both added and removed: {', '.join(both)}."]})


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
        fields.String(validate=nonempty_max(64)),
        required=True,
        validate=[validate.Length(min=1, max=500), _distinct],
    )


class BulkTagsBody(BulkRestoreBody, TagsBody):
    """Tags to add to and take off several cases of one test set, all or none."""


class BulkRetireBody(BulkRestoreBody):
    reason = fields.String(required=True, validate=nonempty_max(1000))


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
        validate=nonempty_max(200),
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
        validate=nonempty_max(64),
        metadata={
            "description": "Cases added by this user (its id) or service token (its public id)."
        },
    )
    run_id = fields.String(
        data_key="runId",
        validate=nonempty_max(200),
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
    tag = fields.String(
        validate=nonempty_max(900),
        metadata={"description": "Comma-separated tags: cases with any of them."},
    )

    @post_load
    def _expert(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if "expert" in data:
            data["expert"] = data["expert"] == "true"
        if "tag" in data:
            data["tag"] = tags_listed(data["tag"], "tag")
        return data


def tags_listed(text: str, name: str) -> list[str]:
    """Comma-separated tags as a sorted list without repeats; a bad one is named."""
    tags = sorted(set(text.split(",")))
    bad = [tag for tag in tags if not TAG_RE.fullmatch(tag)]
    if bad:
        raise ValidationError({name: [f"{bad[0]!r} is not a tag: {TAG_RULE}."]})
    return tags


EXPORT_FORMATS = ("jsonl", "csv")


class ExportQuery(TestSetQuery):
    format = fields.String(load_default="jsonl", validate=validate.OneOf(EXPORT_FORMATS))
    include = fields.String(validate=validate.OneOf(("retired",)))
    version = fields.String(
        validate=nonempty_max(20), metadata={"description": "A version's name, e.g. `v3`."}
    )


class RetiredOut(OmitEmpty):
    OPTIONAL = ("fromTestRun",)
    reason = fields.String(required=True)
    by = fields.Nested(Actor, required=True)
    at = Timestamp(required=True)
    fromTestRun = fields.String(
        metadata={"description": "The test run it was retired from; left out when none."}
    )


class CaseOut(OmitEmpty):
    OPTIONAL = ("retired", "expert", "tags")
    id = fields.String(required=True)
    kind = fields.String(required=True, validate=validate.OneOf(("correction", "hand")))
    projectId = fields.String(required=True, attribute="project_id", metadata={"format": "uuid"})
    runId = fields.String(required=True, attribute="run_id")
    madeOn = fields.String(required=True, attribute="made_on")
    expect = AsStored(ExpectOut, required=True)
    addedBy = AsStored(Actor, required=True, attribute="added_by")
    addedAt = Timestamp(required=True, attribute="added_at")
    updatedAt = Timestamp(required=True, attribute="updated_at")
    revision = fields.Integer(
        required=True,
        metadata={"description": "Its expectation's revision: 1 at first, one more a revision."},
    )
    tags = fields.List(
        fields.String(), metadata={"description": "Its tags, sorted; left out when none."}
    )
    retired = fields.Nested(RetiredOut)
    expert = fields.Boolean()


class AddedCaseOut(CaseOut):
    """A case just added, and what it duplicates."""

    duplicates = fields.List(
        fields.String(),
        metadata={
            "description": "The other active cases of the same run expecting exactly the same, "
            "by id, the first 100; left out when none. The case is added all the same."
        },
    )


# A case's fields in the order `case_json` reads a list's row; the service selects them so.
CASE_FIELDS = (
    "added_at", "id", "kind", "project_id", "run_id", "made_on", "expect", "expert",
    "added_by_kind", "added_by_id", "updated_at", "retired_reason", "retired_by_kind",
    "retired_by_id", "retired_at", "revision", "tags", "retired_from_test_run",
)  # fmt: skip


def case_json(case: Any) -> dict[str, Any]:
    """A case as `CaseOut` describes it, from a `Case` or a row (or tuple) of `CASE_FIELDS`.

    Written out rather than dumped, and a row read by position: marshmallow's per-field
    machinery, then reading a row's fields by name, were most of a list page's time.
    `tests/test_lists.py` checks that it answers exactly what `CaseOut` dumps. A list's row
    holds the expectation as its stored JSON text, written out as it is.
    """
    (added_at, id_, kind, project_id, run_id, made_on, expect, expert, by_kind, by_id, updated_at,
     retired_reason, retired_by_kind, retired_by_id, retired_at, revision, tags,
     retired_from) = (
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
        "revision": revision,
    }
    if retired_at is not None:
        out["retired"] = {
            "reason": retired_reason,
            "by": {"kind": retired_by_kind, "id": retired_by_id},
            "at": rfc3339(retired_at),
        }
        if retired_from is not None:
            out["retired"]["fromTestRun"] = retired_from
    if tags:
        out["tags"] = tags.split(",")
    if expert:
        out["expert"] = True
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


class RevisionOut(Schema):
    """One expectation a case has had; revision 1's `by` and `at` are the case's `addedBy`
    and `addedAt`, and it has no note."""

    revision = fields.Integer(required=True)
    expect = fields.Nested(ExpectOut, required=True)
    note = fields.String()
    by = fields.Nested(Actor, required=True)
    at = Timestamp(required=True)
    fromTestRun = fields.String(
        metadata={"description": "The test run it was revised from; left out when none."}
    )


class RevisionList(Schema):
    """A case's revisions, the current one first."""

    data = fields.List(fields.Nested(RevisionOut), required=True)


def revision_json(revision: Any) -> dict[str, Any]:
    """A revision (`service.Revision`) as `RevisionOut` describes it."""
    out: dict[str, Any] = {"revision": revision.revision, "expect": revision.expect}
    if revision.note is not None:
        out["note"] = revision.note
    out.update(by=revision.by, at=rfc3339(revision.at))
    if revision.from_test_run is not None:
        out["fromTestRun"] = revision.from_test_run
    return out


class CasePage(PageOut):
    data = fields.List(fields.Nested(CaseOut), required=True)


class CaseList(Schema):
    """Cases a bulk change changed, in case id order."""

    data = fields.List(fields.Nested(CaseOut), required=True)
