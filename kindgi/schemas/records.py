"""The answers about a case's record over its set's recent runs (docs/design.md §9.10)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields

from .common import Timestamp, rfc3339
from .test_runs import GradedTallies


class CaseRecordOut(Schema):
    caseId = fields.String(required=True)
    runs = fields.Integer(
        required=True,
        metadata={"description": "Of the set's last 50 done full runs, those it was in."},
    )
    outcomes = fields.Nested(GradedTallies, required=True)
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


class FoundCases(Schema):
    count = fields.Integer(required=True)
    caseIds = fields.List(
        fields.String(), required=True, metadata={"description": "The first 100."}
    )


class Contradicting(FoundCases):
    pairs = fields.List(
        fields.List(fields.String()),
        required=True,
        metadata={"description": "The first 100 pairs of cases that contradict each other."},
    )


class HistogramBin(Schema):
    low = fields.Float(required=True, data_key="from")
    to = fields.Float(required=True)
    count = fields.Integer(required=True)


class HealthOut(Schema):
    testSetId = fields.String(required=True)
    alwaysFailing = fields.Nested(
        FoundCases,
        required=True,
        metadata={"description": "Active cases no run passed in at least their last 5 runs."},
    )
    flaky = fields.Nested(FoundCases, required=True)
    neverRun = fields.Nested(
        FoundCases,
        required=True,
        metadata={"description": "Active cases none of the last 50 done full runs graded."},
    )
    contradicting = fields.Nested(Contradicting, required=True)
    histogram = fields.List(
        fields.Nested(HistogramBin),
        required=True,
        metadata={"description": "Active cases by pass rate in their record, in tenths."},
    )


def health_json(health: Any, test_set_id: str) -> dict[str, Any]:
    """A set's health (`service.set_health.Health`) as `HealthOut` describes it."""

    def found(kind: Any) -> dict[str, Any]:
        return {"count": kind.count, "caseIds": kind.case_ids}

    bins = len(health.histogram)
    return {
        "testSetId": test_set_id,
        "alwaysFailing": found(health.always_failing),
        "flaky": found(health.flaky),
        "neverRun": found(health.never_run),
        "contradicting": {
            **found(health.contradicting),
            "pairs": [list(pair) for pair in health.pairs],
        },
        "histogram": [
            {"from": i / bins, "to": (i + 1) / bins, "count": n}
            for i, n in enumerate(health.histogram)
        ],
    }
