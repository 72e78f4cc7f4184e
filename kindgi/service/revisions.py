"""Revising a case's expectation, its revisions, and the expectation a frozen version pinned.

A revision keeps the case (its id, run, counts and place in every comparison) and changes what
it expects; the case's `revision` counts them, 1 at first. A frozen version keeps the revision
each case had (`version_members.revision`), so its runs grade with the expectation they were
frozen with; a revision counts as a change of the set, so the next freeze makes a new version.
The caller names the revision it read (`If-Match` with the case's ETag): two experts revising at
once never overwrite each other unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from .. import stance
from ..database import db
from ..errors import CaseChanged, CaseRetired, IfMatchRequired, NoChange
from ..models import Case, CaseRevision, Snapshot
from . import search
from .cases import CaseView, publishable_case, readable_case, revisable_case
from .common import clock, sql
from .corrections import check_items, expect_of
from .counts import note_change
from .identity import Principal
from .results import ResultView, get_result
from .triage import graded_by


def etag(case: Any) -> str:
    """The case's ETag: the revision of its expectation (a strong one, as If-Match needs)."""
    return f'"r{case.revision}"'


def revise_case(
    caller: Principal,
    agent_id: str,
    case_id: str,
    body: dict[str, Any],
    if_match: str | None,
    from_test_run: str | None = None,
) -> Case:
    """A new expectation for the case (the add-case body, without `runId`) with a `note` saying
    why, given the ETag read: 428 without one, 412 when stale, 409 when the case is retired or
    the expectation is the one it has. `from_test_run` names the run it was revised from (one
    that graded it: `triage.graded_by`)."""
    case = publishable_case(caller, agent_id, case_id)
    if if_match is None:
        raise IfMatchRequired()
    if case.retired_at is not None:
        raise CaseRetired()
    if if_match.strip() not in ("*", etag(case)):
        raise CaseChanged(details={"revision": case.revision})
    expect = expect_of(body)
    if expect == case.expect:
        raise NoChange()
    if from_test_run is not None:
        graded_by(case, from_test_run)
    snapshot = db.session.get(Snapshot, case.run_id)
    assert snapshot is not None  # a case's run keeps its snapshot (`kindgi check`)
    check_items(body.get("items", []), snapshot.output)
    by, now = caller.actor, clock()
    rows = []
    if case.revision == 1:  # its first revision keeps the expectation it was added with
        rows.append(_revision_row(case, 1, case.expect, None, case.added_by, case.added_at))
    rows.append(_revision_row(case, case.revision + 1, expect, body["note"], by, now))
    rows[-1]["from_test_run"] = from_test_run
    sql().execute(CaseRevision.__table__.insert(), rows)
    case.expect, case.revision, case.updated_at = expect, case.revision + 1, now
    for column, value in stance.columns(expect, snapshot.input, snapshot.calls).items():
        setattr(case, column, value)
    case.search_text = search.document(
        search.expect_words(expect), search.run_words(snapshot.input, snapshot.output)
    )
    search.note_tools(
        [
            {"agent_pk": case.agent_pk, "project_id": case.project_id, "tool": tool}
            for tool in set(search.tools_of(expect))
        ]
    )
    note_change(case.agent_pk, case.project_id)
    db.session.flush()
    return case


def _revision_row(
    case: Case,
    revision: int,
    expect: dict[str, Any],
    note: str | None,
    by: dict[str, str],
    at: datetime,
) -> dict[str, Any]:
    return {
        "case_id": case.id,
        "revision": revision,
        "expect": expect,
        "note": note,
        "by_kind": by["kind"],
        "by_id": by["id"],
        "at": at,
        "from_test_run": None,
    }


@dataclass
class Revision:
    """One expectation a case has had: who gave it, when, and why (revision 1 has no note)."""

    revision: int
    expect: dict[str, Any]
    note: str | None
    by: dict[str, str]
    at: datetime
    from_test_run: str | None = None  # the test run it was revised from, on its page


def list_revisions(caller: Principal, agent_id: str, case_id: str) -> tuple[Case, list[Revision]]:
    """The case and each of its revisions, the current one first."""
    case, _ = readable_case(caller, agent_id, case_id)
    rows = db.session.scalars(
        select(CaseRevision)
        .where(CaseRevision.case_id == case.id)
        .order_by(CaseRevision.revision.desc())
    ).all()
    if not rows:
        return case, [Revision(1, case.expect, None, case.added_by, case.added_at)]
    return case, [
        Revision(
            r.revision, r.expect, r.note, {"kind": r.by_kind, "id": r.by_id}, r.at, r.from_test_run
        )
        for r in rows
    ]


@dataclass
class TriageCase:
    """A failing case of a test run, to revise or retire from the run's page: the case as it
    stands, and its result in the run (what the candidate answered)."""

    view: CaseView
    result: ResultView


def triage_case(caller: Principal, agent_id: str, run_id: str, case_id: str) -> TriageCase:
    """A case of a run, for a caller who may publish in its project: 404 for a run or case
    the caller can't see (or a case the run did not have), 403 for a reader."""
    result = get_result(caller, agent_id, run_id, case_id)
    return TriageCase(revisable_case(caller, agent_id, case_id), result)
