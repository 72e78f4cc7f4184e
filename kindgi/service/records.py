"""Each case's record over its test set's last 50 done full runs (docs/design.md §9.10): how many
runs had it, its outcomes, the candidates that failed it, whether it is flaky, how well it
separates candidates, when it last failed, and how many of its newest runs in a row it did not
pass.

A record is rewritten when a full run is done, for that run's cases and those of the run it
pushes out of the window, from their rows in the window's runs (the index by case makes it a
short range scan a case); reading one is one row. Quick runs are left out, as they are of the
prior pass rates (`service.quick_runs`). `error` counts as not passing; `pending` and
`ungraded` count as nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, Select, delete, select

from ..database import db
from ..models import CaseRecord, RunCase, TestRun
from . import cases as case_service  # a module: cases reaches this one through test_runs
from .common import sql
from .identity import Principal

WINDOW = 50
COUNTED = ("pass", "fail", "error")


def _window(conn: Connection, agent_pk: int, project_id: str, n: int) -> list[Any]:
    """The set's newest `n` done full runs: (pk, candidate, finishedAt, tallies), newest first."""
    return conn.execute(
        select(TestRun.pk, TestRun.candidate, TestRun.finished_at, TestRun.tallies)
        .where(
            TestRun.agent_pk == agent_pk,
            TestRun.project_id == project_id,
            TestRun.status == "done",
            TestRun.sample.is_(None),
        )
        .order_by(TestRun.finished_at.desc(), TestRun.pk.desc())
        .limit(n)
    ).all()


def _pass_rate(tallies: dict[str, Any]) -> float | None:
    cases = tallies["cases"]
    graded = cases["pass"] + cases["fail"]
    return cases["pass"] / graded if graded else None


def separation(pairs: list[tuple[int, float]]) -> float | None:
    """The correlation of passing the case (1 or 0) with the pass rate of the run: near 1 when
    the better candidates pass it and the worse fail it; None when either never varies."""
    if len(pairs) < 2:
        return None
    n = len(pairs)
    mean_y = sum(y for y, _ in pairs) / n
    mean_x = sum(x for _, x in pairs) / n
    cov = sum((y - mean_y) * (x - mean_x) for y, x in pairs)
    var_y = sum((y - mean_y) ** 2 for y, _ in pairs)
    var_x = sum((x - mean_x) ** 2 for _, x in pairs)
    if var_y <= 0 or var_x <= 1e-12:
        return None
    return max(-1.0, min(1.0, cov / math.sqrt(var_y * var_x)))


def computed(
    conn: Connection, agent_pk: int, project_id: str, cases: Select[Any] | None = None
) -> list[dict[str, Any]]:
    """The records of `cases` (a query of case ids; all the set's when None) as the window's
    runs make them, as rows of `case_records`."""
    window = _window(conn, agent_pk, project_id, WINDOW)
    order = {row.pk: i for i, row in enumerate(window)}  # 0: the newest
    runs = {row.pk: row for row in window}
    rates = {row.pk: _pass_rate(row.tallies) for row in window}
    query = select(RunCase.case_id, RunCase.run_pk, RunCase.outcome).where(
        RunCase.run_pk.in_(list(runs)), RunCase.outcome.in_(COUNTED)
    )
    if cases is not None:
        query = query.where(RunCase.case_id.in_(cases))
    seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for case_id, run_pk, outcome in conn.execute(query):
        seen[case_id].append((order[run_pk], outcome))
    return [
        _record(case_id, agent_pk, project_id, sorted(had), window, rates)
        for case_id, had in seen.items()
    ]


def _rewrite(
    conn: Connection, agent_pk: int, project_id: str, cases: Select[Any] | None = None
) -> None:
    """Write the records of `cases` (a query of case ids; all the set's when None) afresh."""
    rows = computed(conn, agent_pk, project_id, cases)
    gone = delete(CaseRecord).where(
        CaseRecord.agent_pk == agent_pk, CaseRecord.project_id == project_id
    )
    conn.execute(gone if cases is None else gone.where(CaseRecord.case_id.in_(cases)))
    if rows:
        conn.execute(CaseRecord.__table__.insert(), rows)


