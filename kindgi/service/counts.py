"""A test set's counts, exact as of now: kept as tallies in the transaction of every change.

A tally cell counts one test set's cases by (week added, kind, retired, expert), so reading the
counts, or the overview's cases-per-week chart, never scans the set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import bindparam, func, literal_column, select

from ..database import db
from ..models import (
    Agent,
    AgentProject,
    Case,
    Grant,
    Project,
    Tally,
    TestRun,
    TestSetChanges,
    TestSetVersion,
)
from . import search
from .access import readable
from .common import dialect, insert_for, sql
from .identity import Principal
from .run_pages import last_runs

TALLY_KEY = ("agent_pk", "project_id", "week", "kind", "retired", "expert")


def week_of(at: datetime) -> date:
    """The Monday of the week `at` falls in: the unit of the overview's chart."""
    day = at.date()
    return day - timedelta(days=day.weekday())


@cache
def _tally_upsert(dialect_name: str) -> Any:
    """`INSERT … ON CONFLICT DO UPDATE SET n = n + :n`, built once per dialect."""
    stmt = insert_for(dialect_name, Tally.__table__).values(
        {name: bindparam(name) for name in (*TALLY_KEY, "n")}
    )
    return stmt.on_conflict_do_update(
        index_elements=list(TALLY_KEY), set_={"n": Tally.n + stmt.excluded.n}
    )


@cache
def _changes_upsert(dialect_name: str) -> Any:
    """`INSERT … ON CONFLICT DO UPDATE SET changes = changes + 1`, built once per dialect."""
    stmt = insert_for(dialect_name, TestSetChanges.__table__).values(
        agent_pk=bindparam("agent_pk"), project_id=bindparam("project_id"), changes=1
    )
    return stmt.on_conflict_do_update(
        index_elements=["agent_pk", "project_id"],
        set_={"changes": TestSetChanges.changes + 1},
    )


def tally(case: Case, delta: int, retired: bool | None = None) -> None:
    """Move the case's cell of its test set's counts by `delta`, atomically (the cell of its
    retired state, unless `retired` names the other), and count a change of the set (so the
    next freeze makes a new version). The change counter is locked after the cells, always."""
    sql().execute(
        _tally_upsert(dialect()),
        {
            "agent_pk": case.agent_pk,
            "project_id": case.project_id,
            "week": week_of(case.added_at),
            "kind": case.kind,
            "retired": case.retired_at is not None if retired is None else retired,
            "expert": bool(case.expert),
            "n": delta,
        },
    )
    note_change(case.agent_pk, case.project_id)


def note_change(agent_pk: int, project_id: str) -> None:
    """Count a change of the set (a case in, out, retired, restored or revised), so the next
    freeze makes a new version."""
    sql().execute(_changes_upsert(dialect()), {"agent_pk": agent_pk, "project_id": project_id})


def tally_retirements(cases: list[Case], retiring: bool) -> None:
    """Move the cases' counts between the active and the retired cells of their test set (one
    set), a cell's move once however many cases share it. Always every active cell first, in
    one order, so retires and restores running at once lock the cells alike: no deadlock."""
    moved: dict[tuple[Any, ...], int] = {}
    for case in cases:
        cell = (week_of(case.added_at), case.kind, bool(case.expert))
        moved[cell] = moved.get(cell, 0) + 1
    set_key = {"agent_pk": cases[0].agent_pk, "project_id": cases[0].project_id}
    for retired in (False, True):
        sign = -1 if retiring != retired else +1
        for (week, kind, expert), n in sorted(moved.items()):
            sql().execute(
                _tally_upsert(dialect()),
                {**set_key, "week": week, "kind": kind, "retired": retired, "expert": expert,
                 "n": sign * n},
            )  # fmt: skip
    note_change(cases[0].agent_pk, cases[0].project_id)


def recount() -> dict[tuple[Any, ...], int]:
    """Every test set's cells counted from its cases, keyed as `TALLY_KEY`: by day in SQL
    (one pass over the cases), then by week."""
    retired = Case.retired_at.is_not(None)
    day = func.date(Case.added_at)
    cells: dict[tuple[Any, ...], int] = {}
    for a, p, d, k, r, e, n in db.session.execute(
        select(Case.agent_pk, Case.project_id, day, Case.kind, retired, Case.expert, func.count())
        .where(Case.is_case)
        .group_by(Case.agent_pk, Case.project_id, day, Case.kind, retired, Case.expert)
    ):
        key = (a, p, week_of(datetime.fromisoformat(str(d))), k, bool(r), bool(e))
        cells[key] = cells.get(key, 0) + n
    return cells


def rebuild_tallies() -> None:
    """Recount every test set from its cases (after a bulk load)."""
    db.session.execute(Tally.__table__.delete())
    rows = [dict(zip(TALLY_KEY, key, strict=True), n=n) for key, n in recount().items()]
    if rows:
        db.session.execute(Tally.__table__.insert(), rows)
    for agent_pk, project_id in {(row["agent_pk"], row["project_id"]) for row in rows}:
        note_change(agent_pk, project_id)


