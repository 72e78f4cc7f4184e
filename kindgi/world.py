"""Loading a world file: tenants, people, agents, runs, corrections and cases, all or nothing.

This is the seeding tool behind `flask kindgi load` and `flask kindgi demo`. It writes rows in
bulk, straight through the driver (a million cases in about half a minute), so it checks every
entry itself and names the bad one; the derived state (snapshots, counts) is made by the same
rules the service applies one at a time.
"""

from __future__ import annotations

import heapq
import itertools
import json
import operator
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple

from marshmallow import ValidationError
from sqlalchemy import JSON, DateTime, select, update
from sqlalchemy.exc import IntegrityError

from . import service, stance
from .database import abandon, db
from .errors import DomainError
from .models import (
    CORRECTION_STATUSES,
    Agent,
    AgentProject,
    Case,
    Grant,
    Group,
    Project,
    Run,
    RunTool,
    Service,
    Snapshot,
    Tenant,
    Token,
    User,
)
from .schemas.common import UUID_RE, flatten_errors
from .schemas.common import load as load_body
from .schemas.corrections import CorrectionBody
from .schemas.test_runs import ResultsBody, StartTestRunBody
from .service import runs, search
from .service.common import analyze, bulk

BATCH = 20_000


class WorldError(ValueError):
    """A world file entry that can't be loaded; the message names it."""


def _time(value: Any, where: Where) -> datetime:
    """An RFC 3339 time with a zone, as naive UTC (a datetime passes as it is: the demo's)."""
    if isinstance(value, datetime):
        return value
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError
        return parsed.astimezone(UTC).replace(tzinfo=None)
    except (TypeError, ValueError):
        raise WorldError(f"{where}: not an RFC 3339 time with a zone: {value!r}") from None
    except OverflowError:  # its UTC is before the year 1 or after 9999
        raise WorldError(f"{where}: a time outside the years 1 to 9999 in UTC: {value!r}") from None


# A case as its entry gives it: when it was added, its id, its run's id and its row as the
# driver takes it (`_Loader._case_row`); stored in the order of the first two
_Added = tuple[datetime, str, str, tuple[Any, ...]]
_added = operator.itemgetter(0, 1)


def _need(entry: dict[str, Any], where: Where, *names: str) -> None:
    for name in names:
        if entry.get(name) in (None, ""):
            missing = [n for n in names if entry.get(n) in (None, "")]
            raise WorldError(f"{where}: missing {', '.join(missing)}")


class _Where:
    """Where an entry is in the world, as its errors name it ("cases[3] (case-1)"): made text
    only when an error is, not for each of a million entries."""

    __slots__ = ("entry", "i", "name")

    def __init__(self, name: str, i: int, entry: Any) -> None:
        self.name, self.i, self.entry = name, i, entry

    def __str__(self) -> str:
        entry = self.entry
        named = isinstance(entry, dict) and entry.get("id")
        return f"{self.name}[{self.i}]" + (f" ({entry.get('id')})" if named else "")


Where = str | _Where  # an entry's place, or a place within it ("cases[3] (case-1).retired")


class _Expect(NamedTuple):
    """A case body's expectation, its words, what it gives of a stance and the tools it
    names."""

    expect: dict[str, Any]
    words: str
    own: stance.Own
    tools: list[str]


class _Content(NamedTuple):
    """What of a run its cases' columns are worked out from: its input, output and calls, its
    agent and project, its input's key and its words."""

    input: Any
    output: Any
    calls: Any
    agent_pk: int
    project_id: str
    input_key: str
    words: str


CASE_COLUMNS = 100_000  # the cases' columns kept for the cases after (`_Loader.case_columns`)
# `_Loader._case_row`'s row, a value a column in this order: held to the table's own when a
# load starts, so a column added or moved fails every load at once, never shifts values
_CASE_ROW = (
    "id", "tenant_id", "agent_pk", "project_id", "run_id", "kind", "status", "group_id",
    "made_on", "expect", "revision", "tags", "expert", "added_by_kind", "added_by_id",
    "added_at", "updated_at", "retired_reason", "retired_by_kind", "retired_by_id",
    "retired_at", "retired_from_test_run", "search_text", "retired_words", *stance.Stance._fields,
)  # fmt: skip


