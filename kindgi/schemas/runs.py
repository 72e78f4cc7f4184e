"""Runs as the agent platform reports them, their list's query, and the answers."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, post_load, validate

from .common import OmitEmpty, PageOut, PageQuery, ProjectId, StrictSchema, Timestamp, nonempty_max
from .search import SearchText


class ToolCall(StrictSchema):
    tool = fields.String(required=True, validate=nonempty_max(200))
    args = fields.Dict(keys=fields.String(), load_default=dict)


class RecordRunBody(StrictSchema):
    """A run as the agent platform reports it; its id is the server's to make, so no client
    can probe which ids another tenant's runs have."""

    projectId = ProjectId(required=True)
    version = fields.String(required=True, validate=nonempty_max(100))
    status = fields.String(required=True, validate=validate.OneOf(("running", "finished")))
    input = fields.Raw(allow_none=True)
    output = fields.Raw(allow_none=True)
    calls = fields.List(fields.Nested(ToolCall), validate=validate.Length(max=1000))
    replayOf = fields.String(validate=nonempty_max(64))


class RunsQuery(PageQuery):
    """The runs list's filters (the API's and the runs inbox's); all of them combine."""

    status = fields.String(
        validate=validate.OneOf(("running", "finished")),
        metadata={"description": "Runs with this status."},
    )
    version = fields.String(
        validate=nonempty_max(100), metadata={"description": "Runs of this agent version."}
    )
    tool = fields.String(
        validate=nonempty_max(200),
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
    q = SearchText(
        metadata={
            "description": "Words found in the run's input or output (1 to 200 characters, "
            "with at least one word): runs whose text, the strings in them at any depth (not "
            "their keys), holds every word, whole, in any case, accents ignored, as the "
            "cases' search cuts words (docs/design.md §4.1)."
        }
    )

    @post_load
    def _has_case(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if "has_case" in data:
            data["has_case"] = data["has_case"] == "true"
        return data


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


class RunPage(PageOut):
    data = fields.List(fields.Nested(RunOut), required=True)
