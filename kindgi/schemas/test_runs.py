"""Schemas of test runs and versions: what starting a run and sending results may say, the query
strings of their lists, and the answers (written out by the `*_json` functions, described by
the schemas for the OpenAPI document)."""

from __future__ import annotations

import re
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from ..grading import CHANGES, PARTS
from ..judge import PROMPT_VERSION
from .cases import MAX_TAGS, SnapshotOut, Tag
from .common import (
    Actor,
    Cursor,
    PageOut,
    PageQuery,
    Paging,
    ProjectId,
    QuerySchema,
    StrictSchema,
    Timestamp,
    WholeNumber,
    canonical_args,
    nonempty_max,
    rfc3339,
)
from .corrections import ExpectOut
from .runs import ToolCall

CASE_OUTCOMES = ("pass", "fail", "error", "pending", "ungraded")


def _listed(allowed: tuple[str, ...]) -> validate.Regexp:
    """A comma-separated list of `allowed` words."""
    word = "|".join(re.escape(a) for a in allowed)
    return validate.Regexp(
        re.compile(rf"^({word})(,({word}))*$"), error=f"Comma-separated: {', '.join(allowed)}."
    )


class JsonNumber(fields.Float):
    """A JSON number: not a string of digits, not a boolean."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


# ---------------------------------------------------------------- request bodies


class JsonInteger(fields.Integer):
    """A JSON integer: not a string of digits, a boolean or a fraction."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class SampleIn(StrictSchema):
    size = JsonInteger(
        required=True,
        validate=validate.Range(min=1),
        metadata={"description": "Cases to draw: fewer than the version has."},
    )
    seed = JsonInteger(
        validate=validate.Range(min=0, max=2**53),
        metadata={"description": "Draws the same cases again; the server picks one if left out."},
    )


