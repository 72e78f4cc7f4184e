"""The answers about a case's record over its set's recent runs (docs/design.md §9.10)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields

from .common import Timestamp, rfc3339


class RecordOutcomes(Schema):
    passed = fields.Integer(required=True, data_key="pass")
    fail = fields.Integer(required=True)
    error = fields.Integer(required=True)


class CaseRecordOut(Schema):
    caseId = fields.String(required=True)
    runs = fields.Integer(
        required=True,
        metadata={"description": "Of the set's last 50 done full runs, those it was in."},
    )
    outcomes = fields.Nested(RecordOutcomes, required=True)
    failedBy = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "The candidates that failed it or erred on it."},
    )
    flaky = fields.Boolean(
        required=True, metadata={"description": "One candidate got two different outcomes."}
    )
    separation = fields.Float(
        required=True,
        allow_none=True,
        metadata={
            "description": "-1..1: how its passing goes with the runs' pass rates (null when "
            "either never varies)."
        },
    )
    lastFailed = Timestamp(metadata={"description": "When the newest run it failed ended."})


def record_json(case_id: str, record: Any) -> dict[str, Any]:
    """A case's record (`models.CaseRecord`, or None when no run of the window had it)."""
    if record is None:
        return {
            "caseId": case_id,
            "runs": 0,
            "outcomes": {"pass": 0, "fail": 0, "error": 0},
            "failedBy": [],
            "flaky": False,
            "separation": None,
        }
    out: dict[str, Any] = {
        "caseId": case_id,
        "runs": record.runs,
        "outcomes": {"pass": record.passed, "fail": record.failed, "error": record.errored},
        "failedBy": record.failed_by,
        "flaky": record.flaky,
        "separation": record.separation,
    }
    if record.last_failed is not None:
        out["lastFailed"] = rfc3339(record.last_failed)
    return out
