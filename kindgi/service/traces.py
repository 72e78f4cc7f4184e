"""Runs from OpenTelemetry traces (docs/design.md §10): an OTLP export's spans kept, and the run
of each trace they belong to assembled again from all its spans, in the request's transaction.

A request's spans are grouped by trace and written in a few statements whatever their number:
one read of the runs and one of the spans already kept for those traces, one insert of the new
spans, one upsert of the runs. Traces are taken in turn by their run's id (PostgreSQL:
advisory locks; SQLite's writers take turns anyway), so two requests carrying spans of one
trace never assemble it from half of them each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from flask import current_app
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from sqlalchemy import bindparam, delete, exists, select, text, tuple_

from .. import traces
from ..database import db
from ..errors import DomainError, Forbidden
from ..models import Agent, Run, TraceSpan
from .access import AgentRef, scope
from .common import clock, dialect, insert_rows, sql, sqlite_time
from .identity import Principal
from .runs import save_tools
from .search import run_document

MAX_VERSION = 100  # characters, as a run recorded through the API
_CHUNK = 500  # ids in one IN list
_REASONS_SHOWN = 10
_EPOCH = datetime(1970, 1, 1)
# The run's columns a later span of its trace changes (never its agent, project or erasure):
# its words with its input and output, so the inbox's `q` finds it by what it says now
_ASSEMBLED = ("version", "status", "input", "output", "search_text", "calls", "at", "error")


@dataclass(frozen=True)
class Ingested:
    """What an export came to: how many of its spans were rejected, and why."""

    rejected: int
    message: str


@dataclass
class _Rejections:
    count: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    forbidden: int = 0  # of them, for want of a grant

    def add(self, spans: int, reason: str, forbidden: bool = False) -> None:
        self.count += spans
        self.forbidden += spans if forbidden else 0
        self.reasons[reason] = self.reasons.get(reason, 0) + spans

    def result(self) -> Ingested:
        said = [f"{n} span(s): {why}" for why, n in list(self.reasons.items())[:_REASONS_SHOWN]]
        if len(self.reasons) > _REASONS_SHOWN:
            said.append(f"and {len(self.reasons) - _REASONS_SHOWN} more reasons")
        return Ingested(self.count, "; ".join(said))


@dataclass(frozen=True)
class _Known:
    """A trace's run as it is stored."""

    agent_id: str
    project_id: str
    erased: bool


def ingest_traces(caller: Principal, export: ExportTraceServiceRequest) -> Ingested:
    """Keep an export's spans and make or remake the runs of their traces. A span is rejected
    (counted and said in the answer, never kept) when it can't be read, when its trace's
    agent or project is unknown or the caller may not write there, when it names another
    agent or project than its trace's, or when its trace's run was erased; the rest is kept.
    A span whose trace names no agent and project yet is held until one of its spans does.
    When every span was refused for want of a grant, 403 `forbidden`."""
    read = traces.read_export(export)
    rejected = _Rejections()
    if read.unreadable:
        rejected.add(read.unreadable, "no trace id of 16 bytes and span id of 8")
    by_run = {traces.run_id(caller.tenant_id, t): spans for t, spans in read.traces.items()}
    if not by_run:
        return rejected.result()
    _take_turns(by_run)
    known = _known_runs(by_run)
    stored = _stored_spans(by_run)
    now = clock()
    grants: dict[tuple[str, str], AgentRef | str] = {}
    kept: list[tuple[str, traces.SpanFacts]] = []
    runs: list[dict[str, Any]] = []
    versions: dict[int, set[str]] = {}
    for run_id, spans in by_run.items():
        trace = spans[0].trace_id
        old = stored.get(run_id, [])
        fresh = _new(spans, old)
        run = known.get(run_id)
        place = (run.agent_id, run.project_id) if run else traces.placement([*old, *fresh])
        strays = [s for s in fresh if traces.named_place(s) not in (None, place)]
        if strays:
            rejected.add(len(strays), f"trace {trace} is agent {place[0]}, project {place[1]}")
            fresh = [s for s in fresh if s not in strays]
        if not fresh:
            continue  # sent before (a retry): the run has them already
        if run is not None and run.erased:
            rejected.add(len(fresh), f"the run of trace {trace} was erased")
            continue
        if place is None:  # held until a span names the agent and project
            kept += [(run_id, s) for s in fresh]
            continue
        if place not in grants:
            grants[place] = _writable(caller, *place)
        agent = grants[place]
        if isinstance(agent, str):
            rejected.add(len(fresh), f"trace {trace}: {agent}", agent.startswith("forbidden"))
            continue
        made = traces.assemble([*old, *fresh])
        if len(made.version) > MAX_VERSION:
            rejected.add(len(fresh), f"trace {trace}: a version over {MAX_VERSION} characters")
            continue
        kept += [(run_id, s) for s in fresh if s.telling]
        runs.append(_run_row(caller, run_id, trace, agent, place[1], made, now))
        versions.setdefault(agent.pk, set()).add(made.version)
    if rejected.forbidden and rejected.forbidden == rejected.count and not kept:
        raise Forbidden(rejected.result().message)  # the token may write none of it
    _keep_spans(kept, now)
    if runs:
        _upsert_runs(runs)
        save_tools(*runs)  # the runs inbox's tool filter: as the assembled calls say
    _note_versions(versions)
    return rejected.result()


