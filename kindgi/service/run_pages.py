"""What the test-run pages read: a run with a page of its results, a comparison with its
baseline picked, a test set's runs and versions, a case's history, the overview's last runs.

Every read is a handful of index steps whatever the runs' sizes: a run's counts are its kept
tallies, lists are keyset pages, and the runs a page offers are the newest few.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import aliased

from ..database import db
from ..models import AgentProject, Case, RunCase, TestRun
from .access import readable
from .identity import Principal
from .paging import Page
from .results import Comparison, compare, results_of
from .test_runs import RunView, list_test_runs, run_and_grants, run_to_read
from .triage import TriageDone, triage_of
from .versions import list_versions

CHOICES = 50  # the runs a comparison offers as baselines
TREND = 20  # the done runs the pass-rate chart draws
VERSIONS = 5  # the versions the test set's runs page lists a page at a time
HISTORY = 8  # the runs a case's history shows
SETTLED = ("pass", "fail", "error")  # the outcomes that can tell a flaky case


@dataclass
class RunPage:
    """A run with one page of its results, as the filters ask; what was revised and retired
    from it, by whom; and for a caller who may publish in its project (`may_publish`: the page
    offers to revise or retire its failing cases), which of the page's cases are retired."""

    view: RunView
    results: Page
    done: list[TriageDone] = field(default_factory=list)
    may_publish: bool = False
    retired: set[str] = field(default_factory=set)


