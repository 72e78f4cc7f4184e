"""Frozen versions of a test set: what a test run grades against, immutable once made.

Freezing records the set's active cases at its current change; an unchanged set (the change
counter where the newest version left it) reuses that version at the cost of one comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import JSON, Select, and_, bindparam, func, literal, select

from ..database import db
from ..errors import VersionNotFound
from ..models import Case, CaseRevision, Tally, TestSetChanges, TestSetVersion, VersionMember
from .access import AgentRef, readable, scope
from .common import analyze, bulk, clock, dialect, insert_for, sql
from .identity import Principal
from .paging import Page, after_id, id_page, keyset_page


def test_set_id(agent_id: str, project_id: str) -> str:
    return f"agent.{agent_id}.{project_id}"


def version_name(number: int) -> str:
    return f"v{number}"


_NEWEST = (
    select(TestSetVersion)
    .where(
        TestSetVersion.agent_pk == bindparam("agent_pk"),
        TestSetVersion.project_id == bindparam("project_id"),
    )
    .order_by(TestSetVersion.number.desc())
    .limit(1)
)


# A revision a version pinned that is no longer the case's: read from `case_revisions`
_PINNED = CaseRevision.__table__.alias("pinned")


def pinned_expect() -> Any:
    """The expectation a version's member was frozen with: its revision's, or the case's own
    when that is still the case's (a query using it is joined by `as_frozen`)."""
    return func.coalesce(_PINNED.c.expect, Case.expect, type_=JSON)


def as_frozen(query: Select[Any], version_pk: Any, case_id: Any) -> Select[Any]:
    """`query` (over `Case`) joined to each case's membership of a version (`case_id` is the
    column naming the case) and to the revision the version pinned, read only when the case
    has been revised since: `pinned_expect()` is then what the version froze."""
    query = query.join(
        VersionMember,
        and_(VersionMember.version_pk == version_pk, VersionMember.case_id == case_id),
    )
    return query.outerjoin_from(
        Case,
        _PINNED,
        and_(
            VersionMember.revision != Case.revision,
            _PINNED.c.case_id == Case.id,
            _PINNED.c.revision == VersionMember.revision,
        ),
    )


def newest_version(agent_pk: int, project_id: str) -> TestSetVersion | None:
    return db.session.scalar(_NEWEST, {"agent_pk": agent_pk, "project_id": project_id})


@cache
def _lock_changes(dialect_name: str) -> Any:
    """The set's change counter, made if missing and locked for this transaction."""
    stmt = insert_for(dialect_name, TestSetChanges.__table__).values(
        agent_pk=bindparam("agent_pk"), project_id=bindparam("project_id"), changes=0
    )
    return stmt.on_conflict_do_update(
        index_elements=["agent_pk", "project_id"],
        set_={"changes": TestSetChanges.changes},
    ).returning(TestSetChanges.changes)


def freeze(caller: Principal, agent: AgentRef, project_id: str) -> TestSetVersion:
    """The version of the set as it is now: the newest one if nothing changed since, else a new
    one holding every active case. Runs locked on the set's counter, so two freezes at once make
    one version."""
    params = {"agent_pk": agent.pk, "project_id": project_id}
    changes = sql().execute(_lock_changes(dialect()), params).scalar_one()
    newest = newest_version(agent.pk, project_id)
    if newest is not None and newest.at_change == changes:
        return newest
    by = caller.actor
    version = TestSetVersion(
        agent_pk=agent.pk,
        project_id=project_id,
        number=(newest.number if newest else 0) + 1,
        at_change=changes,
        frozen_at=clock(),
        frozen_by_kind=by["kind"],
        frozen_by_id=by["id"],
        total=0,
        expert=0,
    )
    db.session.add(version)
    db.session.flush()
    bulk()
    active = select(literal(version.pk), Case.id, Case.expert, Case.revision, Case.parts).where(
        Case.agent_pk == agent.pk,
        Case.project_id == project_id,
        Case.is_case,
        Case.retired_at.is_(None),
    )
    sql().execute(
        VersionMember.__table__.insert().from_select(
            ["version_pk", "case_id", "expert", "revision", "parts"], active
        )
    )
    version.total, version.expert = sql().execute(_ACTIVE_COUNTS, params).one()
    analyze(VersionMember.__table__, version.total)
    db.session.flush()
    return version


# How many active cases, and expert ones, a set has: from its tallies, not its cases.
_ACTIVE_COUNTS = select(
    func.coalesce(func.sum(Tally.n), 0),
    func.coalesce(func.sum(Tally.n).filter(Tally.expert), 0),
).where(
    Tally.agent_pk == bindparam("agent_pk"),
    Tally.project_id == bindparam("project_id"),
    Tally.retired.is_(False),
)


