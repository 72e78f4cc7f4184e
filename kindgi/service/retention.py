"""Retention: a run that no case or correction was made from is deleted once it is older than
`KINDGI_RUN_RETENTION_DAYS` (30 by default); every other run is kept for good.

A case never needs its run: its snapshot is a copy of the run's content, and a run a case was
made from is never deleted anyway. What a run takes with it is its `run_tools` rows (ON DELETE
CASCADE). `flask --app app kindgi prune` runs it, and the judge's worker once a day.

This is the one service function that commits: it deletes in small batches, each its own short
transaction, so that no writer waits on it for long (the longest is measured and reported).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import bindparam, delete, exists, false, select, tuple_

from ..database import abandon, commit, db, set_writing
from ..models import AgentProject, Case, Run
from .common import clock, dialect, sql
from .traces import delete_expired_held_spans

# Runs deleted a transaction: on PostgreSQL each takes three foreign keys' triggers with it
# (a batch of 1,000 held its locks 50 ms on a quiet machine, 250 some 13 ms)
BATCH = 250


@dataclass
class Pruned:
    """What a prune did: the cut-off, the runs and spans deleted, and how long each batch's
    write transaction took (from its BEGIN to the end of its COMMIT)."""

    before: datetime
    runs: int = 0
    spans: int = 0  # trace spans gone: held past KINDGI_OTLP_HOLD_HOURS, or their run's
    held_ms: list[float] = field(default_factory=list)  # each batch's, in order

    @property
    def batches(self) -> int:
        return len(self.held_ms)

    @property
    def longest_ms(self) -> float:
        return max(self.held_ms, default=0.0)

    @property
    def p99_ms(self) -> float:
        """The time 99 % of the batches held the write lock for at most."""
        held = sorted(self.held_ms)
        return held[min(len(held) - 1, len(held) * 99 // 100)] if held else 0.0


def retention_days(days: Any = None) -> int:
    """The days an unreferenced run is kept: `days`, else `KINDGI_RUN_RETENTION_DAYS`; a whole
    number, at least 1 (a run younger than a day may still be named by a kept Idempotency-Key
    answer). ValueError otherwise."""
    value = current_app.config["RUN_RETENTION_DAYS"] if days is None else days
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"KINDGI_RUN_RETENTION_DAYS must be a whole number of days, at least 1: {value!r}"
        )
    return value


# The next batch of an agent's runs in a project that may go: older than the cut-off, no case
# made from them, after the last batch's position (oldest first, along the list's index).
_DOOMED = (
    select(Run.at, Run.id)
    .where(
        Run.agent_pk == bindparam("agent_pk"),
        Run.project_id == bindparam("project_id"),
        Run.at < bindparam("before"),
        tuple_(Run.at, Run.id) > tuple_(bindparam("after_at"), bindparam("after_id")),
        Run.has_case == false(),
    )
    .order_by(Run.at, Run.id)
    .limit(bindparam("limit"))
)
# Deleting them, each checked again in the deleting transaction: a case made from one since
# (its mark set, and on PostgreSQL its row locked until then) keeps it.
_DELETE = delete(Run).where(
    Run.id.in_(bindparam("ids", expanding=True)),
    Run.at < bindparam("before"),
    Run.has_case == false(),
    ~exists().where(Case.run_id == Run.id),
)


def prune_runs(days: int | None = None, batch: int = BATCH) -> Pruned:
    """Delete every run older than the retention that no case or correction was made from,
    `batch` at a time, each batch committed on its own. Running it again deletes nothing."""
    before = clock() - timedelta(days=retention_days(days))
    pruned = Pruned(before)
    pairs = db.session.execute(select(AgentProject.agent_pk, AgentProject.project_id)).all()
    behind: list[dict[str, Any]] = [
        {
            "agent_pk": agent_pk,
            "project_id": project_id,
            "before": before,
            "after_at": datetime.min,
            "after_id": "",
            "limit": batch,
        }
        for agent_pk, project_id in pairs
    ]
    while behind:
        # The pair furthest behind in time goes next, so the runs go in about the order they
        # were stored: each page is written once, not once for every pair whose runs share it
        # (on PostgreSQL a third of the WAL, and of the pages the prune itself must write out)
        params = min(behind, key=lambda pair: (pair["after_at"], pair["after_id"]))
        doomed = sql().execute(_DOOMED, params).all()
        abandon()  # the read's own transaction ends: no lock is kept
        if not doomed:
            behind.remove(params)
            continue
        params["after_at"], params["after_id"] = doomed[-1]
        deleted, took = _delete([ident for _, ident in doomed], before)
        pruned.runs += deleted
        pruned.held_ms.append(took * 1000)
    while True:  # then the trace spans no run will be made of, or whose run just went
        deleted, took = _in_own_transaction(lambda: delete_expired_held_spans(clock(), batch))
        if not deleted:
            return pruned
        pruned.spans += deleted
        pruned.held_ms.append(took * 1000)


def _delete(ids: list[str], before: datetime) -> tuple[int, float]:
    """Delete these runs in a transaction of their own (see `_in_own_transaction`)."""
    return _in_own_transaction(
        lambda: sql().execute(_DELETE, {"ids": ids, "before": before}).rowcount
    )


def _in_own_transaction(delete_some: Callable[[], int]) -> tuple[int, float]:
    """Run one batch's delete in a transaction of its own: how many rows went, and the seconds
    the transaction took from its BEGIN (where SQLite takes the write lock) to its COMMIT's
    end."""
    set_writing(True)
    try:
        started = time.perf_counter()
        if dialect() == "postgresql":
            # its locks go at COMMIT, not once the WAL is on disk: a crash may forget the last
            # batches, which the next prune deletes again
            sql().exec_driver_sql("SET LOCAL synchronous_commit = off")
        deleted = delete_some()
        commit()
        return deleted, time.perf_counter() - started
    finally:
        set_writing(False)
