"""Runs as the agent platform reports them, their list's query, and the answers."""

from __future__ import annotations

from marshmallow import fields, validate

from .common import OmitEmpty, PageOut, PageQuery, ProjectId, StrictSchema, Timestamp, nonempty_max


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
    status = fields.String(validate=validate.OneOf(("running", "finished")))


class RunOut(OmitEmpty):
    OPTIONAL = ("replayOf",)
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


class RunPage(PageOut):
    data = fields.List(fields.Nested(RunOut), required=True)
