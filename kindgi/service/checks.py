"""The database's invariants, checked against the rows: what `flask --app app kindgi check` runs
after a restore or an incident.

Each rule reads the tables in one pass (an aggregate or an anti-join), on both engines, and
names every breach it finds; an empty list means the database keeps every promise below.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sqlalchemy import and_, bindparam, exists, func, or_, select, text

from ..database import db
from ..idempotency import TTL
from ..models import (
    CORRECTION_STATUSES,
    Case,
    CaseRevision,
    CaseTag,
    IdempotencyRecord,
    RunCase,
    RunTool,
    Snapshot,
    Tally,
    TestRun,
    TestSetVersion,
    Token,
    VersionMember,
)
from ..models import Run as RunRow
from ..words import are_words
from . import records, runs, search, stances
from .common import clock, dialect
from .counts import TALLY_KEY, recount
from .test_runs import CASE_OUTCOMES, PART_OUTCOMES

# What an id's prefix names (`common.new_id`): the table whose rows it identifies
_BY_PREFIX: dict[str, Any] = {
    "case": Case.id,
    "cor": Case.id,
    "run": RunRow.id,
    "trun": TestRun.id,
    "tok": Token.id,
}
_CHUNK = 500  # ids looked up per query
_WORDS_CHUNK = 5000  # cases whose words are checked per query


def counts() -> list[str]:
    """Every count cell equals a recount of its cases (active, retired, by kind, expert)."""
    kept = {
        tuple(row[:-1]): row[-1]
        for row in db.session.execute(select(*(getattr(Tally, k) for k in TALLY_KEY), Tally.n))
    }
    found = recount()
    breaches = []
    for key in sorted(set(kept) | set(found), key=repr):
        if kept.get(key, 0) != found.get(key, 0):
            cell = dict(zip(TALLY_KEY, map(str, key), strict=True))
            breaches.append(
                f"count cell {cell} holds {kept.get(key, 0)}, its cases number {found.get(key, 0)}"
            )
    return breaches


def snapshots() -> list[str]:
    """Every case (and correction) points at an existing snapshot of its run."""
    orphans = db.session.execute(
        select(Case.id, Case.run_id)
        .outerjoin(Snapshot, Snapshot.run_id == Case.run_id)
        .where(Snapshot.run_id.is_(None))
        .order_by(Case.id)
    )
    return [f"case {case} points at run {run}, which has no snapshot" for case, run in orphans]


def statuses() -> list[str]:
    """A correction has a status, which says whether it is a case (the counts above count it
    exactly then); a hand case has none."""
    wrong = db.session.execute(
        select(Case.id, Case.kind, Case.status)
        .where(
            (
                (Case.kind == "correction")
                & (Case.status.is_(None) | ~Case.status.in_(CORRECTION_STATUSES))
            )
            | ((Case.kind == "hand") & Case.status.is_not(None))
            | Case.kind.not_in(("hand", "correction"))
        )
        .order_by(Case.id)
    )
    return [f"case {case} of kind {kind!r} has status {status!r}" for case, kind, status in wrong]


def search_words() -> list[str]:
    """Every case's words are in the search's own form, each word as `kindgi.words` cuts it
    (cut again, they are themselves: no text stored as it was written, none cut by another
    rule, which the index would hold as words no search finds), and its retire reason's words
    are what `kindgi.words` makes of the reason. (That a case's words are its expectation's
    and run's holds by construction: they are written from both whenever either is.)
    Read a chunk of cases at a time, by id."""
    breaches = []
    for case_id, said, reason, reason_said in _chunked(
        Case.id, Case.search_text, Case.retired_reason, Case.retired_words
    ):
        if said is None or not are_words(said):
            breaches.append(f"case {case_id}: its words are not in the search's form")
        if reason_said != search.reason_words(reason):
            breaches.append(f"case {case_id}: its retire reason's words are not the reason's")
    return breaches


def revisions() -> list[str]:
    """A case at revision 1 keeps no revisions; a revised one keeps every revision from 1 to
    its own, the newest expecting what the case expects; a frozen version pins a revision its
    case has had."""
    kept = (
        select(
            CaseRevision.case_id,
            func.count().label("n"),
            func.max(CaseRevision.revision).label("newest"),
        )
        .group_by(CaseRevision.case_id)
        .subquery()
    )
    breaches = [
        f"case {case_id} is at revision {revision}, and keeps {n or 0} revisions up to {newest}"
        for case_id, revision, n, newest in db.session.execute(
            select(Case.id, Case.revision, kept.c.n, kept.c.newest)
            .outerjoin(kept, kept.c.case_id == Case.id)
            .where(
                or_(
                    and_(Case.revision == 1, kept.c.n.is_not(None)),
                    and_(
                        Case.revision != 1,
                        or_(
                            kept.c.n.is_(None),
                            kept.c.n != Case.revision,
                            kept.c.newest != Case.revision,
                        ),
                    ),
                )
            )
            .order_by(Case.id)
        )
    ]
    newest = select(Case.id, Case.expect, CaseRevision.expect).join(
        CaseRevision,
        and_(CaseRevision.case_id == Case.id, CaseRevision.revision == Case.revision),
    )
    breaches += [
        f"case {case_id} expects other than its revision {revision_expect!r}"
        for case_id, expect, revision_expect in db.session.execute(newest.order_by(Case.id))
        if expect != revision_expect
    ]
    breaches += [
        f"version member {case_id} pins revision {pinned}, and its case is at {revision}"
        for case_id, pinned, revision in db.session.execute(
            select(VersionMember.case_id, VersionMember.revision, Case.revision)
            .join(Case, Case.id == VersionMember.case_id)
            .where(or_(VersionMember.revision < 1, VersionMember.revision > Case.revision))
            .order_by(VersionMember.case_id)
        )
    ]
    return breaches


def tags() -> list[str]:
    """A case's tags as it shows them are its rows in `case_tags`, and each row carries its
    case's test set and `added_at` (what the list's `tag` filter walks by)."""
    kept: dict[str, list[str]] = {}
    for case_id, tag in db.session.execute(
        select(CaseTag.case_id, CaseTag.tag).order_by(CaseTag.case_id, CaseTag.tag)
    ):
        kept.setdefault(case_id, []).append(tag)
    astray = db.session.execute(
        select(CaseTag.case_id, CaseTag.tag)
        .join(Case, Case.id == CaseTag.case_id)
        .where(
            or_(
                CaseTag.agent_pk != Case.agent_pk,
                CaseTag.project_id != Case.project_id,
                CaseTag.added_at != Case.added_at,
            )
        )
        .order_by(CaseTag.case_id, CaseTag.tag)
    )
    breaches = [f"case {case_id}'s tag {tag} is not of its set and time" for case_id, tag in astray]
    for case_id, shown in _chunked(Case.id, Case.tags):
        rows = kept.get(case_id, [])
        if (shown.split(",") if shown else []) != rows:
            breaches.append(f"case {case_id} shows tags {shown!r}, and has {rows}")
    return breaches


def members() -> list[str]:
    """Each version member names a stored version, and a case of that version's test set (what
    foreign keys would hold: members have none, migration 0017)."""
    found = db.session.execute(
        select(VersionMember.version_pk, VersionMember.case_id, TestSetVersion.pk)
        .outerjoin(TestSetVersion, TestSetVersion.pk == VersionMember.version_pk)
        .outerjoin(
            Case,
            and_(
                Case.id == VersionMember.case_id,
                Case.agent_pk == TestSetVersion.agent_pk,
                Case.project_id == TestSetVersion.project_id,
            ),
        )
        .where(or_(TestSetVersion.pk.is_(None), Case.id.is_(None)))
        .order_by(VersionMember.version_pk, VersionMember.case_id)
    )
    return [
        f"version member {case_id} of version {version_pk}: "
        + ("no such version" if version is None else "no such case in its test set")
        for version_pk, case_id, version in found
    ]


def _graded_there(case_id: Any, run_id: Any) -> Any:
    """The test run `run_id` is of the case's agent and tenant, and graded the case."""
    return (
        select(RunCase.case_id)
        .join(TestRun, TestRun.pk == RunCase.run_pk)
        .where(
            TestRun.id == run_id,
            RunCase.case_id == case_id,
            TestRun.agent_pk == Case.agent_pk,
            TestRun.tenant_id == Case.tenant_id,
        )
        .exists()
    )


