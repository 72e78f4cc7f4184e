"""The stored shape of the domain. Models store; the service module decides.

Times are naive UTC, kept to the millisecond so what is shown is what is stored.
A correction and its case are one row of `cases` (kind `correction`, with a status): the case
exists while the status is not `wont-fix`/`removed`. Hand cases have no status.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    and_,
    false,
    or_,
    text,
)
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from .database import db

# Correction statuses whose correction is no case.
NOT_CASE_STATUSES = ("wont-fix", "removed")
CORRECTION_STATUSES = ("open", "with-the-owner", "fixed", "wont-fix", "removed")


class Tenant(db.Model):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))


class User(db.Model):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    password_hash: Mapped[str | None] = mapped_column(String(200))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)


class Service(db.Model):
    __tablename__ = "services"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))


class Token(db.Model):
    """A bearer token: only the SHA-256 of its secret is kept."""

    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    principal_kind: Mapped[str] = mapped_column(String(8))  # user | service
    principal_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime)

    # A principal's tokens, newest first (the list's keyset order)
    __table_args__ = (
        Index("ix_tokens_list", "principal_kind", "principal_id", "created_at", "id"),
    )


class Project(db.Model):
    __tablename__ = "projects"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # lower-case UUID
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))


class Agent(db.Model):
    """An agent; its dotted id is unique within its tenant, so rows have a surrogate key."""

    __tablename__ = "agents"
    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    id: Mapped[str] = mapped_column(String(200))
    versions: Mapped[list[str]] = mapped_column(JSON, default=list)

    __table_args__ = (UniqueConstraint("tenant_id", "id", name="uq_agents_tenant_id"),)


class AgentProject(db.Model):
    """An agent is served by one or more projects."""

    __tablename__ = "agent_projects"
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), primary_key=True)


class Grant(db.Model):
    """`read`/`write` on a project, or `publish` on an agent, for a user or a service."""

    __tablename__ = "grants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    principal_kind: Mapped[str] = mapped_column(String(8))
    principal_id: Mapped[str] = mapped_column(String(64))
    permission: Mapped[str] = mapped_column(String(16))
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id"))
    agent_pk: Mapped[int | None] = mapped_column(ForeignKey("agents.pk"))

    __table_args__ = (Index("ix_grants_principal", "principal_kind", "principal_id"),)


class Group(db.Model):
    """A group of corrections; a restricted group makes its corrections experts' cases."""

    __tablename__ = "groups"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"))
    restricted: Mapped[bool] = mapped_column(Boolean, default=False)


class Run(db.Model):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"))
    version: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16))  # running | finished
    input: Mapped[Any] = mapped_column(JSON, nullable=True)
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    calls: Mapped[Any] = mapped_column(JSON, nullable=True)
    erased: Mapped[bool] = mapped_column(Boolean, default=False)
    replay_of: Mapped[str | None] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(DateTime)
    # A run that came as an OpenTelemetry trace (docs/design.md §10): its trace's id (hex), and
    # the message of its root span's error status
    trace_id: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    # Whether a case or correction was made from it, set in the transaction that makes the
    # first: the runs inbox shows and filters by it, and retention keeps such a run for good.
    has_case: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The words the runs inbox's `q` finds it by, the text in its input and output
    # (`service.search.run_document`), written with them on every write: the database indexes
    # them (FTS5 on SQLite, `search` on PostgreSQL; migration 0011).
    search_text: Mapped[str | None] = mapped_column(Text, deferred=True)

    __table_args__ = (
        Index("ix_runs_list", "agent_pk", "project_id", "at", "id"),
        # the runs inbox's filters, newest first: by version; and the few runs made cases
        Index("ix_runs_version", "agent_pk", "project_id", "version", "at", "id"),
        Index(
            "ix_runs_cased",
            "agent_pk",
            "project_id",
            "at",
            "id",
            sqlite_where=text("has_case = 1"),
            postgresql_where=text("has_case"),
        ),
    )


