"""Runs: recording an agent's runs as the platform reports them, and listing them to pick from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import Select, and_, bindparam, select

from ..database import db
from ..errors import AgentNotFound, RunNotFound, RunNotOfAgent, bad_input
from ..models import Agent, Run
from .access import AgentRef, readable, scope
from .common import clock, new_id, sql
from .identity import Principal
from .paging import Page, keyset_page, newest_first

# What a list shows of a run (the position first).
RUN_COLUMNS = tuple(
    Run.__table__.c[name]
    for name in (
        "at",
        "id",
        "project_id",
        "version",
        "status",
        "replay_of",
        "erased",
        "input",
        "output",
        "calls",
        "error",
    )
)


def record_run(caller: Principal, agent_id: str, body: dict[str, Any]) -> Run:
    """A run of an agent version in a project, as the agent platform reports it."""
    agent, grants = scope(caller, agent_id, body["projectId"])
    project_id = body["projectId"]
    grants.require("write", agent, project_id)
    if "replayOf" in body:
        original = db.session.get(Run, body["replayOf"])
        if original is None or original.agent_pk != agent.pk:
            raise bad_input({"replayOf": ["No such run of this agent."]})
    known = db.session.get(Agent, agent.pk)
    if body["version"] not in known.versions:
        known.versions = [*known.versions, body["version"]]
    run = Run(
        id=new_id("run"),
        tenant_id=caller.tenant_id,
        agent_pk=agent.pk,
        project_id=project_id,
        version=body["version"],
        status=body["status"],
        input=body.get("input"),
        output=body.get("output"),
        calls=body.get("calls", []),
        erased=False,
        replay_of=body.get("replayOf"),
        at=clock(),
    )
    db.session.add(run)
    db.session.flush()
    return run


@cache
def _runs_query(one_status: bool, search: bool, after: bool) -> Select[Any]:
    """The runs list's statement for one shape of filters, built once."""
    query = select(*RUN_COLUMNS).where(
        Run.agent_pk == bindparam("agent_pk"), Run.project_id == bindparam("project_id")
    )
    if one_status:
        query = query.where(Run.status == bindparam("status"))
    if search:
        query = query.where(Run.id.like(bindparam("search"), escape="/"))
    return newest_first(query, Run.at, Run.id, after)


def _like(text: str | None) -> str | None:
    """A LIKE pattern for ids containing `text` literally (`/` escapes)."""
    if text is None:
        return None
    return "%" + re.sub(r"([/%_])", r"/\1", text) + "%"


def runs_of(
    caller: Principal,
    agent: AgentRef,
    project_id: str,
    *,
    status: str | None = None,
    search: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Page:
    """One page of a readable agent's runs in a project, newest first; `search` keeps the runs
    whose id contains it."""
    binding = {
        "list": "runs",
        "agent": agent.pk,
        "project": project_id,
        "status": status or "",
        "search": search or "",
        "caller": caller.scope,
    }
    return keyset_page(
        lambda after: _runs_query(bool(status), bool(search), after),
        {"agent_pk": agent.pk, "project_id": project_id, "status": status, "search": _like(search)},
        limit,
        cursor,
        binding,
    )


def list_runs(caller: Principal, agent_id: str, project_id: str, **filters: Any) -> Page:
    """One page of the agent's runs in a project, newest first: the runs to pick a case from."""
    agent, _ = readable(caller, agent_id, project_id)
    return runs_of(caller, agent, project_id, **filters)


# ---------------------------------------------------------------- a run to make a case from


@dataclass(frozen=True)
class RunRef:
    """A run as making a case from it needs it: no input, output or calls."""

    id: str
    project_id: str
    version: str
    status: str
    erased: bool
    replay_of: str | None


# The agent, and the run of the tenant's that a case is to be made from, in one query: none of
# the run's content, which the case's snapshot copies in SQL.
_AGENT_AND_RUN = (
    select(
        Agent.pk,
        Agent.id,
        Run.id.label("run_id"),
        Run.agent_pk.label("run_agent_pk"),
        Run.project_id,
        Run.version,
        Run.status,
        Run.erased,
        Run.replay_of,
    )
    .outerjoin(Run, and_(Run.id == bindparam("run"), Run.tenant_id == Agent.tenant_id))
    .where(Agent.tenant_id == bindparam("tenant"), Agent.id == bindparam("agent"))
)


def agent_and_run(caller: Principal, agent_id: str, run_id: str) -> tuple[AgentRef, RunRef]:
    """The agent and one of its runs; else 404 `agent-not-found`, 404 `run-not-found` or 400
    `run-not-of-agent`, in that order."""
    row = (
        sql()
        .execute(_AGENT_AND_RUN, {"tenant": caller.tenant_id, "agent": agent_id, "run": run_id})
        .first()
    )
    if row is None:
        raise AgentNotFound()
    if row.run_id is None:
        raise RunNotFound()
    if row.run_agent_pk != row.pk:
        raise RunNotOfAgent()
    run = RunRef(row.run_id, row.project_id, row.version, row.status, row.erased, row.replay_of)
    return AgentRef(row.pk, row.id), run


# A finished run of the agent in the project, with what it said and did.
_PICKED_RUN = select(*RUN_COLUMNS).where(
    Run.id == bindparam("run"),
    Run.agent_pk == bindparam("agent_pk"),
    Run.project_id == bindparam("project_id"),
    Run.status == "finished",
)


def new_case_runs(
    caller: Principal, agent_id: str, project_id: str, search: str | None, picked: str | None
) -> tuple[Page, Any]:
    """The finished runs the add-case page offers, once the caller may add a case there, and
    the run picked among them (its row, None when none is or it is no such run): the form
    shows what it said and did, to be taken into the case."""
    agent, grants = scope(caller, agent_id, project_id)
    grants.require("publish", agent, project_id)
    runs = runs_of(caller, agent, project_id, status="finished", search=search, limit=50)
    run = None
    if picked and "\x00" not in picked:  # a NUL no database compares: no such run
        params = {"run": picked, "agent_pk": agent.pk, "project_id": project_id}
        run = sql().execute(_PICKED_RUN, params).first()
    return runs, run
