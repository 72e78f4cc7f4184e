"""What the runs inbox reads: a page of an agent's runs in a project with the filters' choices,
and one run with the cases made from it. Experts go through the runs there and make cases from
those that went wrong (or right)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, select

from ..errors import RunNotFound
from ..models import NOT_CASE_STATUSES, Agent, Case, Run
from .access import find_agent, grants, readable
from .common import sql
from .corrections import case_refusal
from .identity import Principal
from .paging import Page
from .runs import RUN_COLUMNS, runs_of, tools_of_runs


@dataclass
class InboxView:
    """A page of runs, whether the caller may add cases there, and (for the whole page, not a
    "Load more") the versions and tools to filter by."""

    page: Page
    may_publish: bool
    versions: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)

    def may_make_case(self, run: Any) -> bool:
        """Whether the page offers to add a case from this run of the list."""
        return self.may_publish and case_refusal(run) is None


_VERSIONS = select(Agent.versions).where(Agent.pk == bindparam("agent_pk"))


def inbox_page(
    caller: Principal, agent_id: str, project_id: str, *, with_choices: bool, **filters: Any
) -> InboxView:
    """The runs inbox's content: a page of the runs, newest first, filtered as the API's list
    is (`runs.runs_of`)."""
    agent, may = readable(caller, agent_id, project_id)
    view = InboxView(runs_of(caller, agent, project_id, **filters), may.may_publish)
    if with_choices:
        view.versions = list(sql().scalar(_VERSIONS, {"agent_pk": agent.pk}) or [])
        view.tools = tools_of_runs(agent.pk, project_id)
    return view


@dataclass
class MadeCase:
    """A case or correction made from a run, as the run page lists it."""

    id: str
    kind: str
    status: str | None
    retired: bool
    added_at: Any

    @property
    def is_case(self) -> bool:
        """A won't-fix or removed correction is no case: it has no page."""
        return self.status not in NOT_CASE_STATUSES


@dataclass
class RunWithCases:
    """One run, the cases made from it (the newest MAX_CASES_SHOWN, and whether there are
    more), and whether the caller may add a case from it (else `refusal` says why not)."""

    run: Any
    agent_id: str
    cases: list[MadeCase]
    more_cases: bool
    may_publish: bool

    @property
    def refusal(self) -> str | None:
        """Why no case may be made from the run, said as the API says it; None when one may."""
        refused = case_refusal(self.run)
        return refused.message if refused else None

    @property
    def may_make_case(self) -> bool:
        return self.may_publish and self.refusal is None


MAX_CASES_SHOWN = 50
_RUN = select(*RUN_COLUMNS).where(Run.id == bindparam("run"), Run.agent_pk == bindparam("agent_pk"))
_MADE = (
    select(Case.id, Case.kind, Case.status, Case.retired_at.is_not(None), Case.added_at)
    .where(Case.run_id == bindparam("run"))
    .order_by(Case.added_at.desc(), Case.id.desc())
    .limit(MAX_CASES_SHOWN + 1)
)


def run_with_cases(caller: Principal, agent_id: str, run_id: str) -> RunWithCases:
    """One of the agent's runs with the cases made from it; 404 `agent-not-found` or
    `run-not-found` (another agent's or tenant's run too), then 403 without `read` on its
    project."""
    agent = find_agent(caller, agent_id)
    run = None
    if "\x00" not in run_id:  # a NUL no database compares: no such run
        run = sql().execute(_RUN, {"run": run_id, "agent_pk": agent.pk}).first()
    if run is None:
        raise RunNotFound()
    may = grants(caller, agent, run.project_id)
    may.require("read", agent, run.project_id)
    made = [MadeCase(*row) for row in sql().execute(_MADE, {"run": run.id})]
    return RunWithCases(
        run,
        agent.id,
        made[:MAX_CASES_SHOWN],
        len(made) > MAX_CASES_SHOWN,
        may.may_publish,
    )