class RunTool(db.Model):
    """A tool a run called (once per tool, however often it called it), written with the run:
    the runs inbox filters by tool with its own index, newest first, without reading calls.
    Goes with its run (ON DELETE CASCADE)."""

    __tablename__ = "run_tools"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    agent_pk: Mapped[int] = mapped_column(Integer)  # the run's, for the index
    project_id: Mapped[str] = mapped_column(String(36))
    at: Mapped[datetime] = mapped_column(DateTime)

    __table_args__ = (Index("ix_run_tools_list", "agent_pk", "project_id", "tool", "at", "run_id"),)


class TraceSpan(db.Model):
    """A span of a trace, as its run is made of it (`kindgi.traces.SpanFacts`): a run is
    assembled again from all of its trace's spans whenever one more comes. `run_id` is the
    run the trace makes, known before the run exists: a span whose trace names no agent or
    project yet is held here until its root comes (docs/design.md §10)."""

    __tablename__ = "trace_spans"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    span_id: Mapped[str] = mapped_column(String(16), primary_key=True)  # hex
    parent_id: Mapped[str | None] = mapped_column(String(16))
    start_ns: Mapped[int] = mapped_column(BigInteger)
    facts: Mapped[str] = mapped_column(Text)  # JSON text, written and read as it is
    received_at: Mapped[datetime] = mapped_column(DateTime)

    # Held spans past their time are found by when they came
    __table_args__ = (Index("ix_trace_spans_received", "received_at"),)


class Snapshot(db.Model):
    """The copy of a run's content taken by its first correction or case, shared by the rest."""

    __tablename__ = "snapshots"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    input: Mapped[Any] = mapped_column(JSON, nullable=True)
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    calls: Mapped[Any] = mapped_column(JSON, nullable=True)
    taken_at: Mapped[datetime] = mapped_column(DateTime)


class Case(db.Model):
    """A correction (with its status) or a hand case, with what it expects of the agent."""

    __tablename__ = "cases"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    kind: Mapped[str] = mapped_column(String(16))  # correction | hand
    status: Mapped[str | None] = mapped_column(String(16))  # a correction's; None for hand
    group_id: Mapped[str | None] = mapped_column(ForeignKey("groups.id"))
    made_on: Mapped[str] = mapped_column(String(100))
    expect: Mapped[dict[str, Any]] = mapped_column(JSON)  # its current revision's
    # Its expectation's revision, 1 at first; each revision is kept in `case_revisions` once
    # the case is first revised (docs/design.md §4.4)
    revision: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    # Its tags, sorted and comma-joined (None when it has none), for showing it; the list's
    # filter reads `case_tags`, written with it (docs/design.md §4.5)
    tags: Mapped[str | None] = mapped_column(Text)
    expert: Mapped[bool] = mapped_column(Boolean, default=False)
    added_by_kind: Mapped[str] = mapped_column(String(8))
    added_by_id: Mapped[str] = mapped_column(String(64))
    added_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    retired_reason: Mapped[str | None] = mapped_column(Text)
    retired_by_kind: Mapped[str | None] = mapped_column(String(8))
    retired_by_id: Mapped[str | None] = mapped_column(String(64))
    retired_at: Mapped[datetime | None] = mapped_column(DateTime)
    # The test run it was retired from, on that run's page (its id; None otherwise)
    retired_from_test_run: Mapped[str | None] = mapped_column(String(64))
    # The words the case is searched by, written once when it is made (`service.search.document`),
    # and its retire reason's, written with it (`service.search.reason_words`): the database
    # indexes both (FTS5 on SQLite, `search` on PostgreSQL).
    search_text: Mapped[str | None] = mapped_column(Text, deferred=True)
    retired_words: Mapped[str | None] = mapped_column(Text, deferred=True)
    # Its stance (`kindgi.stance`), written with its expectation: the parts it has and those
    # it says were right (bits), its run's input's key, the tools it wants called and those it
    # forbids, so a quick run's draw and the set's health read no JSON (migration 0016); and its
    # expectation's key, so adding a case finds the cases of its run it duplicates unread
    parts: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    rights: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    input_key: Mapped[str | None] = mapped_column(String(16))
    wants: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    forbids: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    expect_key: Mapped[str | None] = mapped_column(String(16))

    __table_args__ = (
        Index("ix_cases_list", "agent_pk", "project_id", "added_at", "id"),
        # a run's cases; those of one expectation by id (an added case's duplicates)
        Index("ix_cases_run_expect", "run_id", "expect_key", "id"),
        # what was retired from a test run, which its page counts (`service.triage`)
        Index(
            "ix_cases_retired_from_test_run",
            "retired_from_test_run",
            sqlite_where=text("retired_from_test_run IS NOT NULL"),
            postgresql_where=text("retired_from_test_run IS NOT NULL"),
        ),
    )

    @hybrid_property
    def is_case(self) -> bool:
        """A hand case always is; a correction is while its status keeps it in the set. The one
        definition of that rule, in Python here and in SQL below."""
        return self.status not in NOT_CASE_STATUSES

    @is_case.inplace.expression
    @classmethod
    def _is_case_sql(cls) -> ColumnElement[bool]:
        # `!=` terms, not `NOT IN`: an expanding IN is re-rendered at every execution
        return or_(cls.status.is_(None), and_(*(cls.status != s for s in NOT_CASE_STATUSES)))

    @property
    def retired(self) -> dict[str, Any] | None:
        if self.retired_at is None:
            return None
        return {
            "reason": self.retired_reason,
            "by": {"kind": self.retired_by_kind, "id": self.retired_by_id},
            "at": self.retired_at,
            "fromTestRun": self.retired_from_test_run,
        }

    @property
    def added_by(self) -> dict[str, str]:
        return {"kind": self.added_by_kind, "id": self.added_by_id}