# ---------------------------------------------------------------- reading versions


_VERSION_COLUMNS = (
    TestSetVersion.frozen_at,
    TestSetVersion.number,
    TestSetVersion.frozen_by_kind,
    TestSetVersion.frozen_by_id,
    TestSetVersion.total,
    TestSetVersion.expert,
)


@cache
def _versions_query(after: bool) -> Select[Any]:
    query = select(*_VERSION_COLUMNS).where(
        TestSetVersion.agent_pk == bindparam("agent_pk"),
        TestSetVersion.project_id == bindparam("project_id"),
    )
    if after:  # newest first by number (frozen_at travels along for the cursor)
        query = query.where(TestSetVersion.number < bindparam("after_id"))
    return query.order_by(TestSetVersion.number.desc()).limit(bindparam("limit"))


def list_versions(
    caller: Principal, agent_id: str, project_id: str, *, limit: int = 25, cursor: str | None = None
) -> tuple[str, Page]:
    """The set's versions, newest first, with the set's id."""
    agent, _ = readable(caller, agent_id, project_id)
    page = keyset_page(
        _versions_query,
        {"agent_pk": agent.pk, "project_id": project_id},
        limit,
        cursor,
        {"list": "versions", "agent": agent.pk, "project": project_id, "caller": caller.scope},
    )
    return test_set_id(agent.id, project_id), page


def find_version(agent_pk: int, project_id: str, name: str) -> TestSetVersion:
    number = int(name[1:]) if name[:1] == "v" and name[1:].isdigit() else 0
    version = db.session.scalar(
        select(TestSetVersion).where(
            TestSetVersion.agent_pk == agent_pk,
            TestSetVersion.project_id == project_id,
            TestSetVersion.number == number,
        )
    )
    if version is None:
        raise VersionNotFound(details={"version": name})
    return version


@dataclass
class VersionDiff:
    """The cases in one version and not the other (`added`), or the reverse (`removed`), and
    those in both whose expectation was revised between them (`changed`)."""

    page: Page
    added: int
    removed: int
    changed: int


def _only_in(one: int, other: int) -> Select[Any]:
    """Members of version `one` that version `other` lacks, with their kind and expert flag."""
    theirs = VersionMember.__table__.alias("theirs")
    return (
        select(VersionMember.case_id, VersionMember.expert, Case.kind)
        .join(Case, Case.id == VersionMember.case_id)
        .where(
            VersionMember.version_pk == one,
            ~select(theirs.c.case_id)
            .where(theirs.c.version_pk == other, theirs.c.case_id == VersionMember.case_id)
            .exists(),
        )
    )


def _revised_between(one: int, other: int) -> Select[Any]:
    """Members of both versions pinned at different revisions, as version `one` has them."""
    theirs = VersionMember.__table__.alias("theirs")
    return (
        select(VersionMember.case_id, VersionMember.expert, Case.kind)
        .join(Case, Case.id == VersionMember.case_id)
        .join(
            theirs,
            and_(theirs.c.version_pk == other, theirs.c.case_id == VersionMember.case_id),
        )
        .where(VersionMember.version_pk == one, theirs.c.revision != VersionMember.revision)
    )


def diff_versions(
    caller: Principal,
    agent_id: str,
    project_id: str,
    version: str,
    other: str,
    *,
    change: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> VersionDiff:
    """Cases added in `version` since `other`, removed from it, and changed (revised) between
    them, by case id, a page at a time; the counts are never filtered."""
    agent, grants = scope(caller, agent_id, project_id)
    mine = find_version(agent.pk, project_id, version)  # what the path names: 404 before 403
    theirs = find_version(agent.pk, project_id, other)
    grants.require("read", agent, project_id)
    changes = {
        "added": _only_in(mine.pk, theirs.pk),
        "removed": _only_in(theirs.pk, mine.pk),
        "changed": _revised_between(mine.pk, theirs.pk),
    }
    counts = {
        name: sql().execute(select(func.count()).select_from(q.subquery())).scalar_one()
        for name, q in changes.items()
    }
    binding = {
        "list": "version-diff",
        "agent": agent.pk,
        "project": project_id,
        "versions": [mine.pk, theirs.pk],
        "change": change or "",
        "caller": caller.scope,
    }
    after = after_id(cursor, binding)
    rows: list[tuple[str, str, str, bool]] = []
    for name, query in changes.items():
        if change and change != name:
            continue
        q = query.where(VersionMember.case_id > after).order_by(VersionMember.case_id)
        rows += [(r.case_id, name, r.kind, r.expert) for r in sql().execute(q.limit(limit + 1))]
    rows.sort()
    return VersionDiff(id_page(rows, limit, binding), **counts)
