"""A test run's results: sent by a runner (graded in the request, all or nothing), read back
with their explanations, and compared with another run of the same test set."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import rfc8785
from sqlalchemy import and_, bindparam, func, literal, null, or_, select, update
from sqlalchemy import case as when

from .. import grading, telemetry
from ..database import after_commit, db
from ..errors import (
    CaseNotFound,
    ResultConflict,
    TestRunClosed,
    TestRunsNotComparable,
    bad_input,
)
from ..grading import CHANGES, PARTS
from ..models import Case, RunCase, Snapshot, TestRun, VersionMember
from . import judging
from .access import find_agent, grants, require
from .common import sql
from .identity import Principal
from .paging import Page, after_id, id_page
from .test_runs import RunView, find_run, run_to_change, run_to_read, settle, shares_only
from .versions import as_frozen, pinned_expect

RESULT_FIELDS = ("output", "calls", "ranked", "error")


def _digest(result: dict[str, Any]) -> str:
    """What makes two results the same: their fields as canonical JSON (RFC 8785, so 1.0 is 1),
    or sorted JSON where RFC 8785 can't carry a value (an integer past 2⁵³)."""
    sent = {k: result[k] for k in RESULT_FIELDS if k in result}
    try:
        text = rfc8785.dumps(sent)
    except rfc8785.CanonicalizationError:
        text = json.dumps(sent, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(text).hexdigest()


# Each case's expectation as the run's version froze it, and its run's calls and output
_GRADING_INPUTS = as_frozen(
    select(Case.id, pinned_expect().label("expect"), Snapshot.calls, Snapshot.output)
    .join(Snapshot, Snapshot.run_id == Case.run_id)
    .where(Case.id.in_(bindparam("ids", expanding=True))),
    bindparam("version"),
    Case.id,
)
_SAVE = (
    update(RunCase.__table__)
    .where(RunCase.run_pk == bindparam("the_run"), RunCase.case_id == bindparam("the_case"))
    .values(
        outcome=bindparam("outcome"),
        reason=bindparam("reason"),
        decisions=bindparam("decisions"),
        answer=bindparam("answer"),
        items=bindparam("items"),
        items_score=bindparam("items_score"),
        parts=bindparam("parts"),
        result=bindparam("result"),
        result_digest=bindparam("result_digest"),
    )
)


def send_results(
    caller: Principal, agent_id: str, run_id: str, results: list[dict[str, Any]]
) -> tuple[int, int, RunView]:
    """Take a batch of results: (accepted, duplicates, the run). All or nothing: a case not in
    the run is 400, a batch of only duplicates is a no-op even on a closed run, a closed run is
    409, and a result that differs from the one kept is 409 `result-conflict`."""
    agent, run = run_to_change(caller, agent_id, run_id)
    ids = [r["caseId"] for r in results]
    kept = dict(
        sql()
        .execute(
            select(RunCase.case_id, RunCase.result_digest).where(
                RunCase.run_pk == run.pk, RunCase.case_id.in_(ids)
            )
        )
        .all()
    )
    unknown = {
        f"results.{i}.caseId": ["Not a case of this test run."]
        for i, case_id in enumerate(ids)
        if case_id not in kept
    }
    if unknown:
        raise bad_input(unknown)
    new, conflicts, duplicates = [], [], 0
    for result in results:
        digest, stored = _digest(result), kept[result["caseId"]]
        if stored is None:
            new.append((result, digest))
        elif stored == digest:
            duplicates += 1
        else:
            conflicts.append(result["caseId"])
    if not new and not conflicts:
        return 0, duplicates, RunView(run, agent.id)
    if run.status != "open":
        raise TestRunClosed(details={"status": run.status})
    if conflicts:
        raise ResultConflict(details={"caseIds": conflicts})
    _grade(run, new)
    after_commit(lambda: telemetry.RESULTS.inc(len(new)))
    return len(new), duplicates, RunView(run, agent.id)


def _grade(run: TestRun, new: list[tuple[dict[str, Any], str]]) -> None:
    """Grade each new result, keep it, and move the run's tallies (and its comparison with its
    baseline) in the same transaction."""
    ids = [result["caseId"] for result, _ in new]
    inputs = {
        row.id: row
        for row in sql().execute(_GRADING_INPUTS, {"ids": ids, "version": run.version_pk})
    }
    baseline = _outcomes(run.baseline_pk, ids) if run.baseline_pk else {}
    tallies = run.tallies
    judged = "judge" in tallies  # a judge was configured when the run started
    rows, asked = [], []
    for result, digest in new:
        case = inputs[result["caseId"]]
        graded = grading.grade_case(
            case.expect, case.calls or [], result, run.items_threshold, judge_configured=judged
        )
        _count(tallies, graded, baseline, result["caseId"])
        if graded.parts.get("answer", {}).get("outcome") == "pending":
            asked += judging.questions(
                run, result["caseId"], case.expect, case.output, result.get("output")
            )
        rows.append(
            {
                "the_run": run.pk,
                "the_case": result["caseId"],
                "outcome": graded.outcome,
                "reason": graded.reason,
                **{part: graded.parts.get(part, {}).get("outcome") for part in PARTS},
                "items_score": graded.parts.get("items", {}).get("score"),
                "parts": graded.parts,
                "result": {k: result[k] for k in RESULT_FIELDS if k in result},
                "result_digest": digest,
            }
        )
    sql().execute(_SAVE, rows)
    judging.put(run, asked)
    settle(run, tallies)


def _count(
    tallies: dict[str, Any], graded: grading.Graded, baseline: dict[str, str], case_id: str
) -> None:
    cases = tallies["cases"]
    cases["awaiting"] -= 1
    cases[graded.outcome] += 1
    if graded.parts:  # a candidate's error counts in `cases.error` only
        for part, explained in graded.parts.items():
            tallies["parts"][part][explained["outcome"]] += 1
        score = graded.parts.get("items", {}).get("score")
        if score is not None:
            tallies["itemsScore"]["sum"] += score
            tallies["itemsScore"]["n"] += 1
    comparison = tallies.get("comparison")
    if comparison is not None:
        theirs = baseline.get(case_id)
        comparison[grading.compare_change("awaiting", theirs)] -= 1
        comparison[grading.compare_change(graded.outcome, theirs)] += 1


def _outcomes(run_pk: int, ids: list[str]) -> dict[str, str]:
    return dict(
        sql()
        .execute(
            select(RunCase.case_id, RunCase.outcome).where(
                RunCase.run_pk == run_pk, RunCase.case_id.in_(ids)
            )
        )
        .all()
    )


# ---------------------------------------------------------------- reading results


_RESULT_COLUMNS = (
    RunCase.case_id,
    Case.kind,
    Case.expert,
    RunCase.outcome,
    RunCase.reason,
    RunCase.parts,
)


def list_results(
    caller: Principal,
    agent_id: str,
    run_id: str,
    *,
    outcome: list[str] | None = None,
    part: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Page:
    """The run's cases that have a result, by case id; `outcome` filters on the case's
    outcome, or with `part` on that part's; `part` alone keeps the cases that have it."""
    _, run = run_to_read(caller, agent_id, run_id)
    return results_of(caller, run, outcome=outcome, part=part, limit=limit, cursor=cursor)


def results_of(
    caller: Principal,
    run: TestRun,
    *,
    outcome: list[str] | None = None,
    part: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Page:
    """`list_results` of a run the caller was already found to read (the run page's too)."""
    binding = {
        "list": "results",
        "run": run.pk,
        "outcome": outcome or [],
        "part": part or "",
        "caller": caller.scope,
    }
    after = after_id(cursor, binding)
    query = (
        select(*_RESULT_COLUMNS)
        .join(Case, Case.id == RunCase.case_id)
        .where(
            RunCase.run_pk == run.pk,
            RunCase.outcome != "awaiting",
            RunCase.case_id > after,
            Case.id > after,  # said of both sides: a merge join starts there, not at the top
        )
        .order_by(RunCase.case_id)
        .limit(limit + 1)
    )
    column = getattr(RunCase, part) if part else RunCase.outcome
    if part:
        query = query.where(column.is_not(None))
    if outcome:
        query = query.where(column.in_(outcome))
    return id_page(sql().execute(query).all(), limit, binding)


@dataclass
class ResultView:
    """One case of a run: its result beside the expectation the run graded with (the case's
    revision its version froze) and its run's snapshot."""

    row: RunCase
    case: Case
    snapshot: Snapshot
    expect: dict[str, Any]
    may_publish: bool = False  # whether the caller may revise or retire the case (triage)


def get_result(caller: Principal, agent_id: str, run_id: str, case_id: str) -> ResultView:
    agent = find_agent(caller, agent_id)
    run = find_run(caller, agent, run_id)
    found = db.session.execute(
        as_frozen(
            select(RunCase, Case, Snapshot, pinned_expect())
            .join(Case, Case.id == RunCase.case_id)
            .join(Snapshot, Snapshot.run_id == Case.run_id)
            .where(RunCase.run_pk == run.pk, RunCase.case_id == case_id),
            run.version_pk,
            RunCase.case_id,
        )
    ).first()
    if found is None:
        raise CaseNotFound()
    may = grants(caller, agent, run.project_id)
    may.require("read", agent, run.project_id)  # what the path names: 404 before 403
    return ResultView(*found, may_publish=may.may_publish)


# ---------------------------------------------------------------- comparing two runs


@dataclass
class Comparison:
    """A page of paired cases, each with its change, the counts of every change, and the
    baseline compared with."""

    page: Page
    counts: dict[str, int]
    p_value: float
    baseline: TestRun
    shared_only: bool = False  # only the cases both runs had are paired (shares_only)


def _change_sql(mine: Any, theirs: Any) -> Any:
    """The change of a pair, in SQL, as `grading.compare_change` decides it."""
    unsure = ("ungraded", "pending", "awaiting")
    return when(
        (theirs.c.outcome.is_(None), "new"),
        (mine.c.outcome.is_(None), "gone"),
        (or_(mine.c.outcome == "error", theirs.c.outcome == "error"), "errored"),
        (or_(mine.c.outcome.in_(unsure), theirs.c.outcome.in_(unsure)), "ungraded"),
        (and_(theirs.c.outcome == "pass", mine.c.outcome == "fail"), "regressed"),
        (and_(theirs.c.outcome == "fail", mine.c.outcome == "pass"), "fixed"),
        (mine.c.outcome == "fail", "still-failing"),
        else_="still-passing",
    )


def compare(
    caller: Principal,
    agent_id: str,
    run_id: str,
    other_id: str,
    *,
    change: list[str] | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Comparison:
    """Run `run_id` (the candidate) against `other_id` (the baseline), paired by case id: a
    page of pairs with their change, the counts of every change (never filtered), and the
    exact McNemar p-value of regressed against fixed. When either is a quick run only the cases
    both had are paired: none is `new` or `gone`."""
    agent = find_agent(caller, agent_id)
    run = find_run(caller, agent, run_id)
    other = find_run(caller, agent, other_id)  # what the path names: 404 before 403
    require(caller, "read", agent, run.project_id)
    if other.project_id != run.project_id:
        raise TestRunsNotComparable(details={"testRunId": other_id})
    shared_only = shares_only(run, other)
    counts = (
        dict(run.tallies["comparison"])
        if run.baseline_pk == other.pk and "comparison" in run.tallies and not shared_only
        else _count_changes(run.pk, other.pk, shared_only)
    )
    possible = set(CHANGES) - ({"new", "gone"} if shared_only else set())
    wanted = set(change or CHANGES) & possible
    binding = {
        "list": "compare",
        "runs": [run.pk, other.pk],
        "change": sorted(wanted),
        "caller": caller.scope,
    }
    after = after_id(cursor, binding)
    mine, theirs = RunCase.__table__.alias("mine"), RunCase.__table__.alias("theirs")
    change_of = _change_sql(mine, theirs)
    pairs = mine.join(
        theirs,
        and_(
            theirs.c.run_pk == other.pk,
            theirs.c.case_id == mine.c.case_id,
            theirs.c.case_id > after,  # a merge join starts there, not at the top
        ),
        isouter=not shared_only,
    )
    revised: Any = null()
    if run.version_pk != other.version_pk:  # a case revised between the two versions
        pairs, revised = _with_revisions(pairs, mine, run.version_pk, other.version_pk)
    rows = []
    if wanted - {"gone"}:
        paired = (
            select(
                mine.c.case_id,
                change_of,
                mine.c.outcome,
                theirs.c.outcome,
                mine.c.items_score - theirs.c.items_score,
                revised,
            )
            .select_from(pairs)
            .where(mine.c.run_pk == run.pk, mine.c.case_id > after)
            .order_by(mine.c.case_id)
            .limit(limit + 1)
        )
        if wanted != possible:
            paired = paired.where(change_of.in_(sorted(wanted)))
        rows += sql().execute(paired).all()
    if "gone" in wanted and counts["gone"] and not shared_only:
        gone = (
            select(theirs.c.case_id, literal("gone"), null(), theirs.c.outcome, null(), null())
            .where(
                theirs.c.run_pk == other.pk,
                theirs.c.case_id > after,
                ~select(mine.c.case_id)
                .where(mine.c.run_pk == run.pk, mine.c.case_id == theirs.c.case_id)
                .exists(),
            )
            .order_by(theirs.c.case_id)
            .limit(limit + 1)
        )
        rows += sql().execute(gone).all()
    rows.sort(key=lambda row: row[0])
    page = id_page(rows[: limit + 1], limit, binding)
    p_value = grading.mcnemar_p(counts["regressed"], counts["fixed"])
    return Comparison(page, counts, p_value, other, shared_only)


def _with_revisions(pairs: Any, mine: Any, version_pk: int, other_pk: int) -> tuple[Any, Any]:
    """The pairs joined to the revision each run's version froze its case at, and whether the
    two differ (NULL for a case the other version lacks)."""
    own = VersionMember.__table__.alias("own")
    other = VersionMember.__table__.alias("other")
    pairs = pairs.join(
        own, and_(own.c.version_pk == version_pk, own.c.case_id == mine.c.case_id)
    ).outerjoin(other, and_(other.c.version_pk == other_pk, other.c.case_id == mine.c.case_id))
    return pairs, other.c.revision != own.c.revision


def _count_changes(run_pk: int, other_pk: int, shared_only: bool) -> dict[str, int]:
    """Every change's count for two runs with no kept comparison: one pass over the pairs (only
    the cases both have, when `shared_only`: none is then new or gone)."""
    mine, theirs = RunCase.__table__.alias("mine"), RunCase.__table__.alias("theirs")
    change_of = _change_sql(mine, theirs)
    counts = dict.fromkeys(CHANGES, 0)
    for name, n in sql().execute(
        select(change_of, func.count())
        .select_from(
            mine.join(
                theirs,
                and_(theirs.c.run_pk == other_pk, theirs.c.case_id == mine.c.case_id),
                isouter=not shared_only,
            )
        )
        .where(mine.c.run_pk == run_pk)
        .group_by(change_of)
    ):
        counts[name] += n
    if shared_only:
        return counts
    counts["gone"] = (
        sql()
        .execute(
            select(func.count())
            .select_from(theirs)
            .where(
                theirs.c.run_pk == other_pk,
                ~select(mine.c.case_id)
                .where(mine.c.run_pk == run_pk, mine.c.case_id == theirs.c.case_id)
                .exists(),
            )
        )
        .scalar_one()
    )
    return counts


def report(caller: Principal, agent_id: str, run_id: str) -> tuple[RunView, Iterator[Any]]:
    """A run with all its cases' outcomes by case id, read a thousand at a time as they are
    written out (so a large run is never held in memory)."""
    agent, run = run_to_read(caller, agent_id, run_id)

    def rows() -> Iterator[Any]:
        after = ""
        while True:
            batch = (
                sql()
                .execute(
                    select(RunCase.case_id, RunCase.outcome, RunCase.reason, RunCase.parts)
                    .where(RunCase.run_pk == run.pk, RunCase.case_id > after)
                    .order_by(RunCase.case_id)
                    .limit(1000)
                )
                .all()
            )
            yield from batch
            if len(batch) < 1000:
                return
            after = batch[-1][0]

    return RunView(run, agent.id), rows()
