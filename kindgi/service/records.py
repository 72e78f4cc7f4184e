"""Each case's record over its test set's last 50 done full runs (docs/design.md §9.10): how many
runs had it, its outcomes, the candidates that failed it, whether it is flaky, how well it
separates candidates, when it last failed, and how many of its newest runs in a row it did not
pass.

A record keeps what it is counted from: each candidate's outcomes (`by_candidate`) and the
moments of its pass/fail against the runs' pass rates (`moments`, whole numbers, the rates in
units of 2**-32, so a sum is the same in any order). When a full run is done, the records of its
cases and of the run it pushes out of the window are brought up to date from their own rows and
those two runs' outcomes: work in proportion to the runs' cases, not to the window. Only when
the run is not the window's newest (another ended in the same millisecond) are its cases'
records counted again from the window's rows. Reading one is one row. Quick runs are left out,
as they are of the prior pass rates (`service.quick_runs`). `error` counts as not passing;
`pending` and `ungraded` count as nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, Select, delete, select

from ..database import db
from ..models import CaseRecord, RunCase, TestRun
from . import cases as case_service  # a module: cases reaches this one through test_runs
from .common import bulk, sql, take_turns
from .identity import Principal

WINDOW = 50
COUNTED = ("pass", "fail", "error")
SCALE = 2**32  # a run's pass rate in the moments: a whole number of 2**-32


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


def _pass_rate(tallies: dict[str, Any]) -> int | None:
    """A run's pass rate in units of 1/SCALE (None when it graded nothing)."""
    cases = tallies["cases"]
    graded = cases["pass"] + cases["fail"]
    return round(cases["pass"] * SCALE / graded) if graded else None


def separation(moments: list[int]) -> float | None:
    """The correlation of passing the case (1 or 0) with the pass rate of the run, from the
    moments [n, Σy, Σx, Σxy, Σx²]: near 1 when the better candidates pass it and the worse fail
    it; None when either never varies."""
    n, sy, sx, sxy, sxx = moments
    var_y, var_x = n * sy - sy * sy, n * sxx - sx * sx  # n² times the variances, exact
    if var_y <= 0 or var_x <= 0:
        return None
    return max(-1.0, min(1.0, (n * sxy - sx * sy) / math.sqrt(var_y * var_x)))


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
    conn: Connection,
    agent_pk: int,
    project_id: str,
    cases: Select[Any] | None = None,
    columns: list[str] | None = None,
) -> None:
    """Write the records of `cases` (a query of case ids; all the set's when None) afresh, with
    only `columns` when given (a migration's table has those)."""
    rows = computed(conn, agent_pk, project_id, cases)
    if columns is not None:
        rows = [{c: row[c] for c in columns} for row in rows]
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
    rates: dict[int, int | None],
) -> dict[str, Any]:
    """One case's record from its outcomes in the window, oldest first (each one counted in as
    `_count_in` counts a run that ends)."""
    row = _empty(case_id, agent_pk, project_id)
    for index, outcome in reversed(had):
        run = window[index]
        _count_in(row, outcome, run.candidate, rates[run.pk], run.finished_at)
    return _settled(row)


def _empty(case_id: str, agent_pk: int, project_id: str) -> dict[str, Any]:
    """The record of a case no run of the window had, as the counting starts from."""
    return {
        "case_id": case_id,
        "agent_pk": agent_pk,
        "project_id": project_id,
        "runs": 0,
        "passed": 0,
        "failed": 0,
        "errored": 0,
        "by_candidate": {},
        "moments": [0, 0, 0, 0, 0],
        "last_failed": None,
        "streak": 0,
    }


_COLUMN = {"pass": "passed", "fail": "failed", "error": "errored"}
# What a record is counted on from (the rest, `_settled` works out again)
_COUNTED_NAMES = ["case_id", "agent_pk", "project_id", "runs", *_COLUMN.values(), "by_candidate",
                  "moments", "last_failed", "streak"]  # fmt: skip
_COUNTED_FROM = [CaseRecord.__table__.c[name] for name in _COUNTED_NAMES]


def _tally(row: dict[str, Any], outcome: str, candidate: str, rate: int | None, by: int) -> None:
    """Add (`by` 1) or take away (-1) one run's outcome from a record's counts and moments."""
    row["runs"] += by
    row[_COLUMN[outcome]] += by
    counts = row["by_candidate"].setdefault(candidate, [0, 0, 0])
    counts[COUNTED.index(outcome)] += by
    if not any(counts):
        del row["by_candidate"][candidate]
    if rate is not None:
        y = int(outcome == "pass")
        for i, term in enumerate((1, y, rate, y * rate, rate * rate)):
            row["moments"][i] += by * term


