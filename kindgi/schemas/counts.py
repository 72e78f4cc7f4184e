"""The test set: its counts as the answer says them."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields

from .common import OmitEmpty, Timestamp, dump


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