@dataclass
class Counts:
    """A test set's counts: the API's active/retired, and the overview's breakdown."""

    agent_id: str
    project_id: str
    project_name: str = ""
    active: int = 0
    retired: int = 0
    correction: int = 0
    hand: int = 0
    expert: int = 0
    last_added_at: datetime | None = None
    frozen_version: str | None = None  # the newest version's name
    weekly: dict[date, int] = field(default_factory=dict)  # cases added, by week
    last_run: TestRun | None = None  # the overview's: the set's newest test run

    def add(self, cell: Tally) -> None:
        self.weekly[cell.week] = self.weekly.get(cell.week, 0) + cell.n
        self.count(cell.kind, cell.retired, cell.expert, cell.n)

    def count(self, kind: str, retired: bool, expert: bool, n: int) -> None:
        """n cases of a kind, retired or not, an expert's or not: the breakdown is of the
        active ones."""
        if retired:
            self.retired += n
            return
        self.active += n
        self.expert += n if expert else 0
        if kind == "hand":
            self.hand += n
        else:
            self.correction += n


# A test set's totals, summed in the database over its few count cells: active and retired,
# and the active ones by kind and by expert, as the cases page shows them.
_LAST_ADDED = (
    select(Case.added_at)
    .where(
        Case.agent_pk == bindparam("agent_pk"),
        Case.project_id == bindparam("project_id"),
        Case.is_case,
    )
    .order_by(Case.added_at.desc())
    # written in, not bound: for a bound limit PostgreSQL guesses a tenth of the set read, so
    # it planned the cases page's counts anew on every request
    .limit(literal_column("1"))
)
# The tallies, each row with when the newest case was added (read once: one statement a page)
_TOTALS = (
    select(
        Tally.kind, Tally.retired, Tally.expert, func.sum(Tally.n), _LAST_ADDED.scalar_subquery()
    )
    .where(Tally.agent_pk == bindparam("agent_pk"), Tally.project_id == bindparam("project_id"))
    .group_by(Tally.kind, Tally.retired, Tally.expert)
)


def counts_of(agent_pk: int, agent_id: str, project_id: str) -> Counts:
    """The counts of a test set the caller was already found to read, with its newest frozen
    version."""
    params = {"agent_pk": agent_pk, "project_id": project_id}
    counts = Counts(agent_id, project_id)
    for row in sql().execute(_TOTALS, params):
        _count(counts, *row)
    counts.frozen_version = sql().execute(_NEWEST_VERSION, params).scalar()
    return counts


# The cases page's: the totals, and on each row the tools the set's cases name
_PAGE_TOTALS = _TOTALS.add_columns(search.TOOL_NAMES)


def page_counts(agent_pk: int, agent_id: str, project_id: str) -> tuple[Counts, list[str]]:
    """The cases page's counts (no frozen version) and the tools its cases name, sorted (the
    tool filter's choice), in one statement: the page reads both on every request. A set with
    no cases has no totals, and names no tools."""
    params = {"agent_pk": agent_pk, "project_id": project_id}
    counts, tools = Counts(agent_id, project_id), None
    for *row, names in sql().execute(_PAGE_TOTALS, params):
        _count(counts, *row)
        tools = names  # the same on every row
    return counts, sorted(tools or [])


def _count(
    counts: Counts, kind: str, retired: bool, expert: bool, n: int, last_added_at: datetime | None
) -> None:
    """A row of the totals counted in."""
    counts.count(kind, retired, expert, n)
    counts.last_added_at = last_added_at


_NEWEST_VERSION = (
    select(TestSetVersion.number)
    .where(
        TestSetVersion.agent_pk == bindparam("agent_pk"),
        TestSetVersion.project_id == bindparam("project_id"),
    )
    .order_by(TestSetVersion.number.desc())
    .limit(1)
)


def test_set(caller: Principal, agent_id: str, project_id: str) -> Counts:
    """How many cases the agent's test set has in the project, exact as of now."""
    agent, _ = readable(caller, agent_id, project_id)
    return counts_of(agent.pk, agent_id, project_id)


def _last_added(agent_pk: int, project_id: str) -> datetime | None:
    """When the newest case was added (retired or not): one step down the list index."""
    return sql().execute(_LAST_ADDED, {"agent_pk": agent_pk, "project_id": project_id}).scalar()


def overview(caller: Principal) -> list[Counts]:
    """Every agent and project pair the caller can read, with its counts; busiest first.

    One query finds the pairs, one reads all their tallies, one index step per pair finds
    when its newest case was added, and one query their newest test runs, so hundreds of pairs
    cost milliseconds.
    """
    pairs = (
        select(Agent.pk, Agent.id, Project.id, Project.name)
        .join(AgentProject, AgentProject.agent_pk == Agent.pk)
        .join(Project, Project.id == AgentProject.project_id)
        .where(Agent.tenant_id == caller.tenant_id)
    )
    if not caller.admin:
        pairs = pairs.where(
            Project.id.in_(
                select(Grant.project_id).where(
                    Grant.principal_kind == caller.kind,
                    Grant.principal_id == caller.id,
                    Grant.permission == "read",
                )
            )
        )
    rows: dict[tuple[int, str], Counts] = {
        (pk, pid): Counts(agent_id, pid, project_name=name)
        for pk, agent_id, pid, name in db.session.execute(pairs)
    }
    if rows:
        agent_pks = {pk for pk, _ in rows}
        for cell in db.session.scalars(select(Tally).where(Tally.agent_pk.in_(agent_pks))):
            counts = rows.get((cell.agent_pk, cell.project_id))
            if counts is not None:
                counts.add(cell)
        for (pk, pid), counts in rows.items():
            counts.last_added_at = _last_added(pk, pid)
        for pair, run in last_runs(list(rows)).items():
            rows[pair].last_run = run
    by_name = sorted(rows.values(), key=lambda c: (c.agent_id, c.project_name))
    return sorted(by_name, key=lambda c: c.last_added_at or datetime.min, reverse=True)
