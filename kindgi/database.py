"""The database handle, the transaction's life, and the engine settings that make SQLite and
PostgreSQL behave alike.

A request runs in one transaction, begun and ended at the request boundary (`kindgi/http.py`)
with `commit` and `rollback` here; the few writes that must be visible before the request ends
(a sign-in's throttle row, an Idempotency-Key's claim) commit on their own with `on_its_own`.

Writes must wait a bounded time for a lock and then fail as "busy" (mapped to 503
`database-busy`), never hang: SQLite gets a busy timeout and `BEGIN IMMEDIATE` for writing
transactions; PostgreSQL gets `lock_timeout` and `statement_timeout`.

A failed statement or a refused commit changed nothing. A COMMIT whose answer never came back
(the connection to PostgreSQL lost once it was sent) may have happened: `OutcomeUnknown`, which
the request boundary resolves from the Idempotency-Key's record when there is one.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase

from .errors import DatabaseBusy, DomainError, Internal, OutcomeUnknown

log = logging.getLogger("kindgi")


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)

# Whether the transaction about to begin will write: decides BEGIN IMMEDIATE on SQLite, so a
# writer takes the write lock up front (waiting on the busy timeout) instead of failing later.
_writing: contextvars.ContextVar[bool] = contextvars.ContextVar("kindgi_writing", default=False)


def set_writing(value: bool) -> None:
    """Mark (or unmark) the transactions begun from here on in this context as writers."""
    _writing.set(value)


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """On SQLite, run the block in a transaction of its own that only reads, even in a writing
    request: it takes no write lock, so the other workers' writes go on meanwhile. (PostgreSQL
    locks only the rows a transaction writes: there the block simply runs.)"""
    if not _writing.get() or db.session.get_bind().dialect.name != "sqlite":
        yield
        return
    _writing.set(False)
    try:
        yield
    finally:
        abandon()
        _writing.set(True)


def abandon() -> None:
    """End the session's transaction, changing nothing, whatever the connection's state. When
    even the ROLLBACK fails (PostgreSQL ended the connection between the transaction's last
    statement and it, so the ROLLBACK read the news), the connection is dropped instead: the
    server rolled the transaction back as it ended it, and an error path must never fail on
    its own cleanup (it was a 500 in place of the refusal or 503 being answered)."""
    try:
        db.session.rollback()
    except SQLAlchemyError:
        db.session().invalidate()  # the scoped session does not pass this one on


def after_commit(callback: Callable[[], None]) -> None:
    """Run `callback` once the session's transaction has committed (never if it rolls back):
    work for others, such as queueing the judge's questions, that must not see it before."""
    db.session.info.setdefault("after_commit", []).append(callback)


def failed(exc: SQLAlchemyError) -> DomainError:
    """End the transaction a statement failed in, so nothing was changed, and say why: 503
    `database-busy` when the database could not answer (a retry will do), else 500 `internal`."""
    abandon()
    db.session.info.pop("after_commit", None)
    if is_busy(exc):
        return DatabaseBusy()
    log.exception("a write failed")
    return Internal()


def commit() -> None:
    """Commit the session's changes, then run what waits for the commit.

    Refused (`failed`): 503 `database-busy` or 500 `internal`, and nothing was changed. The
    answer to the COMMIT lost (`answer_lost`): `OutcomeUnknown`, for it may have happened. What
    runs after the commit can't undo it, so it can't fail the request either: it is logged.
    """
    try:
        db.session.flush()  # the statements' own failures, before COMMIT is sent
    except SQLAlchemyError as exc:
        raise failed(exc) from exc
    try:
        db.session.commit()
    except SQLAlchemyError as exc:
        refusal = failed(exc)
        raise (OutcomeUnknown() if answer_lost(exc) else refusal) from exc
    for callback in db.session.info.pop("after_commit", []):
        try:
            callback()
        except Exception:
            log.exception("work after a commit failed; the change stands")


def rollback() -> None:
    """End the session's transaction, changing nothing; what follows only reads."""
    abandon()
    db.session.info.pop("after_commit", None)
    set_writing(False)


@contextlib.contextmanager
def on_its_own() -> Iterator[None]:
    """Commit what the block writes as soon as it ends (nothing else may be pending): for the
    writes other requests must see before this one finishes. An error in the block rolls it
    back and goes on; a commit whose answer was lost is `database-busy`."""
    try:
        yield
    except BaseException:
        abandon()
        raise
    try:
        commit()
    except OutcomeUnknown as exc:  # what the block guards has not run yet: a retry will do
        raise DatabaseBusy() from exc


def engine_options(uri: str, busy_timeout_ms: int, statement_timeout_ms: int) -> dict[str, Any]:
    """Engine options for the database named by `uri`. On both, an error never quotes its SQL's
    parameters (`hide_parameters`): they hold what callers and judges wrote."""
    if uri.startswith("postgresql"):
        return {
            "hide_parameters": True,
            # No ping before each checkout (a round trip every request): a connection found
            # dead answers 503 `database-busy` once and the pool reconnects (see `is_busy`).
            "pool_recycle": 1800,
            "connect_args": {
                "options": f"-c lock_timeout={busy_timeout_ms} "
                f"-c statement_timeout={statement_timeout_ms}",
            },
        }
    return {
        "hide_parameters": True,
        "connect_args": {"timeout": busy_timeout_ms / 1000, "check_same_thread": False},
    }