class CaseRevision(db.Model):
    """An expectation a case has had, with who gave it, when and why. A case never revised has
    none (its revision 1 is the case itself); its first revision writes revision 1 too, from
    the case's expectation, `addedBy` and `addedAt`, so a revised case has every one."""

    __tablename__ = "case_revisions"
    case_id: Mapped[str] = mapped_column(ForeignKey("cases.id"), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    expect: Mapped[dict[str, Any]] = mapped_column(JSON)
    note: Mapped[str | None] = mapped_column(Text)  # why; None for revision 1
    by_kind: Mapped[str] = mapped_column(String(8))
    by_id: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(DateTime)
    # The test run it was made from, on that run's page (its id; None otherwise)
    from_test_run: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        # what was revised from a test run, which its page counts (`service.triage`)
        Index(
            "ix_case_revisions_from_test_run",
            "from_test_run",
            sqlite_where=text("from_test_run IS NOT NULL"),
            postgresql_where=text("from_test_run IS NOT NULL"),
        ),
    )


class CaseTag(db.Model):
    """A tag on a case, with the case's set and `added_at` copied: the cases list filtered by
    one tag walks this index newest first, as the plain list walks `ix_cases_list`."""

    __tablename__ = "case_tags"
    case_id: Mapped[str] = mapped_column(ForeignKey("cases.id"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent_pk: Mapped[int] = mapped_column(Integer)
    project_id: Mapped[str] = mapped_column(String(36))
    added_at: Mapped[datetime] = mapped_column(DateTime)  # the case's

    __table_args__ = (
        Index("ix_case_tags_list", "agent_pk", "project_id", "tag", "added_at", "case_id"),
    )


class Tally(db.Model):
    """Exact case counts of one test set, one row per (week added, kind, retired, expert) cell.

    Kept in the same transaction as every change, by atomic increments, so reading the counts
    (or the overview's cases-per-week chart) never scans the set.
    """

    __tablename__ = "tallies"
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    week: Mapped[date] = mapped_column(Date, primary_key=True)  # the Monday of the week added
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    retired: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    expert: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    n: Mapped[int] = mapped_column(Integer, default=0)


class TestSetTool(db.Model):
    """A tool that some case of a test set names (in shouldCall or mustNotCall), written with
    the case: the cases page offers these to filter by without reading every case."""

    __tablename__ = "test_set_tools"
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)


class IdempotencyRecord(db.Model):
    """One caller's Idempotency-Key: a claim while the request runs, then its answer."""

    __tablename__ = "idempotency_keys"
    scope: Mapped[str] = mapped_column(String(80), primary_key=True)  # "user:u-ana"
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of method, path and body
    created_at: Mapped[datetime] = mapped_column(DateTime)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime)  # set while in flight
    status: Mapped[int | None] = mapped_column(Integer)
    content_type: Mapped[str | None] = mapped_column(String(100))
    location: Mapped[str | None] = mapped_column(String(1000))
    body: Mapped[bytes | None] = mapped_column(LargeBinary)
    withheld: Mapped[bool] = mapped_column(Boolean, default=False)
    succeeded_at: Mapped[datetime | None] = mapped_column(DateTime)


