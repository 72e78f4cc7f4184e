"""A test run's life: started against a frozen version, fed results, finished or canceled.

Starting a run freezes the test set (or reuses its unchanged version, or the version of the run it
re-runs) and gives the run one row per case to grade, each `awaiting` its result. The run's
`tallies` are kept in the transaction of every change, so reading a run never scans its cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, func, literal, select, update
from sqlalchemy.orm.attributes import flag_modified

from .. import grading
from ..database import db
from ..errors import (
    NothingToGrade,
    TestRunClosed,
    TestRunNotFound,
    TestRunsNotComparable,
)
from ..grading import CHANGES
from ..models import Case, CaseTag, RunCase, Snapshot, TestRun, VersionMember
from . import quick_runs, records
from .access import AgentRef, Grants, find_agent, grants, readable, require, scope
from .common import analyze, bulk, clock, judge_settings, new_id, sql
from .identity import Principal
from .paging import Page, after_id, id_page, keyset_page, newest_first
from .versions import as_frozen, freeze, pinned_expect, test_set_id

CASE_OUTCOMES = ("pending", "pass", "fail", "error", "ungraded")
PART_OUTCOMES = {
    "decisions": ("pass", "fail", "error"),
    "answer": ("pass", "fail", "error", "pending", "ungraded"),
    "items": ("pass", "fail", "error"),
}


@dataclass
class RunView:
    """A test run with what its answer names: its agent's and its test set's ids."""

    run: TestRun
    agent_id: str

    @property
    def test_set_id(self) -> str:
        return test_set_id(self.agent_id, self.run.project_id)


def new_tallies(total: int) -> dict[str, Any]:
    """A run's counts before any result: every case awaiting."""
    return {
        "cases": {"total": total, "awaiting": total, **dict.fromkeys(CASE_OUTCOMES, 0)},
        "parts": {part: dict.fromkeys(outcomes, 0) for part, outcomes in PART_OUTCOMES.items()},
        "itemsScore": {"sum": 0.0, "n": 0},
    }


# ---------------------------------------------------------------- finding runs


def find_run(caller: Principal, agent: AgentRef, run_id: str, *, lock: bool = False) -> TestRun:
    """One of the agent's test runs in the caller's tenant; else 404 `test-run-not-found`."""
    stmt = select(TestRun).where(
        TestRun.id == run_id, TestRun.agent_pk == agent.pk, TestRun.tenant_id == caller.tenant_id
    )
    run = db.session.scalar(stmt.with_for_update() if lock else stmt)
    if run is None:
        raise TestRunNotFound()
    return run


def run_to_read(caller: Principal, agent_id: str, run_id: str) -> tuple[AgentRef, TestRun]:
    agent, run, _ = run_and_grants(caller, agent_id, run_id)
    return agent, run


def run_and_grants(
    caller: Principal, agent_id: str, run_id: str
) -> tuple[AgentRef, TestRun, Grants]:
    """The run, once the caller may read in its project, and the caller's grants there (a page
    that offers changes asks them once)."""
    agent = find_agent(caller, agent_id)
    run = find_run(caller, agent, run_id)
    held = grants(caller, agent, run.project_id)
    held.require("read", agent, run.project_id)
    return agent, run, held


def run_to_change(caller: Principal, agent_id: str, run_id: str) -> tuple[AgentRef, TestRun]:
    """The run, locked for a change, once the caller may write in its project."""
    agent = find_agent(caller, agent_id)
    run = find_run(caller, agent, run_id, lock=True)
    require(caller, "write", agent, run.project_id)
    return agent, run


def _done_run_of_set(
    caller: Principal, agent: AgentRef, project_id: str, version_pk: int | None, run_id: str
) -> TestRun:
    """A `done` run of this test set (and version, when given); 404 or 409 otherwise."""
    run = find_run(caller, agent, run_id)
    if run.project_id != project_id or run.status != "done":
        raise TestRunsNotComparable(details={"testRunId": run_id, "status": run.status})
    if version_pk is not None and run.version_pk != version_pk:
        raise TestRunsNotComparable(details={"testRunId": run_id})
    return run


# ---------------------------------------------------------------- starting a run