def _record(
    case_id: str,
    agent_pk: int,
    project_id: str,
    had: list[tuple[int, str]],
    window: list[Any],
    rates: dict[int, float | None],
) -> dict[str, Any]:
    """One case's record from its outcomes in the window, newest first."""
    counts = {o: 0 for o in COUNTED}
    by_candidate: dict[str, set[str]] = defaultdict(set)
    failed_by: set[str] = set()
    pairs = []
    streak, streaking, last_failed = 0, True, None
    for index, outcome in had:
        run = window[index]
        counts[outcome] += 1
        by_candidate[run.candidate].add(outcome)
        if outcome != "pass":
            failed_by.add(run.candidate)
            last_failed = last_failed or run.finished_at
        streaking = streaking and outcome != "pass"
        streak += streaking
        if rates[run.pk] is not None:
            pairs.append((int(outcome == "pass"), rates[run.pk]))
    return {
        "case_id": case_id,
        "agent_pk": agent_pk,
        "project_id": project_id,
        "runs": len(had),
        "passed": counts["pass"],
        "failed": counts["fail"],
        "errored": counts["error"],
        "failed_by": sorted(failed_by),
        "flaky": any(len(outcomes) > 1 for outcomes in by_candidate.values()),
        "separation": separation(pairs),
        "last_failed": last_failed,
        "streak": streak,
    }


def run_done(run: TestRun) -> None:
    """A full run is done: rewrite its cases' records, and those of the run it pushed out."""
    conn = sql()
    pushed = [row.pk for row in _window(conn, run.agent_pk, run.project_id, WINDOW + 1)[WINDOW:]]
    cases = select(RunCase.case_id).where(RunCase.run_pk.in_([run.pk, *pushed])).distinct()
    _rewrite(conn, run.agent_pk, run.project_id, cases)


def _sets(conn: Connection) -> list[Any]:
    """The test sets that have test runs."""
    return conn.execute(select(TestRun.agent_pk, TestRun.project_id).distinct()).all()


def rebuild_all(conn: Connection) -> None:
    """Every set's records from its stored runs (migration 0014)."""
    for agent_pk, project_id in _sets(conn):
        _rewrite(conn, agent_pk, project_id)


def breaches() -> list[str]:
    """Every kept record that is not what the window's runs make it, and every record missing
    (`kindgi check`)."""
    conn = sql()
    columns = [c.name for c in CaseRecord.__table__.columns]
    kept = {row.case_id: row._asdict() for row in conn.execute(select(CaseRecord.__table__))}
    found = {}
    for agent_pk, project_id in _sets(conn):
        found.update({row["case_id"]: row for row in computed(conn, agent_pk, project_id)})
    out = []
    for case_id in sorted(set(kept) | set(found)):
        mine, theirs = kept.get(case_id), found.get(case_id)
        if mine is None or theirs is None:
            said = "is kept, and no run of its window had it" if theirs is None else "is missing"
            out.append(f"case {case_id}: its record {said}")
            continue
        wrong = [c for c in columns if mine[c] != theirs[c]]
        if wrong:
            shown = ", ".join(f"{c} {mine[c]!r} (runs say {theirs[c]!r})" for c in wrong)
            out.append(f"case {case_id}: its record holds {shown}")
    return out


def get_record(caller: Principal, agent_id: str, case_id: str) -> tuple[str, CaseRecord | None]:
    """A case of the agent (as `get_case` finds it: 404 unless the caller's tenant has it, and
    `read` on its project) and its record, if any run of the window had it."""
    case = case_service.get_case(caller, agent_id, case_id).case
    return case.id, record_of(case.id)


def record_of(case_id: str) -> CaseRecord | None:
    """A case's record, read as one row, for a caller already let read the case."""
    return db.session.get(CaseRecord, case_id)