class LoginFailure(db.Model):
    """A failed sign-in, by a hash of the email typed (known or not): the login throttle."""

    __tablename__ = "login_failures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    email_key: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(DateTime)

    __table_args__ = (Index("ix_login_failures_key_at", "email_key", "at"),)


# ---------------------------------------------------------------- test runs


class TestSetChanges(db.Model):
    """How many times a test set has changed (a case in, out, retired or restored): a freeze
    whose set has not changed since the last one reuses its version with one comparison."""

    __tablename__ = "test_set_changes"
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    changes: Mapped[int] = mapped_column(Integer, default=0)


class TestSetVersion(db.Model):
    """A frozen version of a test set: its active cases at one change, `v<number>`."""

    __tablename__ = "test_set_versions"
    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"))
    number: Mapped[int] = mapped_column(Integer)
    at_change: Mapped[int] = mapped_column(Integer)
    frozen_at: Mapped[datetime] = mapped_column(DateTime)
    frozen_by_kind: Mapped[str] = mapped_column(String(8))
    frozen_by_id: Mapped[str] = mapped_column(String(64))
    total: Mapped[int] = mapped_column(Integer)
    expert: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        UniqueConstraint("agent_pk", "project_id", "number", name="uq_test_set_versions_number"),
    )


class VersionMember(db.Model):
    """A case in a frozen version, at the revision of its expectation it was frozen with (its
    snapshot never changes): runs of the version grade with that revision."""

    __tablename__ = "version_members"
    # no foreign keys (migration 0017): a freeze writes a third of a million members at once,
    # which PostgreSQL would check a row each; `kindgi check` ("version members") holds both
    version_pk: Mapped[int] = mapped_column(Integer, primary_key=True)
    case_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    expert: Mapped[bool] = mapped_column(Boolean)
    revision: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    # the parts of that revision's expectation (bits, `kindgi.stance`): a quick run's strata
    parts: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))


class TestRun(db.Model):
    """A candidate agent version graded against a frozen version of a test set.

    `tallies` are its counts, kept in the transaction of every change to its results, so
    reading a run never scans its cases."""

    __tablename__ = "test_runs"
    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    agent_pk: Mapped[int] = mapped_column(ForeignKey("agents.pk"))
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"))
    version_pk: Mapped[int] = mapped_column(ForeignKey("test_set_versions.pk"))
    version: Mapped[str] = mapped_column(String(16))  # the version's name, "v3"
    candidate: Mapped[str] = mapped_column(String(100))
    weighting: Mapped[str] = mapped_column(String(16))
    baseline_pk: Mapped[int | None] = mapped_column(ForeignKey("test_runs.pk"))
    baseline_id: Mapped[str | None] = mapped_column(String(64))
    rerun_of_id: Mapped[str | None] = mapped_column(String(64))
    only: Mapped[str | None] = mapped_column(String(32))
    # The tags it was started on (its cases had any of them), sorted; None: the whole set
    tags: Mapped[list[str] | None] = mapped_column(JSON)
    label: Mapped[str | None] = mapped_column(String(200))
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    items_threshold: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # open | grading | done | canceled
    created_at: Mapped[datetime] = mapped_column(DateTime)
    created_by_kind: Mapped[str] = mapped_column(String(8))
    created_by_id: Mapped[str] = mapped_column(String(64))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    tallies: Mapped[dict[str, Any]] = mapped_column(JSON)
    # A quick run's sample (`service.quick_runs`): {size, seed, population, strata: [[name,
    # population, drawn, prior], …]}; None for a full run
    sample: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))

    __table_args__ = (Index("ix_test_runs_list", "agent_pk", "project_id", "created_at", "id"),)