def triage() -> list[str]:
    """A revision or a retirement made from a test run names a run of the case's agent (and
    tenant) that graded the case; a case retired from a run is retired. Read down the partial
    indexes of the rows that name a run."""
    revised = db.session.execute(
        select(CaseRevision.case_id, CaseRevision.revision, CaseRevision.from_test_run)
        .join(Case, Case.id == CaseRevision.case_id)
        .where(
            CaseRevision.from_test_run.is_not(None),
            ~_graded_there(CaseRevision.case_id, CaseRevision.from_test_run),
        )
        .order_by(CaseRevision.case_id, CaseRevision.revision)
    )
    breaches = [
        f"case {case_id}'s revision {revision} names test run {run}, which did not grade it"
        for case_id, revision, run in revised
    ]
    retired = db.session.execute(
        select(Case.id, Case.retired_from_test_run, Case.retired_at)
        .where(
            Case.retired_from_test_run.is_not(None),
            or_(Case.retired_at.is_(None), ~_graded_there(Case.id, Case.retired_from_test_run)),
        )
        .order_by(Case.id)
    )
    breaches += [
        f"case {case_id} names test run {run} as retired from it, "
        + ("and is active" if at is None else "which did not grade it")
        for case_id, run, at in retired
    ]
    return breaches


def _chunked(ident: Any, *columns: Any) -> Iterator[Any]:
    """Every row of `ident`'s table (its id, then `columns`), read _WORDS_CHUNK at a time by
    id."""
    chunk = (
        select(ident, *columns).where(ident > bindparam("last")).order_by(ident).limit(_WORDS_CHUNK)
    )
    last = ""
    while rows := db.session.execute(chunk, {"last": last}).all():
        yield from rows
        last = rows[-1][0]


