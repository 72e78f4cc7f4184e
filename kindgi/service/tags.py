"""Tagging cases: lower-case labels ("billing", "smoke") that group cases, to list them and to
run a test run on some of them (docs/design.md §4.5).

A case's tags are kept twice, written together: sorted and comma-joined on the case, to show
it, and a row each in `case_tags`, with the case's set and `added_at`, which the cases list's
`tag` filter walks newest first. Tags are no change of the test set: they never make a new
version, and retired cases keep theirs.
"""

from __future__ import annotations

from sqlalchemy import delete

from ..database import db
from ..errors import bad_input
from ..models import Case, CaseTag
from ..schemas.cases import MAX_TAGS
from .cases import publishable_case, publishable_cases
from .common import clock, sql
from .identity import Principal


def tag_case(
    caller: Principal, agent_id: str, case_id: str, add: list[str], remove: list[str]
) -> Case:
    """Add tags to a case and take others off it."""
    case = publishable_case(caller, agent_id, case_id)
    _retag([case], add, remove)
    return case


def tag_cases(
    caller: Principal,
    agent_id: str,
    project_id: str,
    case_ids: list[str],
    add: list[str],
    remove: list[str],
) -> list[Case]:
    """The same for several cases of one test set, active or retired: all of them, or none."""
    cases = publishable_cases(caller, agent_id, project_id, case_ids)
    _retag(cases, add, remove)
    return cases


def tags_of(case: Case) -> set[str]:
    return set(case.tags.split(",")) if case.tags else set()


def _retag(cases: list[Case], add: list[str], remove: list[str]) -> None:
    """Each case's tags with `add` and without `remove`, checked for every case before any is
    written: a case past `MAX_TAGS` is 400 naming it and the tag that would pass the limit."""
    wanted = {case.id: (tags_of(case) | set(add)) - set(remove) for case in cases}
    for case in cases:
        if len(wanted[case.id]) > MAX_TAGS:
            extra = sorted(wanted[case.id] - tags_of(case))[-1]
            said = f"Case {case.id} would have {len(wanted[case.id])} tags with {extra!r}"
            raise bad_input({"add": [f"{said}: at most {MAX_TAGS}."]})
    if remove:  # a case's tags taken off are those of `remove` it had: one IN by one IN
        ids = [case.id for case in cases]
        sql().execute(delete(CaseTag).where(CaseTag.case_id.in_(ids), CaseTag.tag.in_(remove)))
    new = [
        {
            "case_id": case.id,
            "tag": tag,
            "agent_pk": case.agent_pk,
            "project_id": case.project_id,
            "added_at": case.added_at,
        }
        for case in cases
        for tag in sorted(wanted[case.id] - tags_of(case))
    ]
    if new:
        sql().execute(CaseTag.__table__.insert(), new)
    now = clock()
    for case in cases:
        if wanted[case.id] != tags_of(case):
            case.tags = ",".join(sorted(wanted[case.id])) or None
            case.updated_at = now
    db.session.flush()
