"""The test set's cases as they stand: listing them, one case with its run, retiring, restoring.

Retiring takes a case out of grading and restoring puts it back; each moves one count between the
active and the retired cell in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Select, Text, bindparam, cast, select

from ..database import db
from ..errors import CaseActive, CaseNotFound, CaseRetired
from ..models import Case, Snapshot, VersionMember
from ..schemas import CASE_FIELDS
from .access import AgentRef, Grants, find_agent, grants, readable
from .common import clock, sql
from .counts import Counts, counts_of, tally_retirements
from .identity import Principal
from .paging import Page, keyset_page, newest_first
from .versions import find_version

# What a list shows of a case, in the order `schemas.case_json` reads it (the position first).
CASE_COLUMNS = tuple(Case.__table__.c[name] for name in CASE_FIELDS)


def _of_the_set(query: Select[Any], retired_too: bool) -> Select[Any]:
    """`query` kept to the cases of one test set (`agent_pk` and `project_id` bound), the
    retired ones too or not."""
    query = query.where(
        Case.agent_pk == bindparam("agent_pk"),
        Case.project_id == bindparam("project_id"),
        Case.is_case,
    )
    return query if retired_too else query.where(Case.retired_at.is_(None))


@cache
def _cases_query(retired_too: bool, one_kind: bool, after: bool) -> Select[Any]:
    """The cases list's statement for one shape of filters, built once."""
    query = _of_the_set(select(*CASE_COLUMNS), retired_too)
    if one_kind:
        query = query.where(Case.kind == bindparam("kind"))
    return newest_first(query, Case.added_at, Case.id, after)