def install_hooks(engine: Engine, busy_timeout_s: float) -> None:
    """Transactions as each engine needs them: on SQLite writers begin with BEGIN IMMEDIATE;
    on PostgreSQL reads run in autocommit."""
    if engine.dialect.name == "postgresql":
        _install_postgresql_hooks(engine)
    elif engine.dialect.name == "sqlite":
        _install_sqlite_hooks(engine, busy_timeout_s)


def _install_postgresql_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection, _record, _proxy):
        # A request that only reads runs each statement on its own: the snapshot per statement
        # that READ COMMITTED gives inside a transaction too, without BEGIN and ROLLBACK.
        dbapi_connection.autocommit = not _writing.get()


def _install_sqlite_hooks(engine: Engine, busy_timeout_s: float) -> None:

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    turns = _WriterTurns(engine.url.database, busy_timeout_s)

    @event.listens_for(engine, "begin")
    def _begin(conn):
        if not _writing.get():
            conn.exec_driver_sql("BEGIN")
            return
        turns.take()
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            turns.give_back()
            raise

    @event.listens_for(engine, "checkin")
    def _end(_dbapi_connection, _record):
        # Back in the pool, so its transaction has ended (the "commit" event comes before the
        # COMMIT itself: the next writer would find the lock still held, and sleep)
        turns.give_back()


class _WriterTurns:
    """SQLite writers of all processes take turns on a lock file beside the database.

    SQLite's own busy handler sleeps 1, 2, 5, 10… ms between tries for its write lock, so a
    writer waited long after the lock was free; here the next writer goes within 0.2 ms. Past
    the busy timeout a writer stops waiting its turn and lets SQLite's timeout decide (so a
    writer held up by one that keeps the lock too long waits at most twice the timeout).
    """

    def __init__(self, database: str | None, timeout_s: float) -> None:
        self.path = f"{database}.writers" if database and database != ":memory:" else None
        self.timeout_s = timeout_s
        self.fd, self.pid = -1, -1
        self.mutex = threading.Lock()  # the threads of one process: flock is per process
        self.mine = threading.local()

    def take(self) -> None:
        if self.path is None or getattr(self.mine, "turn", False):
            return
        deadline = time.monotonic() + self.timeout_s
        if not self.mutex.acquire(timeout=self.timeout_s):
            return
        # Opened after the fork, so each process has its own; and under the mutex, or two
        # threads at a process's first write each open one, the lock taken on the first is
        # never given back, and every later writer waits out its timeout
        if self.pid != os.getpid():
            self.fd, self.pid = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600), os.getpid()
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.mine.turn = True
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.mutex.release()
                    return
                time.sleep(0.0002)

    def give_back(self) -> None:
        if getattr(self.mine, "turn", False):
            self.mine.turn = False
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.mutex.release()


# PostgreSQL's answers when the connection ends: 57P01-57P03 shutting down, crashed or starting
# up (class 08, the connection failed, too)
_GONE_SQLSTATES = {"57P01", "57P02", "57P03"}
# when it can't serve now: 55P03 lock_not_available, 57014 query_canceled (statement timeout),
# 40001/40P01 serialization failure/deadlock; and unreachable: gone, 53300 too many connections
_RETRY_SQLSTATES = {"55P03", "57014", "40001", "40P01", "53300", *_GONE_SQLSTATES}
# SQLite's: the lock held too long, or the file can't be opened (its volume away)
_RETRY_SQLITE = {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN"}


def is_busy(exc: BaseException) -> bool:
    """True when the database could not answer, so a retry will do: a lock wait, a timeout, a
    serialization failure, a connection lost (SQLAlchemy then renews the pool's) or never made
    (the server down, restarting or full)."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if getattr(orig, "sqlite_errorname", None) in _RETRY_SQLITE:
        return True
    if "database is locked" in str(orig):
        return True
    sqlstate = getattr(orig, "sqlstate", False)
    if sqlstate is None:  # psycopg's own failure, with no server answer: it could not connect
        return isinstance(exc, OperationalError)
    return sqlstate in _RETRY_SQLSTATES or str(sqlstate).startswith("08")


def answer_lost(exc: BaseException) -> bool:
    """True when the connection to PostgreSQL ended before its answer came back, so what was
    sent may have taken effect. SQLite answers in process: its answers are never lost."""
    if not isinstance(exc, DBAPIError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", False)  # psycopg's errors have one, maybe None
    if sqlstate is False:
        return False
    if exc.connection_invalidated or sqlstate is None:
        return True
    return sqlstate in _GONE_SQLSTATES or sqlstate.startswith("08")