class _CaseColumns(NamedTuple):
    """A case's columns its expectation and its run's content give, as the driver takes them:
    its expectation's JSON, its words and its stance (parts to expect_key, in column order)."""

    expect: str
    search_text: str
    stance: tuple[Any, ...]


_Row = dict[str, Any] | tuple[Any, ...]  # a row by column name, or the driver's (`_bulk`)


def _bulk(model: type, rows: Iterable[_Row], *, made: bool = False) -> int:
    """Insert rows in batches straight through the driver: executemany on SQLite, one COPY on
    PostgreSQL.

    Each value is converted as SQLAlchemy would convert it (its type's bind processor), but JSON
    is serialised here once per object, since the demo shares a few hundred body objects among
    a million cases. SQLAlchemy's per-row parameter handling was most of a big load's time.
    `made` rows are tuples in column order already converted (`_driver_values`): the cases',
    whose conversion afterwards, a dict a row, was a tenth of a million-case load.
    On PostgreSQL the rows of all batches go through one COPY, so the server stores a batch
    while the next is made (a COPY a batch made each wait for the other: half a million-case
    load's time): once the first batch is made, making rows must not query the database.
    """
    table = model.__table__
    conn = db.session.connection()
    pending = iter(rows) if made else _converted(rows, table, conn.dialect)

    def batches() -> Iterator[list[Any]]:
        while batch := list(itertools.islice(pending, BATCH)):
            yield batch

    write = _copy if conn.dialect.name == "postgresql" else _executemany
    with _foreign_keys_checked_after(conn, table):
        count = write(conn, table, batches())
    analyze(table, count)  # the planner's statistics (a search's word frequencies among them)
    return count


def _converted(rows: Iterable[_Row], table: Any, dialect: Any) -> Iterator[list[Any]]:
    """Rows by column name as the driver takes them: a list of values in column order."""
    values = operator.itemgetter(*(c.name for c in table.columns))
    converters = [
        (i, convert)
        for i, convert in enumerate(_driver_values(table, dialect))
        if convert is not None
    ]
    for row in rows:
        out = list(values(row))
        for i, convert in converters:
            out[i] = convert(out[i])
        yield out


def _driver_values(table: Any, dialect: Any) -> list[Callable[[Any], Any] | None]:
    """How each of a table's columns' Python value becomes the driver's (None: as it is)."""
    last_time: list[Any] = [None, None]  # shared by the table's times (see `_time_text`)
    return [_converter(c.type, dialect, last_time) for c in table.columns]


@contextmanager
def _foreign_keys_checked_after(conn: Any, table: Any) -> Iterator[None]:
    """On PostgreSQL, check the table's foreign keys once, after its rows are in.

    Checked row by row they were most of a million-case load there. The same constraints are
    dropped and added back by name in the load's transaction, so a failed load leaves them as
    they were; adding one checks every row (one join), and a violation fails the load. While
    the load runs it holds the table's lock: this is a seeding tool.
    """
    if conn.dialect.name != "postgresql":
        yield
        return
    keys = conn.exec_driver_sql(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %(table)s::regclass AND contype = 'f' ORDER BY conname",
        {"table": table.name},
    ).all()
    quote = conn.dialect.identifier_preparer.quote
    for name, _ in keys:
        conn.exec_driver_sql(f"ALTER TABLE {table.name} DROP CONSTRAINT {quote(name)}")
    yield
    if keys:
        conn.exec_driver_sql(
            f"ALTER TABLE {table.name} "
            + ", ".join(f"ADD CONSTRAINT {quote(name)} {definition}" for name, definition in keys)
        )


def _converter(column_type: Any, dialect: Any, last_time: list[Any]) -> Callable[[Any], Any] | None:
    """How a column's Python value becomes the driver's: JSON as text, the rest as SQLAlchemy
    (times faster, as the same text)."""
    if isinstance(column_type, JSON):
        return _json_text(none="null" if not column_type.none_as_null else None)
    process = column_type.dialect_impl(dialect).bind_processor(dialect)
    if process is not None and isinstance(column_type, DateTime):
        return _time_text(process, last_time)
    return process