def idempotency_answers() -> list[str]:
    """Every kept success that names a thing (its body's `id`) refers to one that exists:
    a key's answer commits with the change it reports, so neither is ever there alone. Only
    while the key is remembered (24 hours): a forgotten one promises nothing, and the run it
    named may since have gone with retention."""
    named: dict[Any, dict[str, str]] = {}  # column -> id -> the key that names it
    for scope, key, body in db.session.execute(
        select(IdempotencyRecord.scope, IdempotencyRecord.key, IdempotencyRecord.body).where(
            IdempotencyRecord.status.between(200, 299),
            IdempotencyRecord.body.is_not(None),
            IdempotencyRecord.created_at > clock() - TTL,
        )
    ):
        thing_id = _id_in(body)
        column = _BY_PREFIX.get(thing_id.split("-", 1)[0]) if thing_id else None
        if column is not None:
            named.setdefault(column, {})[thing_id] = f"{scope} {key}"
    breaches = []
    for column, ids in named.items():
        missing = set(ids) - set(_existing(column, ids))
        breaches += [
            f"Idempotency-Key {ids[i]} answered with {column.table.name} {i}, which does not exist"
            for i in sorted(missing)
        ]
    return breaches


def _id_in(body: bytes) -> str | None:
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    thing_id = answer.get("id") if isinstance(answer, dict) else None
    return thing_id if isinstance(thing_id, str) else None


def _existing(column: Any, ids: Iterable[str]) -> Iterable[str]:
    ids = list(ids)
    for start in range(0, len(ids), _CHUNK):
        yield from db.session.scalars(select(column).where(column.in_(ids[start : start + _CHUNK])))


def run_tallies() -> list[str]:
    """Every test run's tallies equal a recount of its cases' results: by outcome, and each
    part's outcomes."""
    found: dict[int, dict[str, Any]] = {}
    for run_pk, outcome, n in db.session.execute(
        select(RunCase.run_pk, RunCase.outcome, func.count()).group_by(
            RunCase.run_pk, RunCase.outcome
        )
    ):
        found.setdefault(run_pk, {}).setdefault("cases", {})[outcome] = n
    for part in PART_OUTCOMES:
        column = getattr(RunCase, part)
        for run_pk, outcome, n in db.session.execute(
            select(RunCase.run_pk, column, func.count())
            .where(column.is_not(None))
            .group_by(RunCase.run_pk, column)
        ):
            found.setdefault(run_pk, {}).setdefault(part, {})[outcome] = n
    breaches = []
    for run_pk, run_id, tallies in db.session.execute(
        select(TestRun.pk, TestRun.id, TestRun.tallies).order_by(TestRun.id)
    ):
        counted = found.get(run_pk, {})
        cases = counted.get("cases", {})
        expected = {"total": sum(cases.values()), "awaiting": cases.get("awaiting", 0)}
        expected |= {outcome: cases.get(outcome, 0) for outcome in CASE_OUTCOMES}
        kept = (tallies or {}).get("cases", {})
        breaches += _differences(f"test run {run_id}: cases", kept, expected)
        for part, outcomes in PART_OUTCOMES.items():
            kept = (tallies or {}).get("parts", {}).get(part, {})
            expected = {o: counted.get(part, {}).get(o, 0) for o in outcomes}
            breaches += _differences(f"test run {run_id}: {part}", kept, expected)
    return breaches


