"""Triage from a test run: what an expert revised or retired on a run's page names the run
(`case_revisions.from_test_run`, `cases.retired_from_test_run`), and the run says who did what
from it ("3 revised, 1 retired by ana").

Only a run that graded the case can be named: the expert saw the case fail there. Counting a
run's triage reads its rows down two partial indexes, whatever the set's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import exists, func, select

from ..database import db
from ..errors import TestRunNotFound, bad_input
from ..models import Case, CaseRevision, RunCase, TestRun


def graded_by(case: Case, run_id: str) -> str:
    """`run_id`, once it names a test run of the case's agent in its tenant (else 404
    `test-run-not-found`) that graded the case (else 400 naming `fromTestRun`)."""
    found = db.session.execute(
        select(
            TestRun.id,
            exists().where(RunCase.run_pk == TestRun.pk, RunCase.case_id == case.id),
        ).where(
            TestRun.id == run_id,
            TestRun.agent_pk == case.agent_pk,
            TestRun.tenant_id == case.tenant_id,
        )
    ).first()
    if found is None:
        raise TestRunNotFound()
    if not found[1]:
        raise bad_input({"fromTestRun": ["Not a test run that graded this case."]})
    return run_id


@dataclass
class TriageDone:
    """What one person did from a run: how many cases they revised and retired there."""

    by: dict[str, str]
    revised: int = 0
    retired: int = 0


def triage_of(run_id: str) -> list[TriageDone]:
    """Who revised or retired cases from this run, and how many each (a case revised twice
    counts once; a case since restored no longer counts as retired), in the order of who did
    most."""
    done: dict[tuple[str, str], TriageDone] = {}
    cases = func.count(CaseRevision.case_id.distinct())
    revised = (
        select(CaseRevision.by_kind, CaseRevision.by_id, cases)
        .where(CaseRevision.from_test_run == run_id)
        .group_by(CaseRevision.by_kind, CaseRevision.by_id)
    )
    for kind, ident, n in db.session.execute(revised):
        done.setdefault((kind, ident), TriageDone({"kind": kind, "id": ident})).revised = n
    retired = (
        select(Case.retired_by_kind, Case.retired_by_id, func.count())
        .where(Case.retired_from_test_run == run_id)
        .group_by(Case.retired_by_kind, Case.retired_by_id)
    )
    for kind, ident, n in db.session.execute(retired):
        done.setdefault((kind, ident), TriageDone({"kind": kind, "id": ident})).retired = n
    return sorted(done.values(), key=lambda d: (-(d.revised + d.retired), d.by["id"]))
