"""Real databases for tests: SQLite files, or PostgreSQL databases when KINDGI_TEST_DATABASE_URL
names a server. The test world is loaded once into a template; each test gets a quick copy
(a file copy, or `CREATE DATABASE … TEMPLATE …`), never a mock and never a shared database.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

SERVER = os.environ.get("KINDGI_TEST_DATABASE_URL", "")
ENGINE = "postgresql" if SERVER.startswith("postgresql") else "sqlite"
# The tests' databases are thrown away after each test, and the tests never crash the server they
# run on (the chaos test only ends its own database's connections, and its database is made by
# bench/chaos.py without this setting): a commit need not wait for the disk. That halves the time
# to copy the template, and every commit in a test is quicker.
FAST = "-csynchronous_commit=off"


class Databases:
    """Makes, copies and drops the databases one test session uses."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.names = itertools.count()
        self.prefix = f"kt{os.getpid()}"
        self.template: str | None = None
        self.background = ThreadPoolExecutor(max_workers=1)  # PostgreSQL's copies and drops
        self.ready: deque[Future[str]] = deque()

    def _name(self) -> str:
        return f"{self.prefix}_{next(self.names)}"

    # ------------------------------------------------------------ one of two engines

    def _admin(self) -> psycopg.Connection:
        url = make_url(SERVER).set(drivername="postgresql", database="postgres")
        return psycopg.connect(
            url.render_as_string(hide_password=False), autocommit=True, options=FAST
        )

    def _pg_url(self, name: str) -> str:
        return (
            make_url(SERVER)
            .set(drivername="postgresql+psycopg", database=name)
            .update_query_dict({"options": FAST})
            .render_as_string(hide_password=False)
        )

    def empty(self) -> str:
        """A new, empty database's URL."""
        name = self._name()
        if ENGINE == "sqlite":
            return f"sqlite:///{self.folder / (name + '.sqlite')}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self._pg_url(name)

    def make_template(self, fill: Callable[[str], None]) -> None:
        """Make the template once: `fill(url)` creates the schema and loads the world."""
        url = self.empty()
        fill(url)
        self.template = url

    def clone(self) -> str:
        """A new database holding what the template holds. On PostgreSQL the copy takes a few
        hundred milliseconds, waiting on the server: the next test's copy is made in the
        background while this test runs."""
        assert self.template is not None
        name = self._name()
        if ENGINE == "sqlite":
            path = self.folder / (name + ".sqlite")
            shutil.copyfile(make_url(self.template).database, path)
            return f"sqlite:///{path}"
        if not self.ready:
            self.ready.append(self.background.submit(self._copy, name))
            name = self._name()
        url = self.ready.popleft().result()
        self.ready.append(self.background.submit(self._copy, name))
        return url

    def _copy(self, name: str) -> str:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{make_url(self.template).database}"')
        return self._pg_url(name)

    def drop(self, url: str) -> None:
        """Drop a test's database (on PostgreSQL in the background, after the copies asked for
        before it; `drop_all` drops whatever is left)."""
        if ENGINE == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(make_url(url).database + suffix).unlink(missing_ok=True)
            return
        self.background.submit(self._drop, make_url(url).database)

    def _drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_all(self) -> None:
        self.background.shutdown(wait=True)
        if ENGINE == "postgresql":
            with self._admin() as conn:
                names = conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s",
                    (self.prefix + "\\_%",),
                ).fetchall()
                for (name,) in names:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def check_server() -> None:
    """Fail loudly, never skip, when the named PostgreSQL can't be reached."""
    if ENGINE != "postgresql":
        return
    url = make_url(SERVER).set(drivername="postgresql", database="postgres")
    try:
        psycopg.connect(url.render_as_string(hide_password=False), connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        raise SystemExit(f"KINDGI_TEST_DATABASE_URL={SERVER} can't be reached: {exc}") from None


@contextmanager
def write_lock(url: str) -> Iterator[None]:
    """Hold the database's write lock from a second connection, as another writer would."""
    if ENGINE == "sqlite":
        conn = sqlite3.connect(make_url(url).database, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.rollback()
            conn.close()
        return
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as pg:  # a transaction until the block ends
        pg.execute("LOCK TABLE cases, tallies, runs, tokens, snapshots, judge_questions, "
                   "judge_verdicts IN EXCLUSIVE MODE")  # fmt: skip
        try:
            yield
        finally:
            pg.rollback()