def run_page(
    caller: Principal,
    agent_id: str,
    run_id: str,
    *,
    outcome: list[str] | None = None,
    part: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> RunPage:
    """The run page's reads: the run (its tallies), one keyset page of its results, and its
    triage."""
    agent, run, held = run_and_grants(caller, agent_id, run_id)
    page = results_of(caller, run, outcome=outcome, part=part, limit=limit, cursor=cursor)
    found = RunPage(RunView(run, agent.id), page, triage_of(run.id))
    found.may_publish = held.may_publish
    if found.may_publish:
        failing = [row.case_id for row in page.items if row.outcome == "fail"]
        found.retired = _retired(failing)
    return found


def _retired(case_ids: list[str]) -> set[str]:
    """Which of these cases (a page's) are retired."""
    if not case_ids:
        return set()
    return set(
        db.session.scalars(
            select(Case.id).where(Case.id.in_(case_ids), Case.retired_at.is_not(None))
        )
    )


@dataclass
class ComparisonPage:
    """A run against a baseline: the runs offered as baselines, and the comparison (None when
    the set has no other done run to compare with)."""

    view: RunView
    baseline: TestRun | None
    choices: list[TestRun]
    comparison: Comparison | None


def comparison_page(
    caller: Principal,
    agent_id: str,
    run_id: str,
    baseline_id: str | None = None,
    *,
    change: list[str] | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> ComparisonPage:
    """Compare a run with `baseline_id`, or by default with its own baseline, else with the
    set's newest `done` run started before it; the set's newest done runs are the choices."""
    agent, run = run_to_read(caller, agent_id, run_id)
    choices = list(
        db.session.scalars(
            _done_runs(run.agent_pk, run.project_id).where(TestRun.pk != run.pk).limit(CHOICES),
        )
    )
    if baseline_id is None:
        baseline_id = run.baseline_id or _previous_done(run)
    if baseline_id is None:
        return ComparisonPage(RunView(run, agent.id), None, choices, None)
    found = compare(
        caller, agent_id, run.id, baseline_id, change=change, limit=limit, cursor=cursor
    )  # the baseline is the caller's, of this agent and test set, or this is 404 or 409
    if found.baseline not in choices:
        choices.append(found.baseline)  # an older or unfinished run named in the URL stays
    return ComparisonPage(RunView(run, agent.id), found.baseline, choices, found)


def _done_runs(agent_pk: int, project_id: str) -> Any:
    """The `done` runs of a test set, newest first (down the runs' list index)."""
    return (
        select(TestRun)
        .where(
            TestRun.agent_pk == agent_pk,
            TestRun.project_id == project_id,
            TestRun.status == "done",
        )
        .order_by(TestRun.created_at.desc(), TestRun.id.desc())
    )


def _previous_done(run: TestRun) -> str | None:
    """The newest `done` run of the set started before this one."""
    before = or_(
        TestRun.created_at < run.created_at,
        and_(TestRun.created_at == run.created_at, TestRun.id < run.id),
    )
    done = _done_runs(run.agent_pk, run.project_id)
    return db.session.scalar(done.where(before).with_only_columns(TestRun.id).limit(1))


@dataclass
class TestSetRuns:
    """A test set's runs (a keyset page, newest first), a page of its versions, and the done
    runs the pass-rate chart draws, oldest first."""

    agent_id: str
    project_id: str
    runs: Page
    versions: Page
    trend: list[TestRun]


def test_set_runs(
    caller: Principal,
    agent_id: str,
    project_id: str,
    *,
    limit: int = 25,
    cursor: str | None = None,
    versions_cursor: str | None = None,
) -> TestSetRuns:
    """The test set's runs page: its runs, its versions and the pass rate's trend."""
    agent, _ = readable(caller, agent_id, project_id)
    runs, _ = list_test_runs(caller, agent_id, project_id, limit=limit, cursor=cursor)
    _, versions = list_versions(
        caller, agent_id, project_id, limit=VERSIONS, cursor=versions_cursor
    )
    trend = list(db.session.scalars(_done_runs(agent.pk, project_id).limit(TREND)))
    graded = [run for run in reversed(trend) if _graded(run)]
    return TestSetRuns(agent.id, project_id, runs, versions, graded)


def _graded(run: TestRun) -> int:
    """How many of a run's cases passed or failed: those its pass rate is over."""
    return int(run.tallies["cases"]["pass"] + run.tallies["cases"]["fail"])


@dataclass
class HistoryRow:
    """A case's outcome in one run; `flaky` when the same candidate got another outcome too."""

    run_id: str
    candidate: str
    created_at: datetime
    outcome: str
    flaky: bool = False


def case_history(case_id: str, limit: int = HISTORY) -> list[HistoryRow]:
    """A case the caller was already found to read: its outcome in the newest runs that graded
    it, newest first, down the index of results by case (`ix_test_run_cases_case`)."""
    rows = [
        HistoryRow(*row)
        for row in db.session.execute(
            select(TestRun.id, TestRun.candidate, TestRun.created_at, RunCase.outcome)
            .join(TestRun, TestRun.pk == RunCase.run_pk)
            .where(RunCase.case_id == case_id, RunCase.outcome != "awaiting")
            .order_by(RunCase.run_pk.desc())
            .limit(limit)
        )
    ]
    seen: dict[str, set[str]] = {}
    for row in rows:
        if row.outcome in SETTLED:
            seen.setdefault(row.candidate, set()).add(row.outcome)
    for row in rows:
        row.flaky = len(seen.get(row.candidate, ())) > 1
    return rows


def last_runs(pairs: list[tuple[int, str]]) -> dict[tuple[int, str], TestRun]:
    """The newest run of each (agent, project) pair, in one query: each pair's newest run is
    one step down the runs' list index."""
    if not pairs:
        return {}
    newest = aliased(TestRun)
    latest = (
        select(newest.pk)
        .where(
            newest.agent_pk == AgentProject.agent_pk,
            newest.project_id == AgentProject.project_id,
        )
        .order_by(newest.created_at.desc(), newest.id.desc())
        .limit(1)
        .correlate(AgentProject)
        .scalar_subquery()
    )
    found = db.session.scalars(
        select(TestRun)
        .join(AgentProject, TestRun.pk == latest)
        .where(AgentProject.agent_pk.in_({pk for pk, _ in pairs}))
    )
    wanted = set(pairs)
    return {
        (run.agent_pk, run.project_id): run
        for run in found
        if (run.agent_pk, run.project_id) in wanted
    }