def _cases_of(
    caller: Principal,
    agent: AgentRef,
    project_id: str,
    *,
    include: str | None = None,
    kind: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Page:
    kinds = sorted(set(kind.split(","))) if kind else ["correction", "hand"]
    binding = {
        "list": "cases",
        "agent": agent.pk,
        "project": project_id,
        "include": include or "",
        "kind": kinds,
        "caller": caller.scope,
    }
    return keyset_page(
        lambda after: _cases_query(include == "retired", len(kinds) == 1, after),
        {"agent_pk": agent.pk, "project_id": project_id, "kind": kinds[0]},
        limit,
        cursor,
        binding,
    )


def list_cases(caller: Principal, agent_id: str, project_id: str, **filters: Any) -> Page:
    """One page of the test set's cases, newest added first."""
    agent, _ = readable(caller, agent_id, project_id)
    return _cases_of(caller, agent, project_id, **filters)


@dataclass
class CasesView:
    """What the cases page shows: a page of cases, the counts, and whether the caller may
    publish (add, retire, restore) there."""

    page: Page
    counts: Counts | None
    may_publish: bool


def cases_page(
    caller: Principal, agent_id: str, project_id: str, *, with_counts: bool, **filters: Any
) -> CasesView:
    """The cases page's content, the agent, project and grants looked up once (a "Load more"
    needs no counts)."""
    agent, may = readable(caller, agent_id, project_id)
    page = _cases_of(caller, agent, project_id, **filters)
    counts = counts_of(agent.pk, agent.id, project_id) if with_counts else None
    return CasesView(page, counts, may.may_publish)


# ---------------------------------------------------------------- one case


@dataclass
class CaseView:
    """A case with what belongs to it when shown alone, and what the caller may do with it."""

    case: Case
    snapshot: Snapshot | None
    agent_id: str
    grants: Grants

    @property
    def may_publish(self) -> bool:
        return self.grants.may_publish


def _case(caller: Principal, agent: AgentRef, case_id: str, *, lock: bool = False) -> Case:
    stmt = select(Case).where(
        Case.id == case_id,
        Case.agent_pk == agent.pk,
        Case.tenant_id == caller.tenant_id,
        Case.is_case,
    )
    case = db.session.scalar(stmt.with_for_update() if lock else stmt)
    if case is None:
        raise CaseNotFound()
    return case


def get_case(caller: Principal, agent_id: str, case_id: str) -> CaseView:
    """A case with its run's snapshot."""
    agent = find_agent(caller, agent_id)
    case = _case(caller, agent, case_id)
    may = grants(caller, agent, case.project_id)
    may.require("read", agent, case.project_id)
    return CaseView(case, db.session.get(Snapshot, case.run_id), agent.id, may)


def _publishable(caller: Principal, agent_id: str, case_id: str) -> Case:
    """The case, locked for a change, once the caller may publish in its project."""
    agent = find_agent(caller, agent_id)
    case = _case(caller, agent, case_id, lock=True)
    grants(caller, agent, case.project_id).require("publish", agent, case.project_id)
    return case


def retire_case(caller: Principal, agent_id: str, case_id: str, reason: str) -> Case:
    """Take a case out of grading; it stays listed with `include=retired`."""
    case = _publishable(caller, agent_id, case_id)
    if case.retired_at is not None:
        raise CaseRetired()
    _retire([case], caller, reason)
    return case


def restore_case(caller: Principal, agent_id: str, case_id: str) -> Case:
    """Put a retired case back into grading."""
    case = _publishable(caller, agent_id, case_id)
    if case.retired_at is None:
        raise CaseActive()
    _restore([case])
    return case


def _retire(cases: list[Case], caller: Principal, reason: str) -> None:
    by, now = caller.actor, clock()
    for case in cases:
        case.retired_reason, case.retired_by_kind, case.retired_by_id = reason, by["kind"], by["id"]
        case.retired_at = case.updated_at = now
    tally_retirements(cases, retiring=True)
    db.session.flush()


def _restore(cases: list[Case]) -> None:
    now = clock()
    for case in cases:
        case.retired_reason = case.retired_by_kind = case.retired_by_id = case.retired_at = None
        case.updated_at = now
    tally_retirements(cases, retiring=False)
    db.session.flush()


def _publishable_cases(
    caller: Principal, agent_id: str, project_id: str, case_ids: list[str], *, retired: bool
) -> list[Case]:
    """The named cases of one test set, locked for a change (in id order, so two changes lock
    alike), once the caller may publish there: all of them in the state `retired` says, or a
    refusal naming those that are not (404 for cases the set lacks, then 409)."""
    agent, may = readable(caller, agent_id, project_id)
    cases = db.session.scalars(
        select(Case)
        .where(
            Case.id.in_(case_ids),
            Case.agent_pk == agent.pk,
            Case.project_id == project_id,
            Case.is_case,
        )
        .order_by(Case.id)
        .with_for_update()
    ).all()
    missing = sorted(set(case_ids) - {case.id for case in cases})
    if missing:
        raise CaseNotFound(details={"caseIds": missing})
    may.require("publish", agent, project_id)
    wrong = [case.id for case in cases if (case.retired_at is not None) != retired]
    if wrong:
        raise (CaseActive if retired else CaseRetired)(details={"caseIds": wrong})
    return list(cases)


def retire_cases(
    caller: Principal, agent_id: str, project_id: str, case_ids: list[str], reason: str
) -> list[Case]:
    """Retire several cases of one test set at once: all of them, or none."""
    cases = _publishable_cases(caller, agent_id, project_id, case_ids, retired=False)
    _retire(cases, caller, reason)
    return cases


def restore_cases(
    caller: Principal, agent_id: str, project_id: str, case_ids: list[str]
) -> list[Case]:
    """Restore several retired cases of one test set at once: all of them, or none."""
    cases = _publishable_cases(caller, agent_id, project_id, case_ids, retired=True)
    _restore(cases)
    return cases


# ---------------------------------------------------------------- the whole set, written out

EXPORT_CHUNK = 250  # cases read at a time (a run may hold up to a MiB): streamed, never held


@cache
def _export_query(retired_too: bool, of_version: bool, after: bool) -> Select[Any]:
    """A chunk of the export: the list's columns, then the snapshot's input, output and calls
    as the JSON text stored (written out as they are, never parsed)."""
    raw = [cast(column, Text) for column in (Snapshot.input, Snapshot.output, Snapshot.calls)]
    query = select(*CASE_COLUMNS, *raw).join(Snapshot, Snapshot.run_id == Case.run_id)
    if of_version:  # a version's cases, by case id (the order its members are kept in)
        query = query.join(VersionMember, VersionMember.case_id == Case.id).where(
            VersionMember.version_pk == bindparam("version_pk"),
            VersionMember.case_id > bindparam("after_id"),
        )
        return query.order_by(VersionMember.case_id).limit(bindparam("limit"))
    return newest_first(_of_the_set(query, retired_too), Case.added_at, Case.id, after)


def export_cases(
    caller: Principal,
    agent_id: str,
    project_id: str,
    *,
    include: str | None = None,
    version: str | None = None,
) -> Iterator[Any]:
    """Every case of the test set with its snapshot, read a chunk at a time as it is written
    out: newest first like the list (`include=retired` adds the retired), or a version's
    cases by id (as they stand now, retired or not)."""
    agent, _ = readable(caller, agent_id, project_id)
    params: dict[str, Any] = {"agent_pk": agent.pk, "project_id": project_id}
    params["limit"], params["after_id"] = EXPORT_CHUNK, ""
    if version is not None:
        params["version_pk"] = find_version(agent.pk, project_id, version).pk

    def chunks() -> Iterator[Any]:
        after = False
        while True:
            query = _export_query(include == "retired", version is not None, after)
            rows = sql().execute(query, params).all()
            yield from rows
            if len(rows) < EXPORT_CHUNK:
                return
            after = True
            params["after_at"], params["after_id"] = rows[-1][0], rows[-1][1]

    return chunks()
