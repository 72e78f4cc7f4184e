"""Tenancy and permissions: which agent and project a caller reaches, and what it may do there.

Another tenant's agent looks exactly like one that does not exist. Permissions are grants:
`read`/`write` on a project, `publish` on an agent; an admin may do everything. Publishing (adding,
retiring, restoring a case) needs `publish` on the agent and `read` on the case's project, and
`write` there too when the agent is served by more than one project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Exists, and_, bindparam, exists, func, select
from sqlalchemy.orm import aliased

from ..errors import AgentNotFound, Forbidden, ProjectNotFound
from ..models import Agent, AgentProject, Grant
from .common import sql
from .identity import Principal


@dataclass(frozen=True)
class AgentRef:
    """An agent as rules need it: its key and its id (the tenant's own name for it)."""

    pk: int
    id: str


@dataclass(frozen=True)
class Grants:
    """What a caller may do with one agent in one project."""

    read: bool
    write: bool
    publish: bool  # on the agent
    shared: bool  # the agent is served by more than one project

    @property
    def may_publish(self) -> bool:
        return self.publish and self.read and (self.write or not self.shared)

    def require(self, permission: str, agent: AgentRef, project_id: str) -> None:
        """403 `forbidden` naming every grant `permission` needs here that the caller lacks."""
        needs = [("publish", "agent"), ("read", "project")] if permission == "publish" else []
        if permission == "publish" and self.shared:
            needs.append(("write", "project"))
        needs = needs or [(permission, "project")]
        missing = [
            {"permission": name, on: agent.id if on == "agent" else project_id}
            for name, on in needs
            if not getattr(self, name)
        ]
        if missing:
            raise Forbidden(details={"needs": missing})


ALL = Grants(read=True, write=True, publish=True, shared=False)


def _granted(permission: str, on_agent: bool = False) -> Exists:
    target = Grant.agent_pk == Agent.pk if on_agent else Grant.project_id == bindparam("project")
    return exists().where(
        Grant.principal_kind == bindparam("kind"),
        Grant.principal_id == bindparam("principal"),
        Grant.permission == permission,
        target,
    )


_served = aliased(AgentProject)  # not the scope's own join of it
_SHARED = (
    select(func.count())
    .where(_served.agent_pk == Agent.pk)
    .correlate(Agent)
    .scalar_subquery()
    .label("projects")
)
_GRANT_COLUMNS = (
    _granted("read").label("may_read"),
    _granted("write").label("may_write"),
    _granted("publish", on_agent=True).label("may_publish"),
    _SHARED,
)


def _scope_query(*grants: Any) -> Any:
    """The agent, whether the project serves it, and the grants named: one query."""
    return (
        select(Agent.pk, Agent.id, AgentProject.project_id, *grants)
        .outerjoin(
            AgentProject,
            and_(
                AgentProject.agent_pk == Agent.pk, AgentProject.project_id == bindparam("project")
            ),
        )
        .where(Agent.tenant_id == bindparam("tenant"), Agent.id == bindparam("agent"))
    )


_SCOPE = _scope_query(*_GRANT_COLUMNS)
_ADMINS_SCOPE = _scope_query()  # an admin may do everything: no grant to look up
_GRANTS = select(*_GRANT_COLUMNS).where(Agent.pk == bindparam("agent_pk"))
_AGENT = select(Agent.pk, Agent.id).where(
    Agent.tenant_id == bindparam("tenant"), Agent.id == bindparam("agent")
)


def _params(caller: Principal, project_id: str) -> dict[str, Any]:
    return {"kind": caller.kind, "principal": caller.id, "project": project_id}


def _grants_of(row: Any) -> Grants:
    return Grants(bool(row.may_read), bool(row.may_write), bool(row.may_publish), row.projects > 1)


def find_agent(caller: Principal, agent_id: str) -> AgentRef:
    """The caller's tenant's agent; else 404 `agent-not-found`."""
    row = sql().execute(_AGENT, {"tenant": caller.tenant_id, "agent": agent_id}).first()
    if row is None:
        raise AgentNotFound()
    return AgentRef(*row)


def scope(caller: Principal, agent_id: str, project_id: str) -> tuple[AgentRef, Grants]:
    """The agent, once the project serves it, with the caller's grants there; else 404
    `agent-not-found` or `project-not-found`, in that order."""
    params = {"tenant": caller.tenant_id, "agent": agent_id, **_params(caller, project_id)}
    row = sql().execute(_ADMINS_SCOPE if caller.admin else _SCOPE, params).first()
    if row is None:
        raise AgentNotFound()
    if row.project_id is None:
        raise ProjectNotFound()
    return AgentRef(row.pk, row.id), ALL if caller.admin else _grants_of(row)


def readable(caller: Principal, agent_id: str, project_id: str) -> tuple[AgentRef, Grants]:
    """`scope`, once the caller may read there; else 403 too."""
    agent, grants = scope(caller, agent_id, project_id)
    grants.require("read", agent, project_id)
    return agent, grants


def grants(caller: Principal, agent: AgentRef, project_id: str) -> Grants:
    """The caller's grants for a known agent in one project (an admin's cost nothing)."""
    if caller.admin:
        return ALL
    params = {"agent_pk": agent.pk, **_params(caller, project_id)}
    return _grants_of(sql().execute(_GRANTS, params).one())


def require(caller: Principal, permission: str, agent: AgentRef, project_id: str) -> None:
    """403 unless the caller may do `permission` (read, write, publish) there."""
    grants(caller, agent, project_id).require(permission, agent, project_id)
