"""The database handle and the engine settings that make SQLite and PostgreSQL behave alike.

Writes must wait a bounded time for a lock and then fail as "busy" (mapped to 503
`database-busy`), never hang: SQLite gets a busy timeout and `BEGIN IMMEDIATE` for writing
transactions; PostgreSQL gets `lock_timeout` and `statement_timeout`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import DeclarativeBase


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
    """Run the block in a transaction of its own that only reads, even in a writing request:
    on SQLite it takes no write lock, so the other workers' writes go on meanwhile."""
    if not _writing.get():
        yield
        return
    _writing.set(False)
    try:
        yield
    finally:
        db.session.rollback()
        _writing.set(True)


def engine_options(uri: str, busy_timeout_ms: int, statement_timeout_ms: int) -> dict[str, Any]:
    """Engine options for the database named by `uri`."""
    if uri.startswith("postgresql"):
        return {
            "pool_pre_ping": True,
            "connect_args": {
                "options": f"-c lock_timeout={busy_timeout_ms} "
                f"-c statement_timeout={statement_timeout_ms}",
            },
        }
    return {"connect_args": {"timeout": busy_timeout_ms / 1000, "check_same_thread": False}}


def install_sqlite_hooks(engine: Engine) -> None:
    """Take over SQLite's transaction handling so writers begin with BEGIN IMMEDIATE."""
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if _writing.get() else "BEGIN")


def is_busy(exc: BaseException) -> bool:
    """True when the database refused in time: a lock wait, a timeout or a serialization failure."""
    if isinstance(exc, OperationalError) and "database is locked" in str(exc.orig):
        return True
    if isinstance(exc, DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None)
        # 55P03 lock_not_available, 57014 query_canceled, 40001/40P01 serialization/deadlock
        return sqlstate in {"55P03", "57014", "40001", "40P01"}
    return False
