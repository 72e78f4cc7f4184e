"""What every service module shares: the clock, ids, the request's connection, and the judge's
queue as the service sees it.

The service runs inside the request's transaction (see `kindgi/http.py`): it changes the session
and flushes, and never commits or rolls back itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from flask import current_app
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from .. import judge
from ..database import db


def clock() -> datetime:
    """Now, naive UTC to the millisecond (what is stored is what is shown)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(10)}"


def sql() -> Connection:
    """The request's connection, in the session's transaction: reads that need no ORM objects
    run on it as prebuilt Core statements, several times cheaper than ORM queries."""
    return db.session.connection()


def dialect() -> str:
    """The session's database, "sqlite" or "postgresql": the prebuilt statements of each."""
    return db.session.get_bind().dialect.name


_MAX_PARAMETERS = 30_000  # in one statement: SQLite takes at most 32,766


def insert_rows(head: str, rows: Sequence[tuple[Any, ...]], tail: str = "") -> None:
    """Rows given straight to the driver as multi-row VALUES, as many a statement as its
    parameters allow: `head` is `INSERT INTO table (columns)`, `tail` what a conflict does.
    For hundreds of rows a request, where SQLAlchemy's work on each row's parameters weighed,
    and executemany ran the statement once a row (SQLite then opened and closed a statement
    transaction for each row's triggers and indexes). The values must be as the driver takes
    them: JSON as text, and on SQLite a time as `sqlite_time` writes it."""
    if not rows:
        return
    mark = "?" if dialect() == "sqlite" else "%s"
    one = "(" + ", ".join([mark] * len(rows[0])) + ")"
    per = max(_MAX_PARAMETERS // len(rows[0]), 1)
    for at in range(0, len(rows), per):
        chunk = rows[at : at + per]
        values = ", ".join([one] * len(chunk))
        params = tuple(value for row in chunk for value in row)
        sql().exec_driver_sql(f"{head} VALUES {values} {tail}", params)


def sqlite_time(when: datetime) -> str:
    """A time as SQLAlchemy writes it into SQLite (what `insert_rows` must be given there)."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


def insert_for(dialect_name: str, table: Any) -> Any:
    """The dialect's INSERT (it has ON CONFLICT), for prebuilt statements."""
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def judge_settings() -> judge.Settings | None:
    """The configured judge (`KINDGI_JUDGE_*`), or None: then answers are `ungraded`."""
    config = current_app.config
    if not config.get("JUDGE_URL"):
        return None
    return judge.Settings(
        url=config["JUDGE_URL"],
        model=config["JUDGE_MODEL"],
        api_key=config.get("JUDGE_API_KEY"),
        timeout=float(config["JUDGE_TIMEOUT"]),
        tries=int(config["JUDGE_TRIES"]),
        concurrency=int(config["JUDGE_CONCURRENCY"]),
    )


QUEUE = "kindgi.queue"  # the app's extension that holds its task queue


class Queue(Protocol):
    """What the service asks of the judge's task queue (`kindgi/queue.py` puts one on the app):
    the service never imports the queue, which stands on it."""

    def enqueue(self, question_pks: list[int], after: float = 0) -> None:
        """Hand these questions to the workers, `after` seconds from now; best effort."""

    def size(self) -> int:
        """Tasks waiting; raises when the queue can't be reached."""


def task_queue() -> Queue:
    """The app's task queue."""
    return current_app.extensions[QUEUE]


def take_turns(key: str) -> None:
    """Wait for the other transactions that took `key`, and hold it to this one's end: for a
    read-then-write that two requests must not interleave. On PostgreSQL an advisory lock;
    SQLite's writers take turns anyway."""
    if dialect() == "postgresql":
        sql().execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))


def bulk() -> None:
    """This transaction's next statements may copy a whole test set: on PostgreSQL they get
    `KINDGI_DB_BULK_STATEMENT_TIMEOUT_MS`, not the usual statement timeout."""
    if dialect() == "postgresql":
        ms = int(current_app.config["DB_BULK_STATEMENT_TIMEOUT_MS"])
        sql().exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")


def analyze(table: Any, rows: int) -> None:
    """On PostgreSQL, after copying many rows into `table` in this transaction: fresh
    statistics, or the planner still takes the table for empty and scans it where an index
    would find a row (a run's results were read at 5 s a batch at a third of a million)."""
    if dialect() == "postgresql" and rows >= ANALYZE_AFTER:
        sql().exec_driver_sql(f"ANALYZE {table.name}")


ANALYZE_AFTER = 10_000  # rows copied at once; autovacuum analyzes smaller changes in time
