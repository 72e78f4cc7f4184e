"""The test-set service: every rule and every state change lives here.

Routes (JSON and HTML) parse a request, call one function here, and dump what it returns.
Functions take the authenticated `Principal`, check tenancy and permissions, change the session
and flush; the request boundary commits (so a change and its Idempotency-Key record commit
together). Another tenant's things look exactly like things that do not exist.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cache
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from flask import current_app
from jsonpointer import EndOfList, JsonPointer, JsonPointerException
from sqlalchemy import (
    DateTime,
    Insert,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.elements import ColumnElement

from . import cursors
from .database import db, is_busy
from .errors import (
    RETRY_AFTER,
    AgentNotFound,
    CaseActive,
    CaseNotFound,
    CaseRetired,
    CorrectionNotFound,
    DatabaseBusy,
    Forbidden,
    Internal,
    ItemNotFound,
    KeyInFlight,
    KeyMismatch,
    NotFound,
    ProjectNotFound,
    ReplayWithheld,
    RunErased,
    RunIsReplay,
    RunNotFinished,
    RunNotFound,
    RunNotOfAgent,
    StoreUnavailable,
    TooManyAttempts,
    Unauthenticated,
    bad_input,
)
from .models import (
    NOT_CASE_STATUSES,
    Agent,
    AgentProject,
    Case,
    Grant,
    Group,
    IdempotencyRecord,
    LoginFailure,
    Project,
    Run,
    Service,
    Snapshot,
    Tally,
    Token,
    User,
)
from .schemas import CASE_FIELDS, rfc3339

log = logging.getLogger("kindgi")
TOKEN_PREFIX = "kgi_"
IDEMPOTENCY_TTL = timedelta(hours=24)
# argon2id at OWASP's recommended minimum (19 MiB, 2 passes, 1 lane): argon2-cffi's default
# (64 MiB a hash) was most of a worker's peak memory. Hashes made with other parameters still
# verify, and are made anew at the next sign-in.
_hasher = PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)


def clock() -> datetime:
    """Now, naive UTC to the millisecond (what is stored is what is shown)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(10)}"


# ---------------------------------------------------------------- who calls


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: a user (session or personal token) or a service's token."""

    kind: str  # user | service
    id: str  # the user's or the service's id
    tenant_id: str
    admin: bool = False
    token_id: str | None = None
    name: str = ""

    @property
    def scope(self) -> str:
        """Whose Idempotency-Keys and cursors these are: the principal, whichever token."""
        return f"{self.kind}:{self.id}"

    @property
    def actor(self) -> dict[str, str]:
        """Who did it, as recorded: a user's id, or for a service the token's public id."""
        if self.kind == "service":
            return {"kind": "service", "id": self.token_id or self.id}
        return {"kind": "user", "id": self.id}

    # Flask-Login's user interface, for browser sessions
    is_authenticated = True
    is_active = True
    is_anonymous = False

    def get_id(self) -> str:
        return self.id


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def _sql() -> Connection:
    """The request's connection, in the session's transaction: reads that need no ORM objects
    run on it as prebuilt Core statements, several times cheaper than ORM queries."""
    return db.session.connection()


def _dialect() -> str:
    """The session's database, "sqlite" or "postgresql": the prebuilt statements of each."""
    return db.session.get_bind().dialect.name


# The token with its user or service: one query, built once.
_TOKEN_QUERY = (
    select(
        Token.id,
        Token.tenant_id,
        Token.principal_kind,
        Token.principal_id,
        Token.revoked_at,
        Token.expires_at,
        func.coalesce(User.tenant_id, Service.tenant_id).label("principal_tenant"),
        func.coalesce(User.name, Service.name).label("principal_name"),
        User.admin,
    )
    .outerjoin(User, and_(Token.principal_kind == "user", User.id == Token.principal_id))
    .outerjoin(Service, and_(Token.principal_kind == "service", Service.id == Token.principal_id))
    .where(Token.secret_hash == bindparam("secret_hash"))
)