def _time_text(process: Callable[[Any], Any], last: list[Any]) -> Callable[[Any], Any]:
    """SQLite's text of a time: SQLAlchemy's processor formats it through a dict, a third of a
    million-case load's conversions; a naive datetime's `isoformat` is the same text (checked
    here on a time, else `process` does it all). `last` holds the last time made text and its
    text, shared by a table's columns: a case's `updated_at` is its `added_at`."""
    sample = datetime(1999, 12, 31, 23, 59, 58, 7)
    if process(sample) != sample.isoformat(" ", "microseconds"):
        return process

    def convert(value: Any) -> Any:
        if value is last[0]:
            return last[1]
        if value is None:
            return None
        if type(value) is not datetime or value.tzinfo is not None:
            return process(value)
        last[0], last[1] = value, value.isoformat(" ", "microseconds")
        return last[1]

    return convert


def _as_is(value: Any) -> Any:
    """A value the driver takes as it is."""
    return value


def _json_text(none: str | None) -> Callable[[Any], Any]:
    """JSON text of a value, made once per object; None is JSON null, as SQLAlchemy stores it."""
    made: dict[int, tuple[Any, str]] = {}

    def convert(value: Any) -> str | None:
        if value is None:
            return none
        hit = made.get(id(value))
        if hit is None or hit[0] is not value:  # holding `value` keeps its id from being reused
            hit = made[id(value)] = (value, json.dumps(value))
        return hit[1]

    return convert


def _executemany(conn: Any, table: Any, batches: Iterator[list[Any]]) -> int:
    names = ", ".join(conn.dialect.identifier_preparer.quote(c.name) for c in table.columns)
    marks = ", ".join("?" for _ in table.columns)
    count = 0
    cursor = conn.connection.driver_connection.cursor()
    try:
        for rows in batches:
            cursor.executemany(f"INSERT INTO {table.name} ({names}) VALUES ({marks})", rows)
            count += len(rows)
    finally:
        cursor.close()
    return count


def _copy(conn: Any, table: Any, batches: Iterator[list[Any]]) -> int:
    """The batches through one COPY, opened once the first is made (making it may query)."""
    first = next(batches, None)
    if first is None:
        return 0
    names = ", ".join(conn.dialect.identifier_preparer.quote(c.name) for c in table.columns)
    count = 0
    with (
        conn.connection.driver_connection.cursor() as cursor,
        cursor.copy(f"COPY {table.name} ({names}) FROM STDIN") as copy,
    ):
        for rows in itertools.chain([first], batches):
            for row in rows:
                copy.write_row(row)
            count += len(rows)
    return count