class RunCase(db.Model):
    """One case of a test run: awaiting its result, then the result as sent and as graded."""

    __tablename__ = "test_run_cases"
    run_pk: Mapped[int] = mapped_column(ForeignKey("test_runs.pk"), primary_key=True)
    case_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    outcome: Mapped[str] = mapped_column(String(10))  # awaiting, or a case outcome
    reason: Mapped[str | None] = mapped_column(Text)
    decisions: Mapped[str | None] = mapped_column(String(10))  # each part's outcome
    answer: Mapped[str | None] = mapped_column(String(10))
    items: Mapped[str | None] = mapped_column(String(10))
    items_score: Mapped[float | None] = mapped_column(Float)
    parts: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # each part's explanation
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # as the candidate sent it
    result_digest: Mapped[str | None] = mapped_column(String(64))  # of its canonical JSON
    stratum: Mapped[int | None] = mapped_column(SmallInteger)  # a quick run's: its sample's stratum

    # a case's history: its results newest run first (`service.run_pages.case_history`)
    __table_args__ = (Index("ix_test_run_cases_case", "case_id", "run_pk"),)


class CaseRecord(db.Model):
    """A case's record over its set's last 50 done full runs (`service.records`), brought up to
    date for the cases of each run that ends and of the run it pushes out of the window, so
    reading it is one row."""

    __tablename__ = "case_records"
    case_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_pk: Mapped[int] = mapped_column(Integer)
    project_id: Mapped[str] = mapped_column(String(36))
    runs: Mapped[int] = mapped_column(Integer)  # the window's runs that graded it
    passed: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    errored: Mapped[int] = mapped_column(Integer)
    failed_by: Mapped[list[str]] = mapped_column(JSON)  # candidates that failed or erred it
    flaky: Mapped[bool] = mapped_column(Boolean)
    separation: Mapped[float | None] = mapped_column(Float)
    last_failed: Mapped[datetime | None] = mapped_column(DateTime)
    streak: Mapped[int] = mapped_column(Integer)  # its newest runs in a row that did not pass
    # what the rest is counted from, so a run's end changes a record without the window's rows
    # (migration 0016): each candidate's [pass, fail, error], and the moments [n, Σy, Σx, Σxy,
    # Σx²] of passing it (y) against the runs' pass rates (x, in units of 2**-32)
    by_candidate: Mapped[dict[str, list[int]]] = mapped_column(JSON)
    moments: Mapped[list[int]] = mapped_column(JSON)

    __table_args__ = (Index("ix_case_records_set", "agent_pk", "project_id"),)


# ---------------------------------------------------------------- the judge


class JudgeVerdict(db.Model):
    """A judge's verdict, kept under its question's key (model, prompt version, expectation,
    corrected output, candidate output): the same question is never paid for twice. Faults are
    never kept."""

    __tablename__ = "judge_verdicts"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[str] = mapped_column(String(8))  # pass | fail
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(DateTime)


class JudgeQuestion(db.Model):
    """A question a test run put to the judge: a case's answer, or a calibration (the corrected
    run's own output). Leased while being asked, so a dead worker's question is asked again."""

    __tablename__ = "judge_questions"
    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_pk: Mapped[int] = mapped_column(ForeignKey("test_runs.pk"))
    case_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(12))  # answer | calibration
    key: Mapped[str] = mapped_column(String(64))
    question: Mapped[dict[str, Any]] = mapped_column(JSON)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime)
    outcome: Mapped[str | None] = mapped_column(String(8))  # pass | fail | error, once answered
    reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("run_pk", "case_id", "kind", name="uq_judge_questions_case"),
        Index("ix_judge_questions_open", "outcome", "lease_until"),
    )


def modelled(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic's `include_object`: leave out what the search indexes add beside the models (see
    migrations 0008 and 0011), SQLite's FTS5 tables and PostgreSQL's generated columns, which
    no model describes."""
    if type_ == "table":
        return not str(name).startswith(("case_search", "run_search"))
    if type_ == "column":
        return not (name == "search" and obj.table.name in ("cases", "runs"))
    return name not in ("ix_cases_search", "ix_runs_search")