def authenticate(authorization: str | None) -> Principal:
    """The principal behind `Authorization: Bearer kgi_…`; 401 alike for every kind of bad token."""
    scheme, _, secret = (authorization or "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        raise Unauthenticated()
    row = _sql().execute(_TOKEN_QUERY, {"secret_hash": hash_secret(secret)}).first()
    if (
        row is None
        or row.revoked_at is not None
        or (row.expires_at is not None and row.expires_at <= clock())
        or row.principal_tenant != row.tenant_id  # None too: the user or service is gone
    ):
        raise Unauthenticated()
    admin = row.principal_kind == "user" and bool(row.admin)
    return Principal(
        row.principal_kind, row.principal_id, row.tenant_id, admin, row.id, row.principal_name
    )


def user_principal(user_id: str) -> Principal | None:
    """The principal of a signed-in browser session."""
    user = db.session.get(User, user_id)
    if user is None:
        return None
    return Principal("user", user.id, user.tenant_id, user.admin, None, user.name)


LOGIN_WINDOW = timedelta(minutes=15)
LOGIN_MAX_FAILURES = 10


def sign_in(email: str, password: str) -> Principal | None:
    """The user with this email and password, or None alike for a wrong email or password.

    At most 10 failures per email in 15 minutes, counted in the database so the limit holds
    across workers and hosts; unknown emails are counted alike, so the limit tells nothing.
    Each try is recorded as a failure before the (slow) password check, under a lock on that
    email, so simultaneous guesses can't slip past the limit; a success clears them.
    """
    email = email.strip().lower().replace("\x00", "")  # no stored email has a NUL
    key = hash_secret("login\0" + email)
    now = clock()
    if _dialect() == "postgresql":  # SQLite: the write lock serializes
        db.session.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))
    failures = db.session.scalar(
        select(func.count()).where(
            LoginFailure.email_key == key, LoginFailure.at > now - LOGIN_WINDOW
        )
    )
    if failures >= LOGIN_MAX_FAILURES:
        raise TooManyAttempts(headers={"Retry-After": str(int(LOGIN_WINDOW.total_seconds()))})
    db.session.add(LoginFailure(email_key=key, at=now))
    user = db.session.execute(
        select(User.id, User.password_hash).where(User.email == email)
    ).first()
    commit()  # the try is counted, and the lock released, before the slow password check
    try:
        if user is None or not user.password_hash:
            _hasher.verify(_DUMMY_HASH, password)  # same work either way
            return None
        _hasher.verify(user.password_hash, password)
    except (VerificationError, InvalidHashError):
        return None
    db.session.execute(delete(LoginFailure).where(LoginFailure.email_key == key))
    if _hasher.check_needs_rehash(user.password_hash):
        db.session.get(User, user.id).password_hash = _hasher.hash(password)
    return user_principal(user.id)


_DUMMY_HASH = _hasher.hash("not a password anyone has")


# ---------------------------------------------------------------- tenancy and permissions


@dataclass(frozen=True)
class AgentRef:
    """An agent as rules need it: its key and its id (the tenant's own name for it)."""

    pk: int
    id: str


_AGENT = select(Agent.pk, Agent.id).where(
    Agent.tenant_id == bindparam("tenant"), Agent.id == bindparam("agent")
)


def _agent(caller: Principal, agent_id: str) -> AgentRef:
    row = _sql().execute(_AGENT, {"tenant": caller.tenant_id, "agent": agent_id}).first()
    if row is None:
        raise AgentNotFound()
    return AgentRef(*row)


def _serving_project(agent: AgentRef, project_id: str) -> str:
    """The project, if it serves the agent; else 404 `project-not-found`."""
    served = db.session.scalar(
        select(AgentProject.project_id).where(
            AgentProject.agent_pk == agent.pk, AgentProject.project_id == project_id
        )
    )
    if served is None:
        raise ProjectNotFound()
    return served


# The agent, whether the project serves it, and whether the caller may read there: one query.
_READ_SCOPE = (
    select(
        Agent.pk,
        AgentProject.project_id,
        exists()
        .where(
            Grant.principal_kind == bindparam("kind"),
            Grant.principal_id == bindparam("principal"),
            Grant.permission == "read",
            Grant.project_id == bindparam("project"),
        )
        .label("may_read"),
    )
    .outerjoin(
        AgentProject,
        and_(AgentProject.agent_pk == Agent.pk, AgentProject.project_id == bindparam("project")),
    )
    .where(Agent.tenant_id == bindparam("tenant"), Agent.id == bindparam("agent"))
)


def _readable(caller: Principal, agent_id: str, project_id: str) -> int:
    """The agent's key, once the project serves it and the caller may read there; else 404
    `agent-not-found`, 404 `project-not-found` or 403, in that order (as `_agent`,
    `_serving_project` and `_require_read` answer)."""
    row = (
        _sql()
        .execute(
            _READ_SCOPE,
            {
                "tenant": caller.tenant_id,
                "agent": agent_id,
                "project": project_id,
                "kind": caller.kind,
                "principal": caller.id,
            },
        )
        .first()
    )
    if row is None:
        raise AgentNotFound()
    if row.project_id is None:
        raise ProjectNotFound()
    if not (caller.admin or row.may_read):
        raise Forbidden(details={"needs": [{"permission": "read", "project": project_id}]})
    return row.pk


