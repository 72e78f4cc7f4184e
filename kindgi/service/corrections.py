"""Making cases from runs: experts' corrections (a case while their status keeps them one) and
hand cases. A run's first case takes a snapshot of its content, which later cases share."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from jsonpointer import EndOfList, JsonPointer, JsonPointerException
from sqlalchemy import DateTime, Insert, bindparam, false, select, update

from .. import stance
from ..database import db
from ..errors import (
    CorrectionNotFound,
    DomainError,
    ItemNotFound,
    RunErased,
    RunIsReplay,
    RunNotFinished,
    RunNotFound,
    bad_input,
)
from ..models import Case, Group, Run, Snapshot
from . import search
from .access import AgentRef, find_agent, require
from .common import clock, dialect, insert_for, new_id, sql
from .counts import tally
from .identity import Principal
from .runs import RunRef, agent_and_run

_MISSING = object()


def _entry(call: dict[str, Any]) -> dict[str, Any]:
    """A shouldCall entry as stored: `match` only when it has one, so a case without matchers
    is stored as it always was."""
    entry = {"tool": call["tool"], "args": call.get("args", {})}
    if call.get("match"):
        entry["match"] = call["match"]
    return entry


def expect_of(body: dict[str, Any]) -> dict[str, Any]:
    """A correction's body as what a case expects: one part per verdict given."""
    expect: dict[str, Any] = {}
    if "decisions" in body:
        decisions: dict[str, Any] = {"verdict": body["decisions"]}
        if "shouldCall" in body:
            decisions["shouldCall"] = [_entry(c) for c in body["shouldCall"]]
        if "mustNotCall" in body:
            decisions["mustNotCall"] = list(body["mustNotCall"])
        if body.get("exactly"):
            decisions["exactly"] = True
        expect["decisions"] = decisions
    if "answer" in body:
        answer = {"verdict": body["answer"]}
        answer.update({k: body[k] for k in ("shouldSay", "why") if k in body})
        expect["answer"] = answer
    if "items" in body:
        expect["items"] = [dict(item) for item in body["items"]]
    return expect


def body_of(expect: dict[str, Any]) -> dict[str, Any]:
    """What a case expects as the body that would give it (the inverse of `expect_of`): what
    the revise form starts from."""
    body: dict[str, Any] = {}
    if "decisions" in expect:
        body["decisions"] = expect["decisions"]["verdict"]
        body.update({k: expect["decisions"][k] for k in ("shouldCall", "mustNotCall")
                     if k in expect["decisions"]})  # fmt: skip
    if "answer" in expect:
        body["answer"] = expect["answer"]["verdict"]
        body.update({k: expect["answer"][k] for k in ("shouldSay", "why") if k in expect["answer"]})
    if "items" in expect:
        body["items"] = expect["items"]
    return body


def case_refusal(run: Any) -> DomainError | None:
    """Why no case may be made from this run (anything with its `status`, `erased` and
    `replay_of`), or None: the pages offer "add a case" only where it would be allowed."""
    if run.replay_of is not None:
        return RunIsReplay()
    if run.erased:
        return RunErased()
    if run.status != "finished":
        return RunNotFinished()
    return None


def _check_run_can_be_case(run: RunRef) -> None:
    refusal = case_refusal(run)
    if refusal is not None:
        raise refusal


@cache
def _take_snapshot(dialect_name: str) -> Insert:
    """A run's first case takes its snapshot and later ones keep it: `INSERT … SELECT … ON
    CONFLICT DO NOTHING`, built once per dialect, so the content never passes through Python."""
    return (
        insert_for(dialect_name, Snapshot.__table__)
        .from_select(
            ["run_id", "input", "output", "calls", "taken_at"],
            select(
                Run.id, Run.input, Run.output, Run.calls, bindparam("now", type_=DateTime)
            ).where(Run.id == bindparam("run")),
        )
        .on_conflict_do_nothing()
    )


_SNAPSHOT_CONTENT = select(Snapshot.input, Snapshot.output, Snapshot.calls).where(
    Snapshot.run_id == bindparam("run")
)
# A run's first case marks it made a case, before its snapshot is taken: on PostgreSQL the
# marked row is locked, so retention's delete, which rechecks the mark, waits and spares it
_MARK_CASED = (
    update(Run.__table__)
    .where(Run.id == bindparam("run"), Run.has_case == false())
    .values(has_case=True)
)


_INSERT_CASE = Case.__table__.insert()


def _snapshot(run: RunRef, now: Any) -> Any:
    """The run's snapshot content (input, output, calls). Its first case marks the run and
    takes it; a later case only reads it, one statement instead of three (a snapshot is taken
    only with its run's mark, so a run that has one is marked already)."""
    snapshot = sql().execute(_SNAPSHOT_CONTENT, {"run": run.id}).first()
    if snapshot is not None:
        return snapshot
    sql().execute(_MARK_CASED, {"run": run.id})
    sql().execute(_take_snapshot(dialect()), {"run": run.id, "now": now})
    snapshot = sql().execute(_SNAPSHOT_CONTENT, {"run": run.id}).first()
    if snapshot is None:  # retention deleted the run since it was read
        raise RunNotFound()
    return snapshot