def start_test_run(caller: Principal, agent_id: str, body: dict[str, Any]) -> RunView:
    """Freeze the set (or reuse the unchanged version, or the re-run's) and open a run over its
    cases, narrowed by `weighting`, by `tags` (cases with any of them) and, for a re-run, by
    `only`; a quick run over a sample of them (`sample`). The run's cases (`test_run_cases`)
    are the record of which it had."""
    project_id = body["projectId"]
    agent, grants = scope(caller, agent_id, project_id)
    grants.require("write", agent, project_id)
    baseline = rerun = None
    if "baseline" in body:
        baseline = _done_run_of_set(caller, agent, project_id, None, body["baseline"])
    if "rerunOf" in body:
        rerun = _done_run_of_set(caller, agent, project_id, None, body["rerunOf"])
        version_pk, version = rerun.version_pk, rerun.version
    else:
        frozen = freeze(caller, agent, project_id)
        version_pk, version = frozen.pk, f"v{frozen.number}"
    by = caller.actor
    run = TestRun(
        id=new_id("trun"),
        tenant_id=caller.tenant_id,
        agent_pk=agent.pk,
        project_id=project_id,
        version_pk=version_pk,
        version=version,
        candidate=body["candidate"],
        weighting=body.get("weighting", "all"),
        baseline_pk=baseline.pk if baseline else None,
        baseline_id=baseline.id if baseline else None,
        rerun_of_id=rerun.id if rerun else None,
        only=",".join(body["only"]) if rerun else None,
        tags=sorted(set(body["tags"])) if "tags" in body else None,
        label=body.get("label"),
        meta=body.get("metadata"),
        items_threshold=body.get("itemsThreshold", 0.8),
        status="open",
        created_at=clock(),
        created_by_kind=by["kind"],
        created_by_id=by["id"],
        tallies={},
    )
    db.session.add(run)
    db.session.flush()
    bulk()
    members = select(literal(run.pk), VersionMember.case_id, literal("awaiting")).where(
        VersionMember.version_pk == version_pk
    )
    if run.weighting == "experts-only":
        members = members.where(VersionMember.expert.is_(True))
    if rerun is not None:
        redo = select(RunCase.case_id).where(
            RunCase.run_pk == rerun.pk,
            RunCase.outcome.in_(["fail" if o == "failed" else "error" for o in body["only"]]),
        )
        members = members.where(VersionMember.case_id.in_(redo))
    if run.tags:  # the cases tagged with any of them, as tagged now
        tagged = select(CaseTag.case_id).where(
            CaseTag.agent_pk == agent.pk,
            CaseTag.project_id == project_id,
            CaseTag.tag.in_(run.tags),
        )
        members = members.where(VersionMember.case_id.in_(tagged))
    if "sample" in body:
        total = quick_runs.draw_sample(
            run, members.with_only_columns(VersionMember.case_id), body["sample"]
        )
    else:
        total = _insert_all(run, members)
    if not total:
        raise NothingToGrade()
    analyze(RunCase.__table__, total)
    tallies = new_tallies(total)
    judged = judge_settings()
    if judged is not None:
        tallies["judge"] = {"model": judged.model, "asked": 0, "agreed": 0, "calibrating": 0}
    if baseline is not None and not shares_only(run, baseline):  # else counted when asked
        tallies["comparison"] = _initial_comparison(run.pk, baseline.pk)
    run.tallies = tallies
    db.session.flush()
    return RunView(run, agent.id)


def shares_only(run: TestRun, other: TestRun) -> bool:
    """Whether two runs are compared on the cases both had only (none `new` or `gone`): one is
    a quick run, or they were started on different tags."""
    return run.sample is not None or other.sample is not None or run.tags != other.tags


def _insert_all(run: TestRun, members: Select[Any]) -> int:
    """Give the run every case of `members`, each awaiting its result; how many."""
    sql().execute(RunCase.__table__.insert().from_select(["run_pk", "case_id", "outcome"], members))
    return (
        sql()
        .execute(  # not the INSERT's rowcount: psycopg doesn't report one for it
            select(func.count()).select_from(RunCase).where(RunCase.run_pk == run.pk)
        )
        .scalar_one()
    )


def _initial_comparison(run_pk: int, baseline_pk: int) -> dict[str, int]:
    """Every pair's change while the run awaits all its results: new, gone, errored (the
    baseline erred) or ungraded (awaiting)."""
    theirs = RunCase.__table__.alias("theirs")
    mine = RunCase.__table__.alias("mine")
    counts = dict.fromkeys(CHANGES, 0)
    paired = (
        sql()
        .execute(
            select(theirs.c.outcome, func.count())
            .select_from(mine.join(theirs, theirs.c.case_id == mine.c.case_id))
            .where(mine.c.run_pk == run_pk, theirs.c.run_pk == baseline_pk)
            .group_by(theirs.c.outcome)
        )
        .all()
    )
    for outcome, n in paired:
        counts["errored" if outcome == "error" else "ungraded"] += n
    in_both = sum(n for _, n in paired)
    mine_total, theirs_total = (
        sql()
        .execute(select(func.count()).select_from(RunCase).where(RunCase.run_pk == pk))
        .scalar_one()
        for pk in (run_pk, baseline_pk)
    )
    counts["new"], counts["gone"] = mine_total - in_both, theirs_total - in_both
    return counts


# ---------------------------------------------------------------- reading runs


def get_test_run(caller: Principal, agent_id: str, run_id: str) -> RunView:
    agent, run = run_to_read(caller, agent_id, run_id)
    return RunView(run, agent.id)


@cache
def _runs_query(one_candidate: bool, after: bool) -> Select[Any]:
    query = select(TestRun.created_at, TestRun.id).where(
        TestRun.agent_pk == bindparam("agent_pk"), TestRun.project_id == bindparam("project_id")
    )
    if one_candidate:
        query = query.where(TestRun.candidate == bindparam("candidate"))
    return newest_first(query, TestRun.created_at, TestRun.id, after)