def _projects_of(agent: AgentRef) -> list[str]:
    return list(
        db.session.scalars(select(AgentProject.project_id).where(AgentProject.agent_pk == agent.pk))
    )


def _has(
    caller: Principal, permission: str, *, project: str | None = None, agent: AgentRef | None = None
) -> bool:
    if caller.admin:
        return True
    target = Grant.project_id == project if project is not None else Grant.agent_pk == agent.pk
    return (
        db.session.scalar(
            select(Grant.id)
            .where(
                Grant.principal_kind == caller.kind,
                Grant.principal_id == caller.id,
                Grant.permission == permission,
                target,
            )
            .limit(1)
        )
        is not None
    )


def _require(caller: Principal, needs: list[tuple[str, str, Any]]) -> None:
    """403 `forbidden` naming every permission in `needs` the caller lacks."""
    missing = []
    for permission, on, target in needs:
        ok = (
            _has(caller, permission, project=target)
            if on == "project"
            else _has(caller, permission, agent=target)
        )
        if not ok:
            missing.append({"permission": permission, on: target if on == "project" else target.id})
    if missing:
        raise Forbidden(details={"needs": missing})


def _require_read(caller: Principal, project_id: str) -> None:
    _require(caller, [("read", "project", project_id)])


def _require_publish(caller: Principal, agent: AgentRef, project_id: str) -> None:
    """Publish on the agent, read on the case's project, and write there too when the agent
    is served by more than one project."""
    if caller.admin:
        return  # an admin may do everything: no need to count the agent's projects
    needs: list[tuple[str, str, Any]] = [
        ("publish", "agent", agent),
        ("read", "project", project_id),
    ]
    if len(_projects_of(agent)) > 1:
        needs.append(("write", "project", project_id))
    _require(caller, needs)


def permissions(caller: Principal, agent_id: str, project_id: str) -> dict[str, bool]:
    """What the caller may do in one test set, so pages offer only what the server allows."""
    agent = _agent(caller, agent_id)
    project_id = _serving_project(agent, project_id)
    try:
        _require_publish(caller, agent, project_id)
        publish = True
    except Forbidden:
        publish = False
    return {"read": _has(caller, "read", project=project_id), "publish": publish}


# ---------------------------------------------------------------- counts


def _is_case() -> ColumnElement[bool]:
    """Rows that are cases: hand cases, and corrections not won't-fix or removed.

    Spelt as `!=` terms, not `NOT IN`: an expanding IN is re-rendered at every execution."""
    return or_(Case.status.is_(None), and_(*(Case.status != s for s in NOT_CASE_STATUSES)))


def week_of(at: datetime) -> date:
    """The Monday of the week `at` falls in: the unit of the overview's chart."""
    day = at.date()
    return day - timedelta(days=day.weekday())


TALLY_KEY = ("agent_pk", "project_id", "week", "kind", "retired", "expert")