def _new(spans: list[traces.SpanFacts], old: list[traces.SpanFacts]) -> list[traces.SpanFacts]:
    """The spans not kept already (each once: an export may repeat one)."""
    seen = {s.span_id for s in old}
    fresh = []
    for span in spans:
        if span.span_id not in seen:
            seen.add(span.span_id)
            fresh.append(span)
    return fresh


def _writable(caller: Principal, agent_id: str, project_id: str) -> AgentRef | str:
    """The agent, when the project serves it and the caller may write there; else why not."""
    try:
        agent, grants = scope(caller, agent_id, project_id)
        grants.require("write", agent, project_id)
    except DomainError as err:
        return f"{err.code} (agent {agent_id}, project {project_id})"
    return agent


def _at(start_ns: int, now: datetime) -> datetime:
    """When the run started, to the millisecond; a start that is no time (zero, or later
    than a day from now) is taken as now."""
    try:
        when = _EPOCH + timedelta(microseconds=start_ns // 1000)
    except OverflowError:
        return now
    if start_ns <= 0 or when > now + timedelta(days=1):
        return now
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


def _run_row(
    caller: Principal,
    run_id: str,
    trace: str,
    agent: AgentRef,
    project_id: str,
    made: traces.Assembly,
    now: datetime,
) -> dict[str, Any]:
    return {
        "id": run_id,
        "tenant_id": caller.tenant_id,
        "agent_pk": agent.pk,
        "project_id": project_id,
        "version": made.version,
        "status": "finished" if made.finished else "running",
        "input": made.input,
        "output": made.output,
        "search_text": run_document(made.input, made.output),
        "calls": made.calls,
        "erased": False,
        "replay_of": None,
        "at": _at(made.start_ns, now),
        "trace_id": trace,
        "error": made.error,
    }


# ---------------------------------------------------------------- statements


def _chunks(ids: Iterable[str]) -> Iterator[list[str]]:
    ids = sorted(ids)
    for at in range(0, len(ids), _CHUNK):
        yield ids[at : at + _CHUNK]


def _take_turns(by_run: dict[str, Any]) -> None:
    """On PostgreSQL, wait for the other transactions that write these traces, in one order
    (no deadlock); held to the end of the transaction."""
    if dialect() != "postgresql":
        return
    keys = sorted({int(run_id[4:12], 16) - 2**31 for run_id in by_run})
    sql().execute(_TURNS, {"keys": keys})


_TURNS = text(
    "SELECT pg_advisory_xact_lock(2218, k) "
    "FROM (SELECT unnest(CAST(:keys AS integer[])) AS k ORDER BY 1) AS turns"
)
_KNOWN = (
    select(Run.id, Agent.id.label("agent_id"), Run.project_id, Run.erased)
    .join(Agent, Agent.pk == Run.agent_pk)
    .where(Run.id.in_(bindparam("ids", expanding=True)))
)
_STORED = select(
    TraceSpan.run_id, TraceSpan.span_id, TraceSpan.parent_id, TraceSpan.start_ns, TraceSpan.facts
).where(TraceSpan.run_id.in_(bindparam("ids", expanding=True)))


def _known_runs(by_run: dict[str, Any]) -> dict[str, _Known]:
    found = {}
    for ids in _chunks(by_run):
        for row in sql().execute(_KNOWN, {"ids": ids}):
            found[row.id] = _Known(row.agent_id, row.project_id, bool(row.erased))
    return found


def _stored_spans(by_run: dict[str, list[traces.SpanFacts]]) -> dict[str, list[traces.SpanFacts]]:
    found: dict[str, list[traces.SpanFacts]] = {}
    for ids in _chunks(by_run):
        for row in sql().execute(_STORED, {"ids": ids}):
            trace = by_run[row.run_id][0].trace_id
            span = traces.SpanFacts(
                trace, row.span_id, row.parent_id, row.start_ns, orjson.loads(row.facts)
            )
            found.setdefault(row.run_id, []).append(span)
    return found


def _dumps(facts: dict[str, Any]) -> str:
    try:
        return orjson.dumps(facts).decode()
    except TypeError:  # an integer past 64 bits, which a parsed input may hold
        return json.dumps(facts)


def _keep_spans(kept: list[tuple[str, traces.SpanFacts]], now: datetime) -> None:
    """New spans, in one statement (a span kept already stays)."""
    received = sqlite_time(now) if dialect() == "sqlite" else now
    rows = [
        (run_id, s.span_id, s.parent_id, s.start_ns, _dumps(s.facts), received)
        for run_id, s in kept
    ]
    insert_rows(_INSERT_SPANS, rows, "ON CONFLICT DO NOTHING")


_INSERT_SPANS = "INSERT INTO trace_spans (run_id, span_id, parent_id, start_ns, facts, received_at)"


def _upsert_runs(runs: list[dict[str, Any]]) -> None:
    """The traces' runs, made or remade in one statement; an erased run keeps its cleared
    content. JSON is written as SQLAlchemy's JSON type writes it (`json.dumps`), so a run
    reads the same whichever way it came."""
    sqlite = dialect() == "sqlite"
    rows = [
        tuple(
            json.dumps(run[name]) if name in _JSON_COLUMNS
            else sqlite_time(run[name]) if sqlite and name == "at"
            else run[name]
            for name in _RUN_COLUMNS
        )
        for run in runs
    ]  # fmt: skip
    insert_rows(_INSERT_RUNS, rows, _REMADE)


_RUN_COLUMNS = (
    "id", "tenant_id", "agent_pk", "project_id", "version", "status", "input", "output",
    "search_text", "calls", "erased", "replay_of", "at", "trace_id", "error",
)  # fmt: skip
_JSON_COLUMNS = frozenset({"input", "output", "calls"})
_INSERT_RUNS = f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)})"
_REMADE = (
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in _ASSEMBLED)
    + " WHERE NOT runs.erased"
)


def _note_versions(versions: dict[int, set[str]]) -> None:
    """Versions an agent had not run before join its versions, as a run recorded does."""
    for pk, seen in versions.items():
        agent = db.session.get(Agent, pk)
        missing = sorted(seen - set(agent.versions))
        if missing:
            agent.versions = [*agent.versions, *missing]
    db.session.flush()


# ---------------------------------------------------------------- held spans that never landed


def delete_expired_held_spans(now: datetime, limit: int = 1000) -> int:
    """Delete at most `limit` spans held longer than `KINDGI_OTLP_HOLD_HOURS` (their trace never
    named its agent and project), and so also the spans of runs deleted since; how many. One
    short statement: call it until it deletes nothing, committing after each."""
    cutoff = now - timedelta(hours=float(current_app.config["OTLP_HOLD_HOURS"]))
    doomed = (
        select(TraceSpan.run_id, TraceSpan.span_id)
        .where(TraceSpan.received_at < cutoff, ~exists().where(Run.id == TraceSpan.run_id))
        .limit(limit)
    )
    pair = tuple_(TraceSpan.run_id, TraceSpan.span_id)
    return sql().execute(delete(TraceSpan).where(pair.in_(doomed))).rowcount