def list_test_runs(
    caller: Principal,
    agent_id: str,
    project_id: str,
    *,
    candidate: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> tuple[Page, str]:
    """The set's test runs, newest first (of one candidate, if named), with the agent's id."""
    agent, _ = readable(caller, agent_id, project_id)
    page = keyset_page(
        lambda after: _runs_query(candidate is not None, after),
        {"agent_pk": agent.pk, "project_id": project_id, "candidate": candidate},
        limit,
        cursor,
        {
            "list": "test-runs",
            "agent": agent.pk,
            "project": project_id,
            "candidate": candidate,
            "caller": caller.scope,
        },
    )
    runs = {
        run.id: run
        for run in db.session.scalars(
            select(TestRun).where(TestRun.id.in_([row.id for row in page.items]))
        )
    }
    page.items = [runs[row.id] for row in page.items]
    return page, agent.id


def runner_cases(
    caller: Principal,
    agent_id: str,
    run_id: str,
    *,
    awaiting: bool = False,
    limit: int = 100,
    cursor: str | None = None,
) -> Page:
    """What a runner needs of each case, by case id: its kind, whether an expert's, the
    input of its run's snapshot, and the parts it will be graded on."""
    _, run = run_to_read(caller, agent_id, run_id)
    binding = {"list": "run-cases", "run": run.pk, "awaiting": awaiting, "caller": caller.scope}
    after = after_id(cursor, binding)
    query = as_frozen(
        select(RunCase.case_id, Case.kind, Case.expert, pinned_expect(), Snapshot.input)
        .join(Case, Case.id == RunCase.case_id)
        .join(Snapshot, Snapshot.run_id == Case.run_id)
        # said of both sides: a merge join starts there, not at the top
        .where(RunCase.run_pk == run.pk, RunCase.case_id > after, Case.id > after)
        .order_by(RunCase.case_id)
        .limit(limit + 1),
        run.version_pk,
        RunCase.case_id,
    )
    if awaiting:
        query = query.where(RunCase.outcome == "awaiting")
    return id_page(sql().execute(query).all(), limit, binding)


# ---------------------------------------------------------------- finishing and canceling


def finish_test_run(caller: Principal, agent_id: str, run_id: str) -> RunView:
    """No more results: the cases still awaiting one become `error` (`no-result`)."""
    agent, run = run_to_change(caller, agent_id, run_id)
    if run.status != "open":
        raise TestRunClosed(details={"status": run.status})
    tallies = run.tallies
    waiting = tallies["cases"]["awaiting"]
    comparison = tallies.get("comparison")
    if comparison is not None and waiting:
        theirs = RunCase.__table__.alias("theirs")
        # an awaiting pair was `ungraded` unless the baseline erred: now it is `errored`
        moved = (
            sql()
            .execute(
                select(func.count())
                .select_from(RunCase)
                .join(theirs, theirs.c.case_id == RunCase.case_id)
                .where(
                    RunCase.run_pk == run.pk,
                    RunCase.outcome == "awaiting",
                    theirs.c.run_pk == run.baseline_pk,
                    theirs.c.outcome != "error",
                )
            )
            .scalar_one()
        )
        comparison["ungraded"] -= moved
        comparison["errored"] += moved
    sql().execute(
        update(RunCase)
        .where(RunCase.run_pk == run.pk, RunCase.outcome == "awaiting")
        .values(outcome="error", reason=grading.NO_RESULT)
    )
    tallies["cases"]["error"] += waiting
    tallies["cases"]["awaiting"] = 0
    settle(run, tallies)
    return RunView(run, agent.id)


def settle(run: TestRun, tallies: dict[str, Any]) -> None:
    """Store the run's new tallies; with nothing awaiting it leaves `open`: `grading` while an
    answer waits for the judge, else `done` (and a full run's cases' records are rewritten)."""
    waiting = tallies["cases"]["pending"] or tallies.get("judge", {}).get("calibrating", 0)
    was = run.status
    if run.status == "open" and tallies["cases"]["awaiting"] == 0:
        run.status = "grading"
    if run.status == "grading" and not waiting:
        run.status, run.finished_at = "done", clock()
        if run.sample is not None:
            found = quick_runs.estimate(run)
            if found is not None:
                tallies["estimate"] = found
    run.tallies = tallies
    flag_modified(run, "tallies")  # changed in place: say so, or it is not saved
    db.session.flush()
    if run.status == "done" and was != "done" and run.sample is None:
        records.run_done(run)


def cancel_test_run(caller: Principal, agent_id: str, run_id: str) -> RunView:
    """Stop a run that is not over: it takes no more results and is never graded further."""
    agent, run = run_to_change(caller, agent_id, run_id)
    if run.status in ("done", "canceled"):
        raise TestRunClosed(details={"status": run.status})
    run.status, run.finished_at = "canceled", clock()
    db.session.flush()
    return RunView(run, agent.id)