def _insert(dialect: str, table: Any) -> Any:
    """The dialect's INSERT (it has ON CONFLICT), for prebuilt statements."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


@cache
def _tally_upsert(dialect: str) -> Any:
    """`INSERT … ON CONFLICT DO UPDATE SET n = n + :n`, built once per dialect."""
    stmt = _insert(dialect, Tally.__table__).values(
        {name: bindparam(name) for name in (*TALLY_KEY, "n")}
    )
    return stmt.on_conflict_do_update(
        index_elements=list(TALLY_KEY), set_={"n": Tally.n + stmt.excluded.n}
    )


def _tally(case: Case, delta: int, retired: bool | None = None) -> None:
    """Move the case's cell of its test set's counts by `delta`, atomically (the cell of its
    retired state, unless `retired` names the other)."""
    _sql().execute(
        _tally_upsert(_dialect()),
        {
            "agent_pk": case.agent_pk,
            "project_id": case.project_id,
            "week": week_of(case.added_at),
            "kind": case.kind,
            "retired": case.retired_at is not None if retired is None else retired,
            "expert": bool(case.expert),
            "n": delta,
        },
    )


def _tally_retirement(case: Case, retiring: bool) -> None:
    """Move one count between the active and the retired cell, always the active cell first,
    so a retire and a restore running at once lock the cells in the same order: no deadlock."""
    _tally(case, -1 if retiring else +1, retired=False)
    _tally(case, +1 if retiring else -1, retired=True)


def rebuild_tallies() -> None:
    """Recount every test set from its cases (after a bulk load): by day in SQL, then by week."""
    db.session.execute(Tally.__table__.delete())
    retired = Case.retired_at.is_not(None)
    day = func.date(Case.added_at)
    cells: dict[tuple[Any, ...], int] = {}
    for a, p, d, k, r, e, n in db.session.execute(
        select(Case.agent_pk, Case.project_id, day, Case.kind, retired, Case.expert, func.count())
        .where(_is_case())
        .group_by(Case.agent_pk, Case.project_id, day, Case.kind, retired, Case.expert)
    ):
        week = week_of(datetime.fromisoformat(str(d)))
        key = (a, p, week, k, bool(r), bool(e))
        cells[key] = cells.get(key, 0) + n
    rows = [
        dict(
            zip(("agent_pk", "project_id", "week", "kind", "retired", "expert"), key, strict=True),
            n=n,
        )
        for key, n in cells.items()
    ]
    if rows:
        db.session.execute(Tally.__table__.insert(), rows)


@dataclass
class Counts:
    """A test set's counts: the API's active/retired, and the overview's breakdown."""

    agent_id: str
    project_id: str
    project_name: str = ""
    active: int = 0
    retired: int = 0
    correction: int = 0
    hand: int = 0
    expert: int = 0
    last_added_at: datetime | None = None
    weekly: dict[date, int] = field(default_factory=dict)  # cases added, by week

    def add(self, cell: Tally) -> None:
        self.weekly[cell.week] = self.weekly.get(cell.week, 0) + cell.n
        if cell.retired:
            self.retired += cell.n
            return
        self.active += cell.n
        self.expert += cell.n if cell.expert else 0
        if cell.kind == "hand":
            self.hand += cell.n
        else:
            self.correction += cell.n

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "agentId": self.agent_id,
            "projectId": self.project_id,
            "cases": {"active": self.active, "retired": self.retired},
        }
        if self.last_added_at is not None:
            out["lastAddedAt"] = self.last_added_at
        return out


def test_set(caller: Principal, agent_id: str, project_id: str) -> Counts:
    """How many cases the agent's test set has in the project, exact as of now."""
    agent_pk = _readable(caller, agent_id, project_id)
    params = {"agent_pk": agent_pk, "project_id": project_id}
    counts = Counts(agent_id, project_id)
    for retired, n in _sql().execute(_TOTALS, params):
        if retired:
            counts.retired = n
        else:
            counts.active = n
    counts.last_added_at = _last_added(agent_pk, project_id)
    return counts


# A test set's active and retired totals, summed in the database over its few count cells.
_TOTALS = (
    select(Tally.retired, func.sum(Tally.n))
    .where(Tally.agent_pk == bindparam("agent_pk"), Tally.project_id == bindparam("project_id"))
    .group_by(Tally.retired)
)
_LAST_ADDED = (
    select(Case.added_at)
    .where(
        Case.agent_pk == bindparam("agent_pk"),
        Case.project_id == bindparam("project_id"),
        _is_case(),
    )
    .order_by(Case.added_at.desc())
    .limit(1)
)


def _last_added(agent_pk: int, project_id: str) -> datetime | None:
    """When the newest case was added (retired or not): one step down the list index."""
    return _sql().execute(_LAST_ADDED, {"agent_pk": agent_pk, "project_id": project_id}).scalar()


def overview(caller: Principal) -> list[Counts]:
    """Every agent and project pair the caller can read, with its counts; busiest first.

    One query finds the pairs, one reads all their tallies, and one index step per pair finds
    when its newest case was added, so hundreds of pairs cost milliseconds.
    """
    pairs = (
        select(Agent.pk, Agent.id, Project.id, Project.name)
        .join(AgentProject, AgentProject.agent_pk == Agent.pk)
        .join(Project, Project.id == AgentProject.project_id)
        .where(Agent.tenant_id == caller.tenant_id)
    )
    if not caller.admin:
        pairs = pairs.where(
            Project.id.in_(
                select(Grant.project_id).where(
                    Grant.principal_kind == caller.kind,
                    Grant.principal_id == caller.id,
                    Grant.permission == "read",
                )
            )
        )
    rows: dict[tuple[int, str], Counts] = {
        (pk, pid): Counts(agent_id, pid, project_name=name)
        for pk, agent_id, pid, name in db.session.execute(pairs)
    }
    if rows:
        agent_pks = {pk for pk, _ in rows}
        for cell in db.session.scalars(select(Tally).where(Tally.agent_pk.in_(agent_pks))):
            counts = rows.get((cell.agent_pk, cell.project_id))
            if counts is not None:
                counts.add(cell)
        for (pk, pid), counts in rows.items():
            counts.last_added_at = _last_added(pk, pid)
    by_name = sorted(rows.values(), key=lambda c: (c.agent_id, c.project_name))
    return sorted(by_name, key=lambda c: c.last_added_at or datetime.min, reverse=True)