class _Loader:
    """Resolves the references between entries (and to what the database already holds)."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.world = world
        self.now = service.clock()
        self.tenants = set(db.session.scalars(select(Tenant.id)))
        self.principals: dict[str, tuple[str, str]] = {}  # id → (kind, tenant)
        for u in db.session.execute(select(User.id, User.tenant_id)):
            self.principals[u.id] = ("user", u.tenant_id)
        for s in db.session.execute(select(Service.id, Service.tenant_id)):
            self.principals[s.id] = ("service", s.tenant_id)
        self.projects = {
            p.id: p.tenant_id for p in db.session.execute(select(Project.id, Project.tenant_id))
        }
        self.agents: dict[tuple[str, str], Agent] = {
            (a.tenant_id, a.id): a for a in db.session.scalars(select(Agent))
        }
        self.served = {
            (ap.agent_pk, ap.project_id) for ap in db.session.scalars(select(AgentProject))
        }
        self.groups = {g.id: g for g in db.session.scalars(select(Group))}
        self.runs: dict[str, dict[str, Any]] = {}
        # Made once for all the entries sharing the objects they are of, by the objects' ids
        # (holding an object keeps its id from being reused): each body's expectation, with its
        # words and what it gives of a stance; each run content's words and key; each
        # expectation and run content's columns of a case (a million demo cases share a few
        # thousand, and a world file's cases at most one each: `case_columns`)
        self.expects: dict[int, tuple[Any, _Expect]] = {}
        self.contents: dict[tuple[int, int, int, int, str], _Content] = {}
        self.said: dict[tuple[int, int], tuple[Any, Any, str, str]] = {}
        self.input_keys: dict[int, tuple[Any, str]] = {}
        self.made_columns: dict[tuple[int, int], tuple[_Expect, _Content, _CaseColumns]] = {}
        self.reasons: dict[str, str | None] = {}  # each retire reason's words
        self.tools: set[tuple[int, str, str]] = set()  # (agent_pk, project_id, tool) named
        self.first_case: dict[str, datetime] = {}  # run id → when its first case was added
        # each of a case's columns' value as the driver takes it (`_bulk`'s `made` rows)
        columns = Case.__table__.columns
        if tuple(c.name for c in columns) != _CASE_ROW:
            raise RuntimeError("kindgi.world._CASE_ROW is not the cases table's columns")
        convert = _driver_values(Case.__table__, db.session.get_bind().dialect)
        self.driver = {c.name: to or _as_is for c, to in zip(columns, convert, strict=True)}
        self.expert = (self.driver["expert"](False), self.driver["expert"](True))

    def entries(self, name: str) -> Iterable[tuple[_Where, dict[str, Any]]]:
        items = self.world.get(name) or []
        if not isinstance(items, list):
            raise WorldError(f"{name}: must be a list")
        for i, entry in enumerate(items):
            if not isinstance(entry, dict):
                raise WorldError(f"{_Where(name, i, entry)}: must be an object")
            yield _Where(name, i, entry), entry

    def listed(self, name: str) -> list[dict[str, Any]]:
        """The entries all at once where their places aren't needed (a million cases' made for
        nothing were a second of the demo's load), checked as `entries` checks them."""
        items = self.world.get(name)
        if isinstance(items, list) and all(map(isinstance, items, itertools.repeat(dict))):
            return items
        return [entry for _, entry in self.entries(name)]

    def tenant(self, tenant: Any, where: Where) -> str:
        if tenant not in self.tenants:
            raise WorldError(f"{where}: unknown tenant {tenant!r}")
        return tenant

    def principal(self, pid: Any, where: Where) -> tuple[str, str]:
        if pid not in self.principals:
            raise WorldError(f"{where}: unknown user or service {pid!r}")
        return self.principals[pid]

    def project(self, pid: Any, where: Where) -> str:
        key = str(pid).lower()
        if key not in self.projects:
            raise WorldError(f"{where}: unknown project {pid!r}")
        return key

    def agent(self, tenant: str, agent_id: Any, where: Where) -> Agent:
        agent = self.agents.get((tenant, agent_id))
        if agent is None:
            raise WorldError(f"{where}: unknown agent {agent_id!r} in tenant {tenant!r}")
        return agent

    def agent_anywhere(self, agent_id: Any, where: Where) -> Agent:
        found = [a for (_, aid), a in self.agents.items() if aid == agent_id]
        if len(found) != 1:
            raise WorldError(
                f"{where}: {'unknown' if not found else 'ambiguous'} agent {agent_id!r}"
            )
        return found[0]

    def run(self, run_id: Any, where: Where) -> dict[str, Any]:
        """A run of this world, or a stored one it names (`find_stored_runs`)."""
        run = self.runs.get(run_id) if isinstance(run_id, str) else None
        if run is None:
            raise WorldError(f"{where}: unknown run {run_id!r}")
        return run

    def find_stored_runs(self) -> None:
        """The stored runs this world's entries name, read before any is written: rows are
        made while a COPY is open (`_bulk`), when no query can run."""
        own = {r.get("id") for r in self.listed("runs")}
        named = {r.get("replayOf") for r in self.listed("runs")} | self.cased
        wanted = sorted(i for i in named - own if isinstance(i, str))
        for first in range(0, len(wanted), 500):
            # the table's columns, not ORM objects: their deferred words were a query a run
            for stored in db.session.execute(
                select(*Run.__table__.columns).where(Run.id.in_(wanted[first : first + 500]))
            ):
                self.runs[stored.id] = {**stored._mapping, "_stored": True}

    def expect(self, entry: dict[str, Any], where: Where) -> _Expect:
        """What the case expects, its body checked by the schema once per body object, with
        what that gives of the case's words and stance.

        A world may share one body object between many entries (the demo shares a few hundred
        among a million cases): each is validated and converted once, not once per case.
        """
        body = entry.get("body")
        cached = self.expects.get(id(body))
        if cached is not None and cached[0] is body:
            return cached[1]
        expect = service.expect_of(self.body(entry, where))
        made = _Expect(expect, search.expect_words(expect), stance.own(expect),
                       search.tools_of(expect))  # fmt: skip
        self.expects[id(body)] = (body, made)
        return made

    def run_text(self, input_: Any, output: Any) -> tuple[str, str]:
        """A run's words, and its document (`runs.search_text`), cut once for each input and
        output it shares with runs before it (the demo's come from pools, so a million runs
        cut a few dozen texts)."""
        key = (id(input_), id(output))
        said = self.said.get(key)
        if said is None or said[0] is not input_ or said[1] is not output:
            words = search.run_words(input_, output)
            said = self.said[key] = (input_, output, words, search.capped(words))
        return said[2], said[3]

    def content(self, run: dict[str, Any]) -> _Content:
        """What of a run a case's columns are worked out from, one object for all the runs of
        one agent and project with the same input, output and calls objects."""
        content = run.get("_content")
        if content is None:
            input_, output, calls = run["input"], run["output"], run["calls"]
            ids = (id(input_), id(output), id(calls), run["agent_pk"], run["project_id"])
            content = self.contents.get(ids)
            if (
                content is None
                or content.input is not input_
                or content.output is not output
                or content.calls is not calls
            ):
                key = self.input_keys.get(id(input_))
                if key is None or key[0] is not input_:
                    key = self.input_keys[id(input_)] = (input_, stance.input_key(input_))
                content = self.contents[ids] = _Content(
                    input_, output, calls, run["agent_pk"], run["project_id"], key[1],
                    self.run_text(input_, output)[0],
                )  # fmt: skip
            run["_content"] = content
        return content

    def case_columns(self, expect: _Expect, content: _Content) -> _CaseColumns:
        """A case's columns its expectation and its run's content give (the expectation, its
        words and its stance) as the driver takes them, worked out once for all the cases that
        share both (the JSON once for each expectation); the tools the expectation names are
        noted then, for its agent and project. Past CASE_COLUMNS of them (a world file's cases
        share few) they are made afresh."""
        ids = (id(expect), id(content))
        made = self.made_columns.get(ids)
        if made is not None and made[0] is expect and made[1] is content:
            return made[2]
        for tool in expect.tools:
            self.tools.add((content.agent_pk, content.project_id, tool))
        driver = self.driver
        made_stance = stance.stance(expect.expect, content.input_key, content.calls, expect.own)
        columns = _CaseColumns(
            driver["expect"](expect.expect),
            driver["search_text"](search.document(expect.words, content.words)),
            tuple(driver[name](value) for name, value in made_stance._asdict().items()),
        )
        if len(self.made_columns) >= CASE_COLUMNS:
            self.made_columns.clear()
        self.made_columns[ids] = (expect, content, columns)
        return columns

    def body(self, entry: dict[str, Any], where: Where) -> dict[str, Any]:
        raw = entry.get("body")
        try:
            return CorrectionBody().load(raw if isinstance(raw, dict) else {})
        except ValidationError as err:
            raise WorldError(f"{where}: body: {flatten_errors(err.messages)}") from None

    # ------------------------------------------------------------ the load, in reference order

    def load(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        bulk()  # a table's rows are one COPY: a bulk statement's timeout, not a request's
        for where, t in self.entries("tenants"):
            _need(t, where, "id")
            db.session.add(Tenant(id=t["id"], name=t.get("name") or t["id"]))
            self.tenants.add(t["id"])
        db.session.flush()  # rows of different tables have no relationship() to order them by
        for kind, model in (("users", User), ("services", Service)):
            for where, p in self.entries(kind):
                _need(p, where, "id", "tenant")
                tenant = self.tenant(p["tenant"], where)
                if p["id"] in self.principals:
                    raise WorldError(f"{where}: the id {p['id']!r} is taken")
                if model is User:
                    _need(p, where, "email")
                    db.session.add(
                        User(
                            id=p["id"],
                            tenant_id=tenant,
                            email=p["email"].strip().lower(),
                            name=p.get("name") or p["id"],
                            admin=bool(p.get("admin")),
                            password_hash=service.hash_password(p["password"])
                            if p.get("password")
                            else None,
                        )
                    )
                else:
                    db.session.add(
                        Service(id=p["id"], tenant_id=tenant, name=p.get("name") or p["id"])
                    )
                self.principals[p["id"]] = (kind[:-1], tenant)
        db.session.flush()
        for where, t in self.entries("tokens"):
            _need(t, where, "id", "principal", "secret")
            kind, tenant = self.principal(t["principal"], where)
            if not str(t["secret"]).startswith(service.TOKEN_PREFIX):
                raise WorldError(f"{where}: a secret starts with {service.TOKEN_PREFIX}")
            db.session.add(
                Token(
                    id=t["id"],
                    tenant_id=tenant,
                    principal_kind=kind,
                    principal_id=t["principal"],
                    name=t.get("name") or t["id"],
                    secret_hash=service.hash_secret(t["secret"]),
                    created_at=self.now,
                    expires_at=_time(t["expiresAt"], where) if t.get("expiresAt") else None,
                    revoked_at=self.now if t.get("revoked") else None,
                )
            )
        db.session.flush()
        for where, p in self.entries("projects"):
            _need(p, where, "id", "tenant")
            if not UUID_RE.match(str(p["id"])):
                raise WorldError(f"{where}: a project id is a UUID")
            tenant = self.tenant(p["tenant"], where)
            db.session.add(
                Project(id=p["id"].lower(), tenant_id=tenant, name=p.get("name") or p["id"])
            )
            self.projects[p["id"].lower()] = tenant
        db.session.flush()
        for where, a in self.entries("agents"):
            _need(a, where, "id", "tenant")
            tenant = self.tenant(a["tenant"], where)
            if (tenant, a["id"]) in self.agents:
                raise WorldError(f"{where}: agent {a['id']!r} exists in tenant {tenant!r}")
            agent = Agent(tenant_id=tenant, id=a["id"], versions=list(a.get("versions") or []))
            db.session.add(agent)
            db.session.flush()
            self.agents[(tenant, a["id"])] = agent
            for pid in a.get("projects") or []:
                project = self.project(pid, where)
                if self.projects[project] != tenant:
                    raise WorldError(f"{where}: project {pid!r} is another tenant's")
                db.session.add(AgentProject(agent_pk=agent.pk, project_id=project))
                self.served.add((agent.pk, project))
        for where, g in self.entries("grants"):
            _need(g, where, "principal", "permission")
            kind, tenant = self.principal(g["principal"], where)
            grant = Grant(
                principal_kind=kind, principal_id=g["principal"], permission=g["permission"]
            )
            if g["permission"] in ("read", "write"):
                grant.project_id = self.project(g.get("project"), where)
            elif g["permission"] == "publish":
                grant.agent_pk = self.agent(tenant, g.get("agent"), where).pk
            else:
                raise WorldError(f"{where}: permission is read, write or publish")
            db.session.add(grant)
        for where, g in self.entries("groups"):
            _need(g, where, "id", "agent")
            group = Group(
                id=g["id"],
                agent_pk=self.agent_anywhere(g["agent"], where).pk,
                restricted=bool(g.get("restricted")),
            )
            db.session.add(group)
            self.groups[g["id"]] = group
        db.session.flush()
        self.cased = {e.get("run") for name in ("corrections", "cases") for e in self.listed(name)}
        self.find_stored_runs()
        with search.indexed_after(search.RUNS):
            counts["runs"] = _bulk(Run, self._runs())
        tools = (runs.tool_rows(r) for r in self.runs.values() if not r.get("_stored"))
        _bulk(RunTool, itertools.chain.from_iterable(tools))
        with search.indexed_after():
            # stored in the order they were added (where each list is in that order), as cases
            # added one by one are: a search on SQLite reads fewer of its matches so
            added = heapq.merge(self._corrections(), self._hand_cases(), key=_added)
            cases = _bulk(Case, self._noting_first(added), made=True)
        counts["snapshots"] = _bulk(Snapshot, self._snapshots())
        self._mark_stored_runs_cased()
        search.note_tools(
            [{"agent_pk": a, "project_id": p, "tool": t} for a, p, t in sorted(self.tools)]
        )
        counts["cases"] = cases
        service.rebuild_tallies()
        counts["test runs"] = self._test_runs()
        return counts

    def _test_runs(self) -> int:
        """Test runs, made as a client makes them: started (which freezes the set), fed their
        results 500 at a time, and finished when the entry says so."""
        made = 0
        for where, t in self.entries("testRuns"):
            _need(t, where, "id", "agent", "project", "candidate", "by")
            project = self.project(t["project"], where)
            tenant = self.projects[project]
            agent = self.agent(tenant, t["agent"], where)
            kind, by_tenant = self.principal(t["by"], where)
            if by_tenant != tenant:
                raise WorldError(f"{where}: {t['by']!r} is not of the agent's tenant")
            caller = service.Principal(kind, t["by"], tenant, admin=True)
            given = ("weighting", "baseline", "rerunOf", "only", "label", "metadata")
            start = {"projectId": project, "candidate": t["candidate"]}
            start.update({k: t[k] for k in (*given, "itemsThreshold") if k in t})
            results = t.get("results") or []
            try:
                view = service.start_test_run(caller, agent.id, load_body(StartTestRunBody, start))
                view.run.id = t["id"]
                if "at" in t:
                    view.run.created_at = _time(t["at"], where)
                for first in range(0, len(results), 500):
                    batch = {"results": results[first : first + 500]}
                    sent = load_body(ResultsBody, batch)["results"]
                    service.send_results(caller, agent.id, t["id"], sent)
                if t.get("finished") and view.run.status == "open":
                    service.finish_test_run(caller, agent.id, t["id"])
            except DomainError as err:
                raise WorldError(f"{where}: {err.message} {err.details or ''}".strip()) from None
            made += 1
        return made

    def _runs(self) -> Iterable[dict[str, Any]]:
        for where, r in self.entries("runs"):
            _need(r, where, "id", "agent", "project", "version", "at")
            project = self.project(r["project"], where)
            tenant = self.projects[project]
            agent = self.agent(tenant, r["agent"], where)
            if (agent.pk, project) not in self.served:
                raise WorldError(f"{where}: project {project} does not serve {agent.id}")
            if r.get("status", "finished") not in ("running", "finished"):
                raise WorldError(f"{where}: status is running or finished")
            if r["id"] in self.runs:
                raise WorldError(f"{where}: the id {r['id']!r} is taken")
            if r.get("replayOf") is not None:
                self.run(r["replayOf"], where)
            row = {
                "id": r["id"],
                "tenant_id": tenant,
                "agent_pk": agent.pk,
                "project_id": project,
                "version": r["version"],
                "status": r.get("status", "finished"),
                "input": r.get("input"),
                "output": r.get("output"),
                "search_text": self.run_text(r.get("input"), r.get("output"))[1],
                "calls": r.get("calls", []),
                "erased": bool(r.get("erased")),
                "replay_of": r.get("replayOf"),
                "at": _time(r["at"], where),
                "trace_id": None,
                "error": None,
                "has_case": r["id"] in self.cased,
            }
            self.runs[r["id"]] = row
            yield row

    def _case_row(
        self, where: Where, e: dict[str, Any], kind: str, status: str | None,
        group_id: str | None, expert: bool,
    ) -> _Added:  # fmt: skip
        """A case entry's row, in the columns' order with the driver's values: made so, not by
        name and converted after, a tenth of a million-case load's time."""
        _need(e, where, "id", "run", "by", "at")
        run = self.run(e["run"], where)
        by_kind, tenant = self.principal(e["by"], where)
        if tenant != run["tenant_id"]:
            raise WorldError(f"{where}: {e['by']!r} is not of the run's tenant")
        at = _time(e["at"], where)
        columns = self.case_columns(self.expect(e, where), self.content(run))
        driver = self.driver
        added = updated = driver["added_at"](at)
        reason = words = retired_by_kind = retired_by = retired_at = None
        retired = e.get("retired")
        if retired:
            _need(retired, f"{where}.retired", "reason", "by", "at")
            retired_by_kind, _ = self.principal(retired["by"], f"{where}.retired")
            retired_by, reason = retired["by"], retired["reason"]
            if reason not in self.reasons:
                self.reasons[reason] = search.reason_words(reason)
            words = self.reasons[reason]
            retired_at = updated = driver["retired_at"](_time(retired["at"], where))
        row = (
            e["id"], tenant, run["agent_pk"], run["project_id"], run["id"], kind, status,
            group_id, run["version"], columns.expect, 1, None, self.expert[expert], by_kind,
            e["by"], added, updated, reason, retired_by_kind, retired_by, retired_at, None,
            columns.search_text, words, *columns.stance,
        )  # fmt: skip
        return at, e["id"], run["id"], row

    def _corrections(self) -> Iterable[_Added]:
        for where, c in self.entries("corrections"):
            status = c.get("status", "open")
            if status not in CORRECTION_STATUSES:
                raise WorldError(f"{where}: status is one of {', '.join(CORRECTION_STATUSES)}")
            group_id = c.get("group")
            group = self.groups.get(group_id) if group_id else None
            if group_id and group is None:
                raise WorldError(f"{where}: unknown group {group_id!r}")
            restricted = c.get("restricted", group.restricted if group else False)
            yield self._case_row(where, c, "correction", status, group_id, bool(restricted))

    def _hand_cases(self) -> Iterable[_Added]:
        for where, c in self.entries("cases"):
            if not str(c.get("id", "")).startswith("case-"):
                raise WorldError(f"{where}: a hand case's id starts with case-")
            yield self._case_row(where, c, "hand", None, None, True)

    def _noting_first(self, cases: Iterable[_Added]) -> Iterable[tuple[Any, ...]]:
        """Pass case rows on, noting when each run's first one was added: its snapshot's time."""
        first = self.first_case
        for at, _, run_id, row in cases:
            if run_id not in first or at < first[run_id]:
                first[run_id] = at
            yield row

    def _mark_stored_runs_cased(self) -> None:
        """Runs stored before this load that its cases were made from: marked so, as the
        service marks a run at its first case (the runs loaded now were written marked)."""
        stored = [r for r in self.first_case if self.runs[r].get("_stored")]
        for first in range(0, len(stored), 500):
            db.session.execute(
                update(Run).where(Run.id.in_(stored[first : first + 500])).values(has_case=True)
            )

    def _snapshots(self) -> Iterable[dict[str, Any]]:
        """Each run with a correction or case keeps a copy of its content from the first one."""
        first = self.first_case
        stored = [r for r in first if self.runs[r].get("_stored")]
        have = set(db.session.scalars(select(Snapshot.run_id).where(Snapshot.run_id.in_(stored))))
        for run_id, at in first.items():
            if run_id in have:
                continue
            run = self.runs[run_id]
            yield {
                "run_id": run_id,
                "input": run["input"],
                "output": run["output"],
                "calls": run["calls"],
                "taken_at": at,
            }


def load(world: dict[str, Any], *, trusted: bool = False) -> dict[str, int]:
    """Load a world in the session's transaction; the caller commits. Raises WorldError.

    `trusted` (the demo's own world) changes nothing any more: every body is checked, once per
    body object, which is as fast as not checking.
    """
    if not isinstance(world, dict):
        raise WorldError("a world file is a JSON object")
    driver_conflict = db.session.get_bind().dialect.loaded_dbapi.IntegrityError  # COPY's, say
    try:
        return _Loader(world).load()
    except (IntegrityError, driver_conflict) as exc:
        abandon()
        raise WorldError(f"conflicts with what is stored: {getattr(exc, 'orig', exc)}") from None
