"""The cases' stances (`kindgi.stance`) as stored: written for the cases already stored
(migration 0016), and held to their expectations and snapshots by `kindgi check`.

Making and revising a case write its stance with its expectation (`service.corrections`,
`service.revisions`, the world loader); freezing copies each case's parts to its version
membership (`service.versions.freeze`), which keeps them as the revision it pinned had them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, select, update

from .. import stance
from ..models import Case, CaseRevision, Snapshot, VersionMember
from .common import sql

BATCH = 2_000
COLUMNS = list(stance.Stance._fields)

_STORED = [getattr(Case, c) for c in COLUMNS]


def _cases(conn: Connection) -> Iterator[list[Any]]:
    """Every case with its expectation, its snapshot's input and calls and its stored stance,
    a batch at a time in order of id."""
    after = ""
    while True:
        rows = conn.execute(
            select(Case.id, Case.run_id, Case.expect, Snapshot.input, Snapshot.calls, *_STORED)
            .join(Snapshot, Snapshot.run_id == Case.run_id)
            .where(Case.id > after)
            .order_by(Case.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        yield rows
        after = rows[-1].id


def _stances(rows: list[Any], keys: dict[str, str]) -> Iterator[tuple[Any, stance.Stance]]:
    """Each row with the stance its expectation and snapshot give (a run's input's key worked
    out once, kept in `keys` by the run's id)."""
    for row in rows:
        key = keys.get(row.run_id)
        if key is None:
            key = keys[row.run_id] = stance.input_key(row.input)
        yield row, stance.stance(row.expect, key, row.calls)


# The members whose version pinned a revision the case has left, with that revision's expectation
_PINNED = (
    select(VersionMember.version_pk, VersionMember.case_id, VersionMember.parts)
    .add_columns(CaseRevision.expect)
    .join(Case, Case.id == VersionMember.case_id)
    .join(
        CaseRevision,
        and_(CaseRevision.case_id == Case.id, CaseRevision.revision == VersionMember.revision),
    )
    .where(VersionMember.revision != Case.revision)
)


def backfill(conn: Connection) -> None:
    """Write every stored case's stance, and every version member's parts (migration 0016)."""
    write = (
        update(Case)
        .where(Case.id == bindparam("case_id"))
        .values({c: bindparam(c) for c in COLUMNS})
    )
    keys: dict[str, str] = {}
    for rows in _cases(conn):
        found = [{"case_id": row.id, **got._asdict()} for row, got in _stances(rows, keys)]
        conn.execute(write.execution_options(synchronize_session=False), found)
    own = (
        select(Case.parts)
        .where(Case.id == VersionMember.case_id, Case.revision == VersionMember.revision)
        .scalar_subquery()
    )
    conn.execute(update(VersionMember).values(parts=func.coalesce(own, 0)))
    pinned = [
        {"v": row.version_pk, "c": row.case_id, "parts": stance.parts_code(row.expect)}
        for row in conn.execute(_PINNED)
    ]
    if pinned:
        conn.execute(
            update(VersionMember)
            .where(
                VersionMember.version_pk == bindparam("v"),
                VersionMember.case_id == bindparam("c"),
            )
            .values(parts=bindparam("parts")),
            pinned,
        )


def breaches() -> list[str]:
    """Every case whose stored stance is not what its expectation and snapshot give, and every
    version member whose parts are not those of the revision it pinned (`kindgi check`)."""
    conn = sql()
    out = []
    keys: dict[str, str] = {}
    for rows in _cases(conn):
        for row, got in _stances(rows, keys):
            wrong = [c for c in COLUMNS if getattr(row, c) != getattr(got, c)]
            if wrong:
                shown = ", ".join(f"{c} {getattr(row, c)!r} (is {getattr(got, c)!r})"
                                  for c in wrong)  # fmt: skip
                out.append(f"case {row.id}: its stance holds {shown}")
    members = conn.execute(
        select(VersionMember.version_pk, VersionMember.case_id, VersionMember.parts, Case.parts)
        .join(Case, Case.id == VersionMember.case_id)
        .where(VersionMember.revision == Case.revision, VersionMember.parts != Case.parts)
    ).all()
    members += [
        (*row[:3], stance.parts_code(row.expect))
        for row in conn.execute(_PINNED)
        if row.parts != stance.parts_code(row.expect)
    ]
    out += [
        f"version {version_pk}'s case {case_id}: its parts {held} (its revision's are {parts})"
        for version_pk, case_id, held, parts in members
    ]
    return out