# ---------------------------------------------------------------- lists


@dataclass
class Page:
    items: list[Any]
    has_more: bool
    next_cursor: str | None = None

    def as_json(self, dump: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "data": [dump(item) for item in self.items],
            "hasMore": self.has_more,
        }
        if self.next_cursor:
            out["nextCursor"] = self.next_cursor
        return out


def _keyset_page(
    query: Callable[[bool], Select[Any]],
    params: dict[str, Any],
    limit: int,
    cursor: str | None,
    binding: dict[str, Any],
) -> Page:
    """Newest first by (time, id), resuming strictly after a sealed cursor's position.

    `query(after)` is the list's statement from `_newest_first`; its rows' first two columns
    are their position.
    """
    secret = current_app.config["SECRET_KEY"]
    now = clock().replace(tzinfo=UTC).timestamp()
    params = {**params, "limit": limit + 1}
    if cursor:
        at, ident = cursors.unseal(secret, cursor, binding, now)
        params["after_at"], params["after_id"] = datetime.fromisoformat(at), ident
    rows = _sql().execute(query(bool(cursor)), params).all()
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if has_more:
        at, ident = rows[-1][:2]
        next_cursor = cursors.seal(secret, binding, [at.isoformat(), ident], now)
    return Page(rows, has_more, next_cursor)


def _newest_first(query: Select[Any], at: Any, ident: Any, after: bool) -> Select[Any]:
    """`query` newest first: from the start, or after the position `after_at`, `after_id`."""
    if after:
        query = query.where(
            tuple_(at, ident)
            < tuple_(bindparam("after_at", type_=at.type), bindparam("after_id", type_=ident.type))
        )
    return query.order_by(at.desc(), ident.desc()).limit(bindparam("limit"))


# What a list shows of a case or a run (the position first).
CASE_COLUMNS = tuple(Case.__table__.c[name] for name in CASE_FIELDS)
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
    )
)


@cache
def _cases_query(retired_too: bool, one_kind: bool, after: bool) -> Select[Any]:
    """The cases list's statement for one shape of filters, built once."""
    query = select(*CASE_COLUMNS).where(
        Case.agent_pk == bindparam("agent_pk"),
        Case.project_id == bindparam("project_id"),
        _is_case(),
    )
    if not retired_too:
        query = query.where(Case.retired_at.is_(None))
    if one_kind:
        query = query.where(Case.kind == bindparam("kind"))
    return _newest_first(query, Case.added_at, Case.id, after)