def _differences(what: str, kept: dict[str, Any], expected: dict[str, int]) -> list[str]:
    return [
        f"{what} {name} is {kept.get(name)}, its results number {n}"
        for name, n in expected.items()
        if kept.get(name) != n
    ]


def runs_cased() -> list[str]:
    """A run is marked made a case (`has_case`) exactly when a case or correction names it:
    the inbox shows the mark, and retention deletes only the runs without it."""
    named = exists().where(Case.run_id == RunRow.id)
    wrong = db.session.execute(
        select(RunRow.id, RunRow.has_case).where(RunRow.has_case != named).order_by(RunRow.id)
    )
    return [
        f"run {run} is marked {'with' if cased else 'without'} a case, and "
        f"{'none' if cased else 'one'} was made from it"
        for run, cased in wrong
    ]


def run_tools() -> list[str]:
    """Each run's `run_tools` rows are the tools its calls name, with the run's agent, project
    and time (the inbox's tool filter reads them, never the calls)."""
    breaches = []
    last = ""
    while True:  # the runs a chunk at a time, by id, each with the tool rows kept for it
        chunk = {
            run.id: run
            for run in db.session.execute(
                select(RunRow.id, RunRow.calls, RunRow.agent_pk, RunRow.project_id, RunRow.at)
                .where(RunRow.id > last)
                .order_by(RunRow.id)
                .limit(_CHUNK)
            )
        }
        if not chunk:
            return breaches
        last = next(reversed(chunk))  # in the database's order
        kept: dict[str, set[str]] = {}
        for row in db.session.scalars(select(RunTool).where(RunTool.run_id.in_(list(chunk)))):
            kept.setdefault(row.run_id, set()).add(row.tool)
            run = chunk[row.run_id]
            if (row.agent_pk, row.project_id, row.at) != (run.agent_pk, run.project_id, run.at):
                breaches.append(f"run {run.id}'s tool {row.tool!r} is kept with another place")
        for run in chunk.values():
            called, have = set(runs.tools_called(run.calls)), kept.get(run.id, set())
            if called != have:
                breaches.append(
                    f"run {run.id} called {sorted(called)}, its tools kept are {sorted(have)}"
                )


def run_words() -> list[str]:
    """Each run's words are those of the text in its input and output (the inbox's `q` finds
    it by them; they change as a trace's spans come), and on SQLite the search index holds no
    run that is gone (retention deletes runs; a trigger takes their words out of the index,
    PostgreSQL's generated column goes with its row). Read a chunk of runs at a time, by id."""
    breaches = [
        f"run {run_id}: its words are not those of its input and output"
        for run_id, input_, output, said in _chunked(
            RunRow.id, RunRow.input, RunRow.output, RunRow.search_text
        )
        if said != search.run_document(input_, output)
    ]
    if dialect() == "sqlite":
        breaches += [
            f"the runs' search index holds row {rowid}, which is no run's"
            for rowid in _indexed_but_gone()
        ]
    return breaches


def _indexed_but_gone() -> list[int]:
    """The rowids SQLite's `run_search` holds words of that no run has (read through an
    `fts5vocab` table of its own, made for the check and dropped after it)."""
    conn = db.session.connection()
    conn.execute(
        text(
            "CREATE VIRTUAL TABLE temp.run_search_rows USING fts5vocab(main, run_search, instance)"
        )
    )
    try:
        return list(
            db.session.scalars(
                text(
                    "SELECT DISTINCT doc FROM temp.run_search_rows "
                    "WHERE doc NOT IN (SELECT rowid FROM runs) ORDER BY doc"
                )
            )
        )
    finally:
        conn.execute(text("DROP TABLE temp.run_search_rows"))


RULES: dict[str, Callable[[], list[str]]] = {
    "counts": counts,
    "snapshots": snapshots,
    "correction statuses": statuses,
    "search words": search_words,
    "case revisions": revisions,
    "case tags": tags,
    "version members": members,
    "triage from test runs": triage,
    "idempotency answers": idempotency_answers,
    "test run tallies": run_tallies,
    "runs made cases": runs_cased,
    "run tools": run_tools,
    "run words": run_words,
    "case records": records.breaches,
    "case stances": stances.breaches,
}


def check() -> dict[str, list[str]]:
    """Every rule's breaches, by rule (an empty list where it holds)."""
    return {name: rule() for name, rule in RULES.items()}