class StartTestRunBody(StrictSchema):
    projectId = ProjectId(required=True)
    candidate = fields.String(
        required=True,
        validate=nonempty_max(100),
        metadata={"description": "The agent version under test."},
    )
    weighting = fields.String(validate=validate.OneOf(("all", "experts-only")))
    baseline = fields.String(
        validate=nonempty_max(64),
        metadata={"description": "A `done` run of this test set to compare with."},
    )
    rerunOf = fields.String(
        validate=nonempty_max(64),
        metadata={"description": "A `done` run of this test set whose version is reused."},
    )
    only = fields.String(
        validate=_listed(("failed", "errored")),
        metadata={"description": "With rerunOf: its failed or errored cases (default both)."},
    )
    label = fields.String(validate=nonempty_max(200))
    metadata = fields.Dict(
        keys=fields.String(),
        validate=canonical_args,
        metadata={"description": "At most 4000 characters of canonical JSON (a commit, a URL)."},
    )
    itemsThreshold = JsonNumber(validate=validate.Range(min=0, max=1))
    sample = fields.Nested(
        SampleIn,
        metadata={"description": "A quick run: a sample of the version's cases (§9.9)."},
    )
    tags = fields.List(
        Tag(),
        validate=validate.Length(min=1, max=MAX_TAGS),
        metadata={
            "description": "Grade only the cases with any of these tags (as tagged when the "
            "run starts); the version frozen is the whole set's."
        },
    )

    @validates_schema
    def _rules(self, data: dict[str, Any], **_: Any) -> None:
        if "only" in data and "rerunOf" not in data:
            raise ValidationError({"only": ["Only with rerunOf."]})
        if "sample" in data and "rerunOf" in data:
            raise ValidationError({"sample": ["Not with rerunOf."]})

    def load(self, data: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        loaded = super().load(data, **kwargs)
        if "rerunOf" in loaded:
            loaded["only"] = sorted(set(loaded.get("only", "failed,errored").split(",")))
        return loaded


class ResultIn(StrictSchema):
    caseId = fields.String(required=True, validate=nonempty_max(64))
    output = fields.Raw(allow_none=True, metadata={"description": "The candidate's output."})
    calls = fields.List(fields.Nested(ToolCall), validate=validate.Length(max=1000))
    # any JSON value: one that is no key (null, an object without key or id) grades the items
    # part `no-ranked-list`, as the answer says
    ranked = fields.List(
        fields.Raw(allow_none=True),
        validate=validate.Length(max=1000),
        metadata={"description": "The candidate's ranked item keys, when it has them."},
    )
    error = fields.String(
        validate=nonempty_max(4000),
        metadata={"description": "The candidate failed on this case: its outcome is `error`."},
    )

    @validates_schema
    def _rules(self, data: dict[str, Any], **_: Any) -> None:
        if "error" in data:
            return
        missing = {n: ["Required unless error is given."] for n in ("output", "calls")}
        missing = {n: m for n, m in missing.items() if n not in data}
        if missing:
            raise ValidationError(missing)


class ResultsBody(StrictSchema):
    results = fields.List(
        fields.Nested(ResultIn), required=True, validate=validate.Length(min=1, max=500)
    )

    @validates_schema
    def _once(self, data: dict[str, Any], **_: Any) -> None:
        seen: set[str] = set()
        for i, result in enumerate(data.get("results", [])):
            if result["caseId"] in seen:
                raise ValidationError({"results": {i: {"caseId": ["Each case once."]}}})
            seen.add(result["caseId"])


class EmptyBody(StrictSchema):
    """Nothing to say: an empty object."""


# ---------------------------------------------------------------- query strings


class TestRunsQuery(PageQuery):
    candidate = fields.String(validate=nonempty_max(100))


class RunCasesQuery(QuerySchema):
    limit = WholeNumber(load_default=100, validate=validate.Range(min=1, max=500))
    cursor = Cursor()
    awaiting = fields.String(validate=validate.OneOf(("true", "false")))


class ResultsQuery(Paging):
    outcome = fields.String(validate=_listed(CASE_OUTCOMES))
    part = fields.String(validate=validate.OneOf(PARTS))


class CompareQuery(Paging):
    change = fields.String(validate=_listed(CHANGES))


class ComparePageQuery(CompareQuery):
    """The comparison page's query: the API's, and the baseline picked (the run's own, or the
    set's previous done run, when left out)."""

    baseline = fields.String(validate=validate.Length(min=1, max=64))


class TestSetRunsQuery(PageQuery):
    """The test set's runs page: a page of runs, and where its versions' page starts."""

    versionsCursor = Cursor()


class DiffQuery(PageQuery):
    change = fields.String(validate=validate.OneOf(("added", "removed", "changed")))


# ---------------------------------------------------------------- answers


class CaseTallies(Schema):
    total = fields.Integer(required=True)
    awaiting = fields.Integer(required=True)
    pending = fields.Integer(required=True)
    passed = fields.Integer(required=True, data_key="pass")
    fail = fields.Integer(required=True)
    error = fields.Integer(required=True)
    ungraded = fields.Integer(required=True)


class GradedTallies(Schema):
    passed = fields.Integer(required=True, data_key="pass")
    fail = fields.Integer(required=True)
    error = fields.Integer(required=True)


class AnswerTallies(GradedTallies):
    pending = fields.Integer(required=True)
    ungraded = fields.Integer(required=True)


class ItemsTallies(GradedTallies):
    meanScore = fields.Float()


class PartTallies(Schema):
    decisions = fields.Nested(GradedTallies, required=True)
    answer = fields.Nested(AnswerTallies, required=True)
    items = fields.Nested(ItemsTallies, required=True)


class PassRate(Schema):
    value = fields.Float(required=True)
    low = fields.Float(required=True)
    high = fields.Float(required=True)


class SampleOut(Schema):
    size = fields.Integer(required=True)
    seed = fields.Integer(required=True)
    population = fields.Integer(
        required=True, metadata={"description": "The cases the sample was drawn from."}
    )


class EstimateOut(Schema):
    passRate = fields.Float(required=True, metadata={"description": "0 to 1."})
    low = fields.Float(required=True)
    high = fields.Float(required=True)


class ChangeCounts(Schema):
    regressed = fields.Integer(required=True)
    fixed = fields.Integer(required=True)
    stillFailing = fields.Integer(required=True)
    stillPassing = fields.Integer(required=True)
    new = fields.Integer(required=True)
    gone = fields.Integer(required=True)
    errored = fields.Integer(required=True)
    ungraded = fields.Integer(required=True)


class RunComparison(ChangeCounts):
    baseline = fields.String(required=True)


class Agreement(Schema):
    asked = fields.Integer(required=True, metadata={"description": "Calibration verdicts."})
    agreed = fields.Integer(required=True, metadata={"description": "Of those, fail verdicts."})


class JudgeOut(Schema):
    model = fields.String(required=True)
    promptVersion = fields.String(required=True)
    agreement = fields.Nested(Agreement, required=True)


class TestRunOut(Schema):
    id = fields.String(required=True)
    agentId = fields.String(required=True)
    projectId = fields.String(required=True, metadata={"format": "uuid"})
    testSetId = fields.String(required=True)
    version = fields.String(required=True)
    candidate = fields.String(required=True)
    weighting = fields.String(required=True, validate=validate.OneOf(("all", "experts-only")))
    baseline = fields.String()
    rerunOf = fields.String()
    only = fields.List(fields.String())
    tags = fields.List(fields.String())
    label = fields.String()
    metadata = fields.Dict()
    itemsThreshold = fields.Float(required=True)
    status = fields.String(
        required=True, validate=validate.OneOf(("open", "grading", "done", "canceled"))
    )
    createdAt = Timestamp(required=True)
    createdBy = fields.Nested(Actor, required=True)
    finishedAt = Timestamp()
    cases = fields.Nested(CaseTallies, required=True)
    parts = fields.Nested(PartTallies, required=True)
    passRate = fields.Nested(PassRate)
    sample = fields.Nested(SampleOut, metadata={"description": "A quick run's sample."})
    estimate = fields.Nested(
        EstimateOut,
        metadata={"description": "A done quick run's estimate of the full pass rate, 95 %."},
    )
    comparison = fields.Nested(RunComparison)
    judge = fields.Nested(JudgeOut)


class TestRunPage(PageOut):
    data = fields.List(fields.Nested(TestRunOut), required=True)


class RunCaseOut(Schema):
    caseId = fields.String(required=True)
    kind = fields.String(required=True)
    expert = fields.Boolean(required=True)
    input = fields.Raw(allow_none=True)
    parts = fields.List(fields.String(validate=validate.OneOf(PARTS)), required=True)


class RunCasePage(PageOut):
    data = fields.List(fields.Nested(RunCaseOut), required=True)


class ResultsAccepted(Schema):
    accepted = fields.Integer(required=True)
    duplicates = fields.Integer(required=True)
    run = fields.Nested(TestRunOut, required=True)


class ResultOut(Schema):
    caseId = fields.String(required=True)
    kind = fields.String(required=True)
    expert = fields.Boolean(required=True)
    outcome = fields.String(required=True)
    reason = fields.String()
    parts = fields.Dict(
        required=True,
        metadata={"description": "Each part's outcome with its explanation (docs/grading.md)."},
    )


class ResultPage(PageOut):
    data = fields.List(fields.Nested(ResultOut), required=True)


class ResultDetailOut(ResultOut):
    output = fields.Raw(allow_none=True)
    calls = fields.Raw()
    ranked = fields.Raw()
    error = fields.String()
    expect = fields.Nested(ExpectOut, required=True)
    snapshot = fields.Nested(SnapshotOut, required=True)


class CompareRow(Schema):
    caseId = fields.String(required=True)
    change = fields.String(required=True, validate=validate.OneOf(CHANGES))
    outcome = fields.String(required=True, allow_none=True)
    baselineOutcome = fields.String(required=True, allow_none=True)
    itemsDelta = fields.Float()
    caseChanged = fields.Boolean(
        metadata={
            "description": "true when the case's expectation was revised between the two "
            "runs' versions (each was graded with its own); left out otherwise."
        }
    )


class ComparePage(PageOut):
    data = fields.List(fields.Nested(CompareRow), required=True)
    counts = fields.Nested(ChangeCounts, required=True)
    pValue = fields.Float(required=True)
    sharedOnly = fields.Boolean(
        metadata={
            "description": "True when only the cases both runs had are paired (none is `new` "
            "or `gone`): one is a quick run, or the two were started on different tags; left "
            "out otherwise."
        }
    )


class VersionCases(Schema):
    total = fields.Integer(required=True)
    expert = fields.Integer(required=True)


class VersionOut(Schema):
    version = fields.String(required=True)
    testSetId = fields.String(required=True)
    frozenAt = Timestamp(required=True)
    frozenBy = fields.Nested(Actor, required=True)
    cases = fields.Nested(VersionCases, required=True)


class VersionPage(PageOut):
    data = fields.List(fields.Nested(VersionOut), required=True)


class DiffRow(Schema):
    caseId = fields.String(required=True)
    change = fields.String(required=True, validate=validate.OneOf(("added", "removed", "changed")))
    kind = fields.String(required=True)
    expert = fields.Boolean(required=True)


class DiffCounts(Schema):
    added = fields.Integer(required=True)
    removed = fields.Integer(required=True)
    changed = fields.Integer(
        required=True,
        metadata={"description": "Cases in both versions, revised between them."},
    )


class DiffPage(PageOut):
    data = fields.List(fields.Nested(DiffRow), required=True)
    counts = fields.Nested(DiffCounts, required=True)


# ---------------------------------------------------------------- writing answers


def _camel(name: str) -> str:
    first, *rest = name.split("-")
    return first + "".join(word.title() for word in rest)


def test_run_json(view: Any, wilson: Any) -> dict[str, Any]:
    """A test run (`service.RunView`) as `TestRunOut` describes it; `wilson(pass, n)` gives the
    pass rate's interval."""
    run, tallies = view.run, view.run.tallies
    out: dict[str, Any] = {
        "id": run.id,
        "agentId": view.agent_id,
        "projectId": run.project_id,
        "testSetId": view.test_set_id,
        "version": run.version,
        "candidate": run.candidate,
        "weighting": run.weighting,
    }
    if run.baseline_id:
        out["baseline"] = run.baseline_id
    if run.rerun_of_id:
        out["rerunOf"], out["only"] = run.rerun_of_id, run.only.split(",")
    if run.tags:
        out["tags"] = run.tags
    if run.label is not None:
        out["label"] = run.label
    if run.meta is not None:
        out["metadata"] = run.meta
    out.update(
        itemsThreshold=run.items_threshold,
        status=run.status,
        createdAt=rfc3339(run.created_at),
        createdBy={"kind": run.created_by_kind, "id": run.created_by_id},
    )
    if run.finished_at is not None:
        out["finishedAt"] = rfc3339(run.finished_at)
    cases = tallies["cases"]
    out["cases"] = {k: cases[k] for k in ("total", "awaiting", *CASE_OUTCOMES)}
    parts = {part: dict(counts) for part, counts in tallies["parts"].items()}
    score = tallies["itemsScore"]
    if score["n"]:
        parts["items"]["meanScore"] = score["sum"] / score["n"]
    out["parts"] = parts
    graded = cases["pass"] + cases["fail"]
    if graded:
        low, high = wilson(cases["pass"], graded)
        out["passRate"] = {"value": cases["pass"] / graded, "low": low, "high": high}
    if run.sample is not None:
        out["sample"] = {k: run.sample[k] for k in ("size", "seed", "population")}
    if "estimate" in tallies:
        out["estimate"] = tallies["estimate"]
    if "judge" in tallies:
        judged = tallies["judge"]
        out["judge"] = {
            "model": judged["model"],
            "promptVersion": PROMPT_VERSION,
            "agreement": {"asked": judged["asked"], "agreed": judged["agreed"]},
        }
    if "comparison" in tallies:
        out["comparison"] = {
            "baseline": run.baseline_id,
            **{_camel(k): n for k, n in tallies["comparison"].items()},
        }
    return out


def change_counts_json(counts: dict[str, int]) -> dict[str, int]:
    return {_camel(k): counts[k] for k in CHANGES}


def result_json(row: Any) -> dict[str, Any]:
    """A result as the results list shows it, from a row of (caseId, kind, expert, outcome,
    reason, parts)."""
    case_id, kind, expert, outcome, reason, parts = row
    out: dict[str, Any] = {"caseId": case_id, "kind": kind, "expert": bool(expert)}
    out["outcome"] = outcome
    if reason is not None:
        out["reason"] = reason
    out["parts"] = parts or {}
    return out


def version_json(row: Any, test_set_id: str) -> dict[str, Any]:
    frozen_at, number, by_kind, by_id, total, expert = row
    return {
        "version": f"v{number}",
        "testSetId": test_set_id,
        "frozenAt": rfc3339(frozen_at),
        "frozenBy": {"kind": by_kind, "id": by_id},
        "cases": {"total": total, "expert": expert},
    }


def runner_case_json(row: Any) -> dict[str, Any]:
    """What a runner needs of a case, from a row of (caseId, kind, expert, expect, input)."""
    case_id, kind, expert, expect, given = row
    parts = [part for part in PARTS if part in expect]
    return {"caseId": case_id, "kind": kind, "expert": bool(expert), "input": given, "parts": parts}


def result_detail_json(view: Any) -> dict[str, Any]:
    """One result (`service.ResultView`) beside the case's expectation and the run snapshot."""
    row = view.row
    out = result_json((row.case_id, view.case.kind, view.case.expert, row.outcome, row.reason,
                       row.parts))  # fmt: skip
    out.update(row.result or {})
    out["expect"] = view.expect
    out["snapshot"] = {
        "input": view.snapshot.input,
        "output": view.snapshot.output,
        "calls": view.snapshot.calls,
        "takenAt": rfc3339(view.snapshot.taken_at),
    }
    return out


def compare_row_json(row: Any) -> dict[str, Any]:
    """A pair of a comparison, from a row of (caseId, change, outcome, baselineOutcome, delta,
    whether the case's expectation was revised between the two runs' versions)."""
    case_id, change, outcome, baseline, delta, revised = row
    out: dict[str, Any] = {
        "caseId": case_id,
        "change": change,
        "outcome": outcome,
        "baselineOutcome": baseline,
    }
    if delta is not None:
        out["itemsDelta"] = delta
    if revised:
        out["caseChanged"] = True
    return out