def _count_in(
    row: dict[str, Any], outcome: str, candidate: str, rate: int | None, finished_at: Any
) -> None:
    """A run newer than every run the record counts had the case."""
    _tally(row, outcome, candidate, rate, +1)
    if outcome == "pass":
        row["streak"] = 0
    else:
        row["streak"] += 1
        row["last_failed"] = finished_at


def _count_out(row: dict[str, Any], outcome: str, candidate: str, rate: int | None) -> None:
    """The oldest run the record counts left the window: it was in the streak of runs that did
    not pass only if every run was, and when it was the last one that did not pass there is
    no last failure now."""
    if row["streak"] == row["runs"]:
        row["streak"] -= 1
    _tally(row, outcome, candidate, rate, -1)
    if not (row["failed"] or row["errored"]):
        row["last_failed"] = None


def _settled(row: dict[str, Any]) -> dict[str, Any]:
    """A record with what is read from its counts: who failed it, whether it is flaky, and how
    well it separates candidates."""
    by_candidate = row["by_candidate"]
    row["failed_by"] = sorted(c for c, (_, failed, errored) in by_candidate.items()
                              if failed or errored)  # fmt: skip
    row["flaky"] = any(sum(n > 0 for n in counts) > 1 for counts in by_candidate.values())
    row["separation"] = separation(row["moments"])
    return row


def run_done(run: TestRun) -> None:
    """A full run is done: bring its cases' records up to date, and those of the run it pushed
    out of the window (each record read, changed by the two runs' outcomes, written again).
    Two runs of a set that end at once take turns, the second counting the first's records:
    else each adds its outcomes to the records as they were, and one run's are lost."""
    conn = sql()
    take_turns(f"records:{run.agent_pk}:{run.project_id}")
    bulk()  # a full run of a large set rewrites as many records
    window = _window(conn, run.agent_pk, run.project_id, WINDOW + 1)
    pushed = window[WINDOW:]
    if not window or window[0].pk != run.pk:  # not the newest: counted again from the window
        ran = [run.pk, *(row.pk for row in pushed)]
        cases = select(RunCase.case_id).where(RunCase.run_pk.in_(ran)).distinct()
        _rewrite(conn, run.agent_pk, run.project_id, cases)
        return
    ran = {row.pk: row for row in [window[0], *pushed]}
    had: dict[str, dict[int, str]] = defaultdict(dict)
    for case_id, run_pk, outcome in conn.execute(
        select(RunCase.case_id, RunCase.run_pk, RunCase.outcome).where(
            RunCase.run_pk.in_(list(ran)), RunCase.outcome.in_(COUNTED)
        )
    ):
        had[case_id][run_pk] = outcome
    if not had:
        return
    touched = (
        select(RunCase.case_id)
        .where(RunCase.run_pk.in_(list(ran)), RunCase.outcome.in_(COUNTED))
        .distinct()
    )
    counted = select(*_COUNTED_FROM).where(CaseRecord.case_id.in_(touched))
    kept = {row[0]: dict(zip(_COUNTED_NAMES, row, strict=True)) for row in conn.execute(counted)}
    rows = []
    for case_id, outcomes in had.items():
        row = kept.get(case_id) or _empty(case_id, run.agent_pk, run.project_id)
        for old in pushed:
            if old.pk in outcomes:
                _count_out(row, outcomes[old.pk], old.candidate, _pass_rate(old.tallies))
        if run.pk in outcomes:
            _count_in(row, outcomes[run.pk], run.candidate, _pass_rate(run.tallies),
                      run.finished_at)  # fmt: skip
        if row["runs"]:
            rows.append(_settled(row))
    conn.execute(delete(CaseRecord).where(CaseRecord.case_id.in_(touched)))
    if rows:
        conn.execute(CaseRecord.__table__.insert(), rows)


def _sets(conn: Connection) -> list[Any]:
    """The test sets that have test runs."""
    return conn.execute(select(TestRun.agent_pk, TestRun.project_id).distinct()).all()


def rebuild_all(conn: Connection, columns: list[str] | None = None) -> None:
    """Every set's records from its stored runs, with only `columns` when given (migrations 0014
    and 0016)."""
    for agent_pk, project_id in _sets(conn):
        _rewrite(conn, agent_pk, project_id, columns=columns)


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