def list_cases(
    caller: Principal,
    agent_id: str,
    project_id: str,
    *,
    include: str | None = None,
    kind: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Page:
    """One page of the test set's cases, newest added first."""
    agent_pk = _readable(caller, agent_id, project_id)
    kinds = sorted(set(kind.split(","))) if kind else ["correction", "hand"]
    binding = {
        "list": "cases",
        "agent": agent_pk,
        "project": project_id,
        "include": include or "",
        "kind": kinds,
        "caller": caller.scope,
    }
    return _keyset_page(
        lambda after: _cases_query(include == "retired", len(kinds) == 1, after),
        {"agent_pk": agent_pk, "project_id": project_id, "kind": kinds[0]},
        limit,
        cursor,
        binding,
    )


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
    return _newest_first(query, Run.at, Run.id, after)


def _like(text: str | None) -> str | None:
    """A LIKE pattern for ids containing `text` literally (`/` escapes)."""
    if text is None:
        return None
    return "%" + re.sub(r"([/%_])", r"/\1", text) + "%"


def list_runs(
    caller: Principal,
    agent_id: str,
    project_id: str,
    *,
    status: str | None = None,
    search: str | None = None,
    limit: int = 25,
    cursor: str | None = None,
) -> Page:
    """One page of the agent's runs in a project, newest first: the runs to pick a case from.

    `search` keeps the runs whose id contains it.
    """
    agent_pk = _readable(caller, agent_id, project_id)
    binding = {
        "list": "runs",
        "agent": agent_pk,
        "project": project_id,
        "status": status or "",
        "search": search or "",
        "caller": caller.scope,
    }
    return _keyset_page(
        lambda after: _runs_query(bool(status), bool(search), after),
        {"agent_pk": agent_pk, "project_id": project_id, "status": status, "search": _like(search)},
        limit,
        cursor,
        binding,
    )


# ---------------------------------------------------------------- one case


@dataclass
class CaseView:
    """A case with what belongs to it when shown alone."""

    case: Case
    snapshot: Snapshot | None
    agent_id: str


def _case(caller: Principal, agent: AgentRef, case_id: str, *, lock: bool = False) -> Case:
    stmt = select(Case).where(
        Case.id == case_id,
        Case.agent_pk == agent.pk,
        Case.tenant_id == caller.tenant_id,
        _is_case(),
    )
    case = db.session.scalar(stmt.with_for_update() if lock else stmt)
    if case is None:
        raise CaseNotFound()
    return case


def get_case(caller: Principal, agent_id: str, case_id: str) -> CaseView:
    """A case with its run's snapshot."""
    agent = _agent(caller, agent_id)
    case = _case(caller, agent, case_id)
    _require_read(caller, case.project_id)
    return CaseView(case, db.session.get(Snapshot, case.run_id), agent.id)


def retire_case(caller: Principal, agent_id: str, case_id: str, reason: str) -> Case:
    """Take a case out of grading; it stays listed with `include=retired`."""
    agent = _agent(caller, agent_id)
    case = _case(caller, agent, case_id, lock=True)
    _require_publish(caller, agent, case.project_id)
    if case.retired_at is not None:
        raise CaseRetired()
    by = caller.actor
    case.retired_reason, case.retired_by_kind, case.retired_by_id = reason, by["kind"], by["id"]
    case.retired_at = case.updated_at = clock()
    _tally_retirement(case, retiring=True)
    db.session.flush()
    return case


def restore_case(caller: Principal, agent_id: str, case_id: str) -> Case:
    """Put a retired case back into grading."""
    agent = _agent(caller, agent_id)
    case = _case(caller, agent, case_id, lock=True)
    _require_publish(caller, agent, case.project_id)
    if case.retired_at is None:
        raise CaseActive()
    case.retired_reason = case.retired_by_kind = case.retired_by_id = case.retired_at = None
    case.updated_at = clock()
    _tally_retirement(case, retiring=False)
    db.session.flush()
    return case


# ---------------------------------------------------------------- adding cases and corrections


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


@dataclass(frozen=True)
class RunRef:
    """A run as making a case from it needs it: no input, output or calls."""

    id: str
    project_id: str
    version: str
    status: str
    erased: bool
    replay_of: str | None


def _agent_and_run(caller: Principal, agent_id: str, run_id: str) -> tuple[AgentRef, RunRef]:
    """The agent and one of its runs; else 404 `agent-not-found`, 404 `run-not-found` or 422
    `run-not-of-agent`, in that order."""
    row = (
        _sql()
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


def _check_run_can_be_case(run: RunRef) -> None:
    if run.replay_of is not None:
        raise RunIsReplay()
    if run.erased:
        raise RunErased()
    if run.status != "finished":
        raise RunNotFinished()


def expect_of(body: dict[str, Any]) -> dict[str, Any]:
    """A correction's body as what a case expects: one part per verdict given."""
    expect: dict[str, Any] = {}
    if "decisions" in body:
        decisions: dict[str, Any] = {"verdict": body["decisions"]}
        if "shouldCall" in body:
            decisions["shouldCall"] = [
                {"tool": c["tool"], "args": c.get("args", {})} for c in body["shouldCall"]
            ]
        if "mustNotCall" in body:
            decisions["mustNotCall"] = list(body["mustNotCall"])
        expect["decisions"] = decisions
    if "answer" in body:
        answer = {"verdict": body["answer"]}
        answer.update({k: body[k] for k in ("shouldSay", "why") if k in body})
        expect["answer"] = answer
    if "items" in body:
        expect["items"] = [dict(item) for item in body["items"]]
    return expect


_MISSING = object()


@cache
def _take_snapshot(dialect: str) -> Insert:
    """A run's first case takes its snapshot and later ones keep it: `INSERT … SELECT … ON
    CONFLICT DO NOTHING`, built once per dialect, so the content never passes through Python."""
    return (
        _insert(dialect, Snapshot.__table__)
        .from_select(
            ["run_id", "input", "output", "calls", "taken_at"],
            select(
                Run.id, Run.input, Run.output, Run.calls, bindparam("now", type_=DateTime)
            ).where(Run.id == bindparam("run")),
        )
        .on_conflict_do_nothing()
    )


_SNAPSHOT_OUTPUT = select(Snapshot.output).where(Snapshot.run_id == bindparam("run"))


def _check_items(items: Iterable[dict[str, Any]], output: Any) -> None:
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
    _sql().execute(_take_snapshot(_dialect()), {"run": run.id, "now": now})
    items = body.get("items", [])
    if any("pointer" in item for item in items):
        _check_items(items, _sql().execute(_SNAPSHOT_OUTPUT, {"run": run.id}).scalar_one())
    by = caller.actor
    values = {
        "tenant_id": caller.tenant_id,
        "agent_pk": agent.pk,
        "project_id": run.project_id,
        "run_id": run.id,
        "made_on": run.version,
        "expect": expect_of(body),
        "added_by_kind": by["kind"],
        "added_by_id": by["id"],
        "added_at": now,
        "updated_at": now,
        **kw,
    }
    _sql().execute(Case.__table__.insert(), values)
    case = Case(**values)
    _tally(case, +1)
    return case


def add_hand_case(caller: Principal, agent_id: str, body: dict[str, Any]) -> Case:
    """A case by hand from a correction's body on one of the agent's finished runs."""
    agent, run = _agent_and_run(caller, agent_id, body["runId"])
    _require_publish(caller, agent, run.project_id)
    _check_run_can_be_case(run)
    return _new_case(caller, agent, run, body, id=new_id("case"), kind="hand", expert=True)


def record_correction(caller: Principal, agent_id: str, run_id: str, body: dict[str, Any]) -> Case:
    """An expert's verdict on a finished run; it is a case while its status keeps it one."""
    agent, run = _agent_and_run(caller, agent_id, run_id)
    _require(caller, [("write", "project", run.project_id)])
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
    agent = _agent(caller, agent_id)
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
    _require(caller, [("write", "project", case.project_id)])
    was_case = case.is_case
    case.status = status
    if was_case != case.is_case:
        _tally(case, +1 if case.is_case else -1)
    db.session.flush()
    return case


# ---------------------------------------------------------------- runs


def record_run(caller: Principal, agent_id: str, body: dict[str, Any]) -> Run:
    """A run of an agent version in a project, as the agent platform reports it."""
    agent = _agent(caller, agent_id)
    project_id = _serving_project(agent, body["projectId"])
    _require(caller, [("write", "project", project_id)])
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


# ---------------------------------------------------------------- tokens


def create_token(caller: Principal, name: str, expires_at: datetime | None) -> tuple[Token, str]:
    """A personal (or service) token; its secret is returned this once and kept only hashed."""
    now = clock()
    if expires_at is not None and expires_at <= now:
        raise bad_input({"expiresAt": ["Must be in the future."]})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = Token(
        id=new_id("tok"),
        tenant_id=caller.tenant_id,
        principal_kind=caller.kind,
        principal_id=caller.id,
        name=name,
        secret_hash=hash_secret(secret),
        created_at=now,
        expires_at=expires_at,
    )
    db.session.add(token)
    db.session.flush()
    return token, secret


# What the tokens list shows of a token (the position first): never its secret's hash.
_TOKEN_COLUMNS = (Token.created_at, Token.id, Token.name, Token.expires_at, Token.revoked_at)


@cache
def _tokens_query(after: bool) -> Select[Any]:
    query = select(*_TOKEN_COLUMNS).where(
        Token.principal_kind == bindparam("kind"), Token.principal_id == bindparam("principal")
    )
    return _newest_first(query, Token.created_at, Token.id, after)


def list_tokens(caller: Principal, *, limit: int = 25, cursor: str | None = None) -> Page:
    """One page of the caller's own tokens, newest first, revoked and expired ones included."""
    return _keyset_page(
        _tokens_query,
        {"kind": caller.kind, "principal": caller.id},
        limit,
        cursor,
        {"list": "tokens", "caller": caller.scope},
    )


def revoke_token(caller: Principal, token_id: str) -> None:
    """Revoke one of the caller's own tokens; others' look like none."""
    token = db.session.get(Token, token_id)
    if token is None or (token.principal_kind, token.principal_id) != (caller.kind, caller.id):
        raise NotFound("No such token of yours.")
    if token.revoked_at is None:
        token.revoked_at = clock()
    db.session.flush()


# ---------------------------------------------------------------- Idempotency-Key


@dataclass(frozen=True)
class StoredAnswer:
    status: int
    content_type: str | None
    location: str | None
    body: bytes


@cache
def _claim(dialect: str) -> Any:
    """A new claim of a key, or nothing where the caller has one already: built once."""
    columns = ("scope", "key", "fingerprint", "created_at", "lease_until")
    return (
        _insert(dialect, IdempotencyRecord.__table__)
        .values({name: bindparam(name) for name in columns})
        .on_conflict_do_nothing()
        .returning(IdempotencyRecord.key)  # a row only if it was claimed now
    )


def claim_key(caller: Principal, key: str, fingerprint: str) -> StoredAnswer | None:
    """Claim `key` for this request (None: go ahead), or the first request's stored answer.

    The claim commits at once in its own transaction, so other processes see it: a second
    request with the key gets 409 in-flight until the first settles or its lease runs out.
    A new key costs one INSERT; only a key seen before is read.
    """
    lease = timedelta(seconds=current_app.config["IDEMPOTENCY_LEASE_SECONDS"])
    claim = {"scope": caller.scope, "key": key, "fingerprint": fingerprint}
    try:
        for _attempt in range(2):
            now = clock()
            claim.update(created_at=now, lease_until=now + lease)
            inserted = _sql().execute(_claim(_dialect()), claim)
            if inserted.first() is not None:
                db.session.commit()
                return None
            rec = db.session.get(IdempotencyRecord, (caller.scope, key), with_for_update=True)
            if rec is None:  # released since: claim it again
                db.session.rollback()
                continue
            if rec.created_at <= now - IDEMPOTENCY_TTL:  # forgotten: a new claim in its place
                rec.fingerprint, rec.created_at, rec.lease_until = fingerprint, now, now + lease
                rec.status = rec.content_type = rec.location = rec.body = None
                rec.withheld, rec.succeeded_at = False, None
                db.session.commit()
                return None
            answer = _answer_for(rec, fingerprint, now, lease)
            db.session.commit()
            return answer
        raise KeyInFlight(headers=RETRY_AFTER)
    except SQLAlchemyError as exc:
        db.session.rollback()
        if is_busy(exc):  # another writer holds the lock: the database is busy, not the store
            raise DatabaseBusy() from exc
        raise StoreUnavailable() from exc


def _answer_for(
    rec: IdempotencyRecord, fingerprint: str, now: datetime, lease: timedelta
) -> StoredAnswer | None:
    if rec.fingerprint != fingerprint:
        raise KeyMismatch()
    if rec.status is None:  # in flight
        if rec.lease_until is not None and rec.lease_until > now:
            raise KeyInFlight(headers=RETRY_AFTER)
        rec.lease_until = now + lease  # the first request died: take its claim over
        return None
    if rec.withheld:
        raise ReplayWithheld(
            details={
                "status": rec.status,
                "succeededAt": rfc3339(rec.succeeded_at),
            }
        )
    return StoredAnswer(rec.status, rec.content_type, rec.location, rec.body or b"")


def settle_key(
    caller: Principal,
    key: str,
    status: int,
    content_type: str | None,
    location: str | None,
    body: bytes,
    withhold: bool,
) -> None:
    """Keep the answer with the key, in the transaction of the change it made."""
    _sql().execute(
        _SETTLE,
        {
            "the_scope": caller.scope,
            "the_key": key,
            "status": status,
            "content_type": content_type,
            "location": location,
            "body": None if withhold else body,
            "withheld": withhold,
            "lease_until": None,
            "succeeded_at": clock() if status < 300 else None,
        },
    )


# The columns to set come from the parameters' names (SQLAlchemy makes the SET clause).
_SETTLE = update(IdempotencyRecord.__table__).where(
    IdempotencyRecord.scope == bindparam("the_scope"),
    IdempotencyRecord.key == bindparam("the_key"),
)


def release_key(caller: Principal, key: str) -> None:
    """Drop a claim whose request changed nothing (401, 5xx): the key may be used again.

    Best effort: if the database can't take even this, the claim's lease runs out instead.
    """
    db.session.rollback()
    try:
        db.session.execute(
            IdempotencyRecord.__table__.delete().where(
                and_(
                    IdempotencyRecord.scope == caller.scope,
                    IdempotencyRecord.key == key,
                    IdempotencyRecord.status.is_(None),
                )
            )
        )
        db.session.commit()
    except SQLAlchemyError:
        db.session.rollback()


# ---------------------------------------------------------------- the unit of work


def commit() -> None:
    """Commit the request's changes: 503 busy if the database can't answer in time, 500 if it
    fails otherwise; either way nothing was changed."""
    try:
        db.session.commit()
    except SQLAlchemyError as exc:
        db.session.rollback()
        if is_busy(exc):
            raise DatabaseBusy() from exc
        log.exception("commit failed")
        raise Internal() from exc
