"""Real databases for tests: SQLite files, or PostgreSQL databases when KINDGI_TEST_DATABASE_URL
names a server. The test world is loaded once into a template; each test gets a database of its
own holding what the template holds, never a mock and never a shared database.

On SQLite that is a file copy. On PostgreSQL a `CREATE DATABASE … TEMPLATE …` takes about half a
second and its `DROP DATABASE` a second or more under load (PostgreSQL 15 forces a checkpoint for
each), most of a test's time: so a test's database, once the test is over, is renamed (whatever
still holds the old name fails from then on), checked to have the template's schema and no planner
statistics of its own, then emptied (DELETE, VACUUM) and refilled with the template's rows and
sequence values and vacuumed to the template's table sizes, and serves a later test (its indexes
hold the same entries, maybe on other page counts: see SIZES). A database that fails a check is
dropped and a new copy made instead.
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
from dataclasses import dataclass
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

# What makes a database the template's twin, besides its rows: one line per schema object, role
# setting, sequence's parameters, prepared transaction, large object or table analysed. Any test
# that changed one (a migration's downgrade, an ANALYZE, a renamed table) leaves a database that is
# dropped, not reused.
USER_NAMESPACE = "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_'"
SHAPE = f"""
SELECT md5(string_agg(line, E'\\n' ORDER BY line)) FROM (
  SELECT format('class %s.%s %s %s %s %s %s', n.nspname, c.relname, c.relkind,
                c.relpersistence, c.relowner::regrole, c.relacl, c.reloptions)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('column %s %s %s %s %s %s %s %s', a.attrelid::regclass, a.attnum, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,
                a.attgenerated, pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE {USER_NAMESPACE} AND a.attnum > 0
  UNION ALL
  SELECT format('index %s', pg_get_indexdef(i.indexrelid))
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('constraint %s %s %s %s', co.conrelid::regclass, co.contypid::regtype,
                co.conname, pg_get_constraintdef(co.oid))
    FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('trigger %s %s', pg_get_triggerdef(t.oid), t.tgenabled)
    FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION ALL
  SELECT format('rule %s %s', r.ev_class::regclass, pg_get_ruledef(r.oid)) FROM pg_rewrite r
    JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('policy %s %s %s', p.polrelid::regclass, p.polname, p.polqual) FROM pg_policy p
  UNION ALL
  SELECT format('function %s %s %s', p.oid::regprocedure, p.provolatile, md5(p.prosrc))
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('type %s.%s %s %s', n.nspname, t.typname, t.typtype,
                (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                   FROM pg_enum e WHERE e.enumtypid = t.oid))
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('namespace %s %s', n.nspname, n.nspacl) FROM pg_namespace n
   WHERE {USER_NAMESPACE}
  UNION ALL
  SELECT format('extension %s %s', e.extname, e.extversion) FROM pg_extension e
  UNION ALL
  SELECT format('sequence %s %s %s %s %s %s', s.seqrelid::regclass, s.seqincrement, s.seqstart,
                s.seqmin, s.seqmax, s.seqcycle)
    FROM pg_sequence s
  UNION ALL
  SELECT format('setting %s %s', r.setrole, r.setconfig) FROM pg_db_role_setting r
   WHERE r.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT format('event trigger %s', evtname) FROM pg_event_trigger
  UNION ALL
  SELECT format('prepared %s', gid) FROM pg_prepared_xacts WHERE database = current_database()
  UNION ALL
  SELECT format('large objects %s', count(*)) FROM pg_largeobject_metadata
  UNION ALL
  SELECT format('statistics %s.%s.%s', schemaname, tablename, attname) FROM pg_stats
   WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
) AS shape(line)
"""

# Each table's size as the planner reads it to estimate rows (see `Contents.read`). A refilled
# copy's indexes hold the same entries as the template's, but not on the same number of pages
# (they were filled in another order): that may change a plan's cost, never what it finds.
SIZES = f"""
SELECT md5(string_agg(format('%s %s %s', c.oid::regclass, c.relpages, c.reltuples), E'\\n'
                      ORDER BY c.oid::regclass::text))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND {USER_NAMESPACE}
"""


@dataclass
class Contents:
    """What a PostgreSQL template holds, to refill a used copy with: its shape (see SHAPE), each
    table's rows (COPY's binary format) in an order its foreign keys accept, each sequence's
    state."""

    shape: str
    sizes: str
    tables: list[tuple[str, bytes]]
    sequences: list[tuple[str, int, bool]]

    @classmethod
    def read(cls, conn: psycopg.Connection) -> Contents:
        """Read the template `conn` is on (autocommit), vacuumed first: VACUUM sets each table's
        size as the planner reads it (pages, rows; the search reads the cases' count there), as
        it will for a refilled copy."""
        names = [
            name
            for (name,) in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n "
                f"ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND {USER_NAMESPACE}"
            )
        ]
        conn.execute("VACUUM " + ", ".join(names))
        shape, sizes = (conn.execute(sql).fetchone()[0] for sql in (SHAPE, SIZES))
        needs = {name: set() for name in names}
        for table, referenced in conn.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid <> confrelid"
        ):
            needs[table].add(referenced)
        order: list[str] = []
        while needs:
            ready = sorted(name for name, wanted in needs.items() if not wanted - set(order))
            if not ready:
                raise RuntimeError(f"foreign keys in a cycle among {sorted(needs)}")
            for name in ready:
                order.append(name)
                del needs[name]
        tables = []
        for name in order:
            with conn.cursor().copy(f"COPY {name} TO STDOUT (FORMAT binary)") as copy:
                tables.append((name, b"".join(bytes(block) for block in copy)))
        sequences = []
        for (name,) in conn.execute(
            "SELECT seqrelid::regclass::text FROM pg_sequence ORDER BY 1"
        ).fetchall():
            last, called = conn.execute(f"SELECT last_value, is_called FROM {name}").fetchone()
            sequences.append((name, last, called))
        return cls(shape, sizes, tables, sequences)

    def refill(self, conn: psycopg.Connection) -> bool:
        """Give the database `conn` is on (autocommit) the template's rows and sequences, then
        vacuum it as the template was, if its shape is the template's; True if its tables'
        sizes are then the template's too.

        The rows go by DELETE and a VACUUM that gives back the emptied pages, not TRUNCATE,
        which makes every table and index a new file: 50 ms a refill against 160 for a world of
        some 10 kB. Foreign keys and triggers are off while the template's own rows go in and
        out (`session_replication_role`), as they were for TRUNCATE and COPY."""
        if conn.execute(SHAPE).fetchone()[0] != self.shape:
            return False
        names = ", ".join(name for name, _ in self.tables)
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            for name, _ in reversed(self.tables):
                conn.execute(f"DELETE FROM {name}")
        conn.execute("VACUUM " + names)
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            for name, rows in self.tables:
                with conn.cursor().copy(f"COPY {name} FROM STDIN (FORMAT binary)") as copy:
                    copy.write(rows)
            if self.sequences:
                calls = ", ".join("setval(%s, %s, %s)" for _ in self.sequences)
                conn.execute(
                    f"SELECT {calls}", [v for sequence in self.sequences for v in sequence]
                )
        conn.execute("VACUUM " + names)
        return conn.execute(SIZES).fetchone()[0] == self.sizes


class Databases:
    """Makes, copies and drops the databases one test session uses."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.names = itertools.count()
        self.prefix = f"kt{os.getpid()}"
        self.template: str | None = None
        self.contents: Contents | None = None  # on PostgreSQL, to reuse a test's database
        self.copies: set[str] = set()  # the names of the template's copies in use
        self.background = ThreadPoolExecutor(max_workers=1)  # PostgreSQL's copies and refills
        # PostgreSQL's drops, apart: each waits on a checkpoint (1 s, 18 s seen under load), and
        # the next test's database is not made to wait behind it.
        self.dropping = ThreadPoolExecutor(max_workers=1)
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
        if ENGINE == "postgresql":
            with psycopg.connect(self._conninfo(url), autocommit=True) as conn:
                self.contents = Contents.read(conn)

    def _conninfo(self, url: str) -> str:
        return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def clone(self) -> str:
        """A database of the test's own holding what the template holds. On PostgreSQL it is
        one made ready in the background while the previous test ran: a used one refilled, or
        else a new copy."""
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
        if not self.ready:
            self.ready.append(self.background.submit(self._copy, name))
        self.copies.add(make_url(url).database)
        return url

    def _copy(self, name: str) -> str:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{make_url(self.template).database}"')
        return self._pg_url(name)

    def drop(self, url: str) -> None:
        """Be done with a test's database. On PostgreSQL a copy of the template is refilled in
        the background for a later test (see the module's docstring), any other dropped in the
        background; `drop_all` drops whatever is left."""
        if ENGINE == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(make_url(url).database + suffix).unlink(missing_ok=True)
            return
        name = make_url(url).database
        if name in self.copies:
            self.copies.remove(name)
            self.ready.append(self.background.submit(self._refill, name, self._name()))
        else:
            self.dropping.submit(self._drop, name)

    def _refill(self, name: str, new_name: str) -> str:
        """`name`'s database under `new_name`, holding what the template holds; a new copy if
        it no longer has the template's shape or can't be taken from what still uses it."""
        assert self.contents is not None
        with self._admin() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            try:  # waits up to 5 s for the ended connections to go
                conn.execute(f'ALTER DATABASE "{name}" RENAME TO "{new_name}"')
            except psycopg.errors.ObjectInUse:
                return self._replace(name)
        with psycopg.connect(self._conninfo(self._pg_url(new_name)), autocommit=True) as conn:
            if self.contents.refill(conn):
                return self._pg_url(new_name)
        return self._replace(new_name)

    def _replace(self, name: str) -> str:
        """A new copy in place of `name`'s database, which is dropped in the background."""
        self.dropping.submit(self._drop, name)
        return self._copy(self._name())

    def _drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_all(self) -> None:
        self.background.shutdown(wait=True)
        self.dropping.shutdown(wait=True)
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
