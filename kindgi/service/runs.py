"""Runs: recording an agent's runs as the platform reports them, and listing them (the runs
inbox, the API's list, the add-case form's choice of runs).

A run's tools are written beside it (`run_tools`, one row per tool it called) and whether a case
was made from it is kept on it (`has_case`), so the list's `tool` and `hasCase` filters are led
by an index of their own, newest first, at any number of runs. Its words (`search_text`, the
text in its input and output) are written with them and indexed as the cases' are, so `q` finds
whole words on both engines alike (`service.search`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    false,
    func,
    select,
    text,
    true,
)

from ..database import db
from ..errors import AgentNotFound, RunNotFound, RunNotOfAgent, bad_input
from ..models import Agent, Run, RunTool
from . import search
from .access import AgentRef, readable, scope
from .common import clock, dialect, insert_rows, new_id, sql, sqlite_time
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
        "has_case",
    )
)


def tools_called(calls: Any) -> list[str]:
    """The tools a run's calls name, each once, in the order first called."""
    if not isinstance(calls, list):
        return []
    names = (call.get("tool") for call in calls if isinstance(call, dict))
    return list(dict.fromkeys(name for name in names if isinstance(name, str)))


def tool_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The `run_tools` rows of a run (a dict of its columns), for a bulk load; one at a time,
    `save_tools` writes them."""
    return [
        {
            "run_id": run["id"],
            "tool": tool,
            "agent_pk": run["agent_pk"],
            "project_id": run["project_id"],
            "at": run["at"],
        }
        for tool in tools_called(run["calls"])
    ]


def save_tools(*runs: dict[str, Any]) -> None:
    """Keep the runs' `run_tools` rows as their calls and times say, in the transaction that
    stores the runs or changes their calls: every path that does must call it, or the inbox's
    tool filter would miss a run (`kindgi check` names such a run)."""
    ids = [run["id"] for run in runs]
    sql().execute(delete(RunTool).where(RunTool.run_id.in_(ids)))
    sqlite = dialect() == "sqlite"
    rows = [
        (row["run_id"], row["tool"], row["agent_pk"], row["project_id"],
         sqlite_time(row["at"]) if sqlite else row["at"])
        for run in runs
        for row in tool_rows(run)
    ]  # fmt: skip
    insert_rows("INSERT INTO run_tools (run_id, tool, agent_pk, project_id, at)", rows)


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
        search_text=search.run_document(body.get("input"), body.get("output")),
        calls=body.get("calls", []),
        erased=False,
        replay_of=body.get("replayOf"),
        at=clock(),
        has_case=False,
    )
    db.session.add(run)
    db.session.flush()
    save_tools({c.name: getattr(run, c.name) for c in Run.__table__.columns})
    return run


# ---------------------------------------------------------------- the list and its filters

# The filters of the runs list (the service's names), each a condition on a run; `at` is the
# position's time column of the statement (the tool's index leads when `tool` is given)
_CONDITIONS: dict[str, Callable[[Any], ColumnElement[bool]]] = {
    "status": lambda at: Run.status == bindparam("status"),
    "search": lambda at: Run.id.like(bindparam("search"), escape="/"),
    "version": lambda at: Run.version == bindparam("version"),
    # literal true and false, not a parameter: a literal matches `ix_runs_cased`'s condition
    "has_case=true": lambda at: Run.has_case == true(),
    "has_case=false": lambda at: Run.has_case == false(),
    "after": lambda at: at >= bindparam("after", type_=Run.at.type),
    "before": lambda at: at < bindparam("before", type_=Run.at.type),
}


@cache
def _runs_query(
    given: frozenset[str], after: bool, dialect_name: str, how: str | None
) -> Select[Any]:
    """The runs list's statement for one shape of filters (`given`: their names, `has_case`
    with its value; `q` answered `how`, see `search.strategy`), built once."""
    query = select(*RUN_COLUMNS)
    if how == search.DRIVE:
        # led by the words' few matches, sorted: the time's order in a form no index serves,
        # and on SQLite unary + keeps it from the list's index, which it would walk whole
        if dialect_name == "sqlite":
            query = query.where(
                text("+runs.agent_pk = :agent_pk AND +runs.project_id = :project_id")
            )
        else:
            query = query.where(
                Run.agent_pk == bindparam("agent_pk"), Run.project_id == bindparam("project_id")
            )
        if "tool" in given:
            query = query.where(
                exists().where(RunTool.run_id == Run.id, RunTool.tool == bindparam("tool"))
            )
        at, ident = func.coalesce(Run.at, Run.at), Run.id
    elif "tool" in given:
        # led by the tool's own index, newest first: a rare tool's runs are found at once
        query = query.join(RunTool, RunTool.run_id == Run.id).where(
            RunTool.agent_pk == bindparam("agent_pk"),
            RunTool.project_id == bindparam("project_id"),
            RunTool.tool == bindparam("tool"),
        )
        at, ident = RunTool.at, RunTool.run_id
    else:
        query = query.where(
            Run.agent_pk == bindparam("agent_pk"), Run.project_id == bindparam("project_id")
        )
        at, ident = Run.at, Run.id
    # after a cursor, `before` goes without saying (the cursor's run was before it) and would
    # only keep the index from seeking to the cursor: a deep page would walk from `before`
    implied = {"tool", "q", "before"} if after else {"tool", "q"}
    for name in sorted(given - implied):
        query = query.where(_CONDITIONS[name](at))
    if how is not None:
        query = query.where(search.condition(dialect_name, how, search.RUNS))
        if how == search.WALK and dialect_name == "sqlite":
            query = query.add_cte(search.window(after, search.RUNS))
    return newest_first(query, at, ident, after)


def _with_tool(dialect_name: str, how: str) -> str:
    """How a search is answered beside `tool`. Its words' matches lead unless they are very
    many (each checked for the tool, a look-up): their number bounds the cost, where walking
    the tool's runs for a word they rarely say would read all of them (600 ms on SQLite at a
    million runs). Past SQLite's MANY, or PostgreSQL's FEW, the tool's own index leads and
    each of its runs is checked for the words."""
    if how == search.DRIVE or (how == search.WALK and dialect_name == "sqlite"):
        return search.DRIVE
    return search.WALK_PROBING if dialect_name == "sqlite" else search.WALK


def _like(text: str) -> str:
    """A LIKE pattern for `text` anywhere (`/` escapes)."""
    return "%" + re.sub(r"([/%_])", r"/\1", text) + "%"


def _bound(value: Any) -> Any:
    """A filter's value as a cursor's binding keeps it (JSON)."""
    return value.isoformat() if isinstance(value, datetime) else value


def runs_of(
    caller: Principal,
    agent: AgentRef,
    project_id: str,
    *,
    limit: int = 25,
    cursor: str | None = None,
    **filters: Any,
) -> Page:
    """One page of a readable agent's runs in a project, newest first, filtered: `status`,
    `version`, `tool` (it called), `has_case`, `after` (at or after) and `before`, `q` (every
    word of it in the text of the input or output), `search` (in the id). Every filter is
    bound into the cursor."""
    given = {name: value for name, value in filters.items() if value is not None}
    binding = {
        "list": "runs",
        "agent": agent.pk,
        "project": project_id,
        "status": given.get("status", ""),
        "search": given.get("search", ""),
        "caller": caller.scope,
        # the others only when given: a cursor of the plain list keeps its binding
        **{name: _bound(v) for name, v in given.items() if name not in ("status", "search")},
    }
    params = {"agent_pk": agent.pk, "project_id": project_id, **given}
    if "search" in given:
        params["search"] = _like(given["search"])
    name, how = dialect(), None
    if "q" in given:
        params.update(search.parameters(name, given["q"], [], []))
        how = search.strategy(name, params, search.RUNS)
        if "tool" in given:
            how = _with_tool(name, how)
    shape = frozenset(
        f"has_case={'true' if v else 'false'}" if key == "has_case" else key
        for key, v in given.items()
    )
    return keyset_page(
        lambda after: _runs_query(shape, after, name, how), params, limit, cursor, binding
    )


def list_runs(caller: Principal, agent_id: str, project_id: str, **filters: Any) -> Page:
    """One page of the agent's runs in a project, newest first, filtered as `runs_of` says."""
    agent, _ = readable(caller, agent_id, project_id)
    return runs_of(caller, agent, project_id, **filters)


# The tools an agent's runs in a project called, in order: a walk of the tools' index from one
# tool to the next, each step a seek (a "loose index scan"), so a million runs cost what a
# thousand do.
_TOOLS_CALLED = text(
    "WITH RECURSIVE called(tool) AS ("
    " SELECT min(tool) FROM run_tools WHERE agent_pk = :agent_pk AND project_id = :project_id"
    " UNION ALL"
    " SELECT (SELECT min(tool) FROM run_tools WHERE agent_pk = :agent_pk"
    " AND project_id = :project_id AND tool > called.tool)"
    " FROM called WHERE called.tool IS NOT NULL)"
    " SELECT tool FROM called WHERE tool IS NOT NULL LIMIT :limit"
)
MAX_TOOLS = 200  # tools offered at most


def tools_of_runs(agent_pk: int, project_id: str) -> list[str]:
    """The tools the agent's runs in the project called (the first MAX_TOOLS, by name)."""
    params = {"agent_pk": agent_pk, "project_id": project_id, "limit": MAX_TOOLS}
    return list(sql().scalars(_TOOLS_CALLED, params))


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