def check_items(items: Iterable[dict[str, Any]], output: Any) -> None:
    """Every item's pointer must point at something in the run's output."""
    for index, item in enumerate(items):
        if "pointer" not in item:
            continue
        try:
            found = JsonPointer(item["pointer"]).resolve(output, _MISSING)
        except JsonPointerException:
            found = _MISSING
        if found is _MISSING or isinstance(found, EndOfList):  # "/-" is past the end
            raise ItemNotFound(
                details={
                    "fields": {
                        f"items.{index}.pointer": ["Resolves to nothing in the run's output."]
                    }
                }
            )


def _new_case(
    caller: Principal, agent: AgentRef, run: RunRef, body: dict[str, Any], **kw: Any
) -> Case:
    """Insert a case (in Core: no unit of work for one row) and count it; the case as a model
    outside the session, for its answer. Its columns are the values given here: a column with
    a Python-side default would read None on it, so every caller passes every column it sets."""
    now = clock()
    snapshot = _snapshot(run, now)
    items = body.get("items", [])
    if any("pointer" in item for item in items):
        check_items(items, snapshot.output)
    by = caller.actor
    expect = expect_of(body)
    values = {
        "tenant_id": caller.tenant_id,
        "agent_pk": agent.pk,
        "project_id": run.project_id,
        "run_id": run.id,
        "made_on": run.version,
        "expect": expect,
        "revision": 1,
        "search_text": search.document(
            search.expect_words(expect), search.run_words(snapshot.input, snapshot.output)
        ),
        "added_by_kind": by["kind"],
        "added_by_id": by["id"],
        "added_at": now,
        "updated_at": now,
        **stance.columns(expect, snapshot.input, snapshot.calls),
        **kw,
    }
    sql().execute(_INSERT_CASE, values)
    search.note_tools(
        [
            {"agent_pk": agent.pk, "project_id": run.project_id, "tool": t}
            for t in set(search.tools_of(expect))
        ]
    )
    case = Case(**values)
    tally(case, +1)
    return case


def add_hand_case(caller: Principal, agent_id: str, body: dict[str, Any]) -> tuple[Case, list[str]]:
    """A case by hand from a correction's body on one of the agent's finished runs, and the
    cases it duplicates: the other active cases of its run expecting the same (by id). A
    duplicate is still added; the caller is told."""
    agent, run = agent_and_run(caller, agent_id, body["runId"])
    require(caller, "publish", agent, run.project_id)
    _check_run_can_be_case(run)
    case = _new_case(caller, agent, run, body, id=new_id("case"), kind="hand", expert=True)
    return case, _duplicates(case)


MAX_DUPLICATES = 100  # an add's answer names at most this many (the first by id)

_SAME_RUN = (
    select(Case.id)
    .where(
        Case.run_id == bindparam("run"),
        Case.expect_key == bindparam("key"),
        Case.id != bindparam("case"),
        Case.is_case,
        Case.retired_at.is_(None),
    )
    .order_by(Case.id)
    .limit(MAX_DUPLICATES)
)


def _duplicates(case: Case) -> list[str]:
    """The first `MAX_DUPLICATES` other active cases of the case's run, by id, whose current
    expectation is the case's: those with its expectation's key (`stance.expect_key`, equal
    for equal JSON values), read down `ix_cases_run_expect` in order, so a run with thousands
    of cases of one expectation costs an add a hundred index entries, no expectation."""
    found = {"run": case.run_id, "key": case.expect_key, "case": case.id}
    return sql().scalars(_SAME_RUN, found).all()  # fetched at once, not row by row


def record_correction(caller: Principal, agent_id: str, run_id: str, body: dict[str, Any]) -> Case:
    """An expert's verdict on a finished run; it is a case while its status keeps it one."""
    agent, run = agent_and_run(caller, agent_id, run_id)
    require(caller, "write", agent, run.project_id)
    _check_run_can_be_case(run)
    restricted = False
    if "group" in body:
        group = db.session.get(Group, body["group"])
        if group is None or group.agent_pk != agent.pk:
            raise bad_input({"group": ["No such group of this agent."]})
        restricted = group.restricted
    return _new_case(
        caller,
        agent,
        run,
        body,
        id=new_id("cor"),
        kind="correction",
        status="open",
        group_id=body.get("group"),
        expert=restricted,
    )


def set_correction_status(
    caller: Principal, agent_id: str, correction_id: str, status: str
) -> Case:
    """Move a correction along; leaving or re-entering the set changes the counts at once."""
    agent = find_agent(caller, agent_id)
    case = db.session.scalar(
        select(Case)
        .where(
            Case.id == correction_id,
            Case.agent_pk == agent.pk,
            Case.kind == "correction",
            Case.tenant_id == caller.tenant_id,
        )
        .with_for_update()
    )
    if case is None:
        raise CorrectionNotFound()
    require(caller, "write", agent, case.project_id)
    was_case = case.is_case
    case.status = status
    if was_case != case.is_case:
        tally(case, +1 if case.is_case else -1)
    db.session.flush()
    return case
