"""Finding cases and runs by what they say: the words each is searched by, and the filters' SQL.

A case's words are written once, when the case is made (`document`): its expectation's (what
it should say, why, the tools it names, its items' keys) and its run's input and output as the
snapshot keeps them, each part's once, plus one marker word per tool it names and per part it
has, so the `tool` and `part` filters are exact lookups in the same index. Neither an
expectation nor a snapshot changes afterwards; the retire reason, which does, has its words
(`reason_words`) written beside it wherever it is. The words are cut by the app (`kindgi.words`),
the same way for a search's words, and each database only splits them at their spaces:

- SQLite: the FTS5 table `case_search` (contentless, keyed by the case's rowid, its `ascii`
  tokenizer: a word is any run of characters but ASCII space and punctuation), kept in step by
  triggers on `cases`;
- PostgreSQL: the generated column `cases.search`, a `tsvector` of the words as they are
  (`array_to_tsvector`), with a GIN index; a search is a `tsquery` of the words quoted.

So both find the same cases, and every write path (the service, the world loader) keeps the
index exact in its own transaction. Migration 0008 builds both.

A run's words (`runs.search_text`: the text in its input and output, `run_document`) are indexed
the same way (`run_search`, `runs.search`, migration 0011), and written on every write of the
run: recorded, assembled again from a trace's spans, loaded. `CASES` and `RUNS` name each
index; a search of either goes the same ways (`strategy`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from time import monotonic
from typing import Any

from sqlalchemy import CTE, JSON, TextClause, bindparam, func, literal_column, select, text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from ..grading import PARTS
from ..models import Case, Run, TestSetTool
from ..words import distinct, words
from .common import bulk, dialect, insert_for, sql

MAX_DOCUMENT_CHARS = 100_000  # a run's output may be large; a tsvector holds at most 1 MB


@dataclass(frozen=True)
class Indexed:
    """A table searched by its words: its model (with `agent_pk` and `project_id`), its list's
    position (`at`, `ident`), its FTS5 table on SQLite, and what each database indexes of a row
    (SQL over its columns). PostgreSQL's is the generated column `search`, its GIN index
    `ix_{table}_search`; SQLite's trigger that indexes a new row is `{table}_search_insert`."""

    model: Any
    at: Any
    ident: Any
    fts: str
    indexed: str

    @property
    def table(self) -> str:
        return self.model.__tablename__


# a case's words, then its retire reason's; a run's words
CASES = Indexed(
    Case, Case.added_at, Case.id, "case_search",
    "coalesce(search_text, '') || ' ' || coalesce(retired_words, '')",
)  # fmt: skip
RUNS = Indexed(Run, Run.at, Run.id, "run_search", "coalesce(search_text, '')")


def tool_marker(tool: str) -> str:
    """The one word that stands for "names this tool" in a document: exact, whatever the tool's
    name is made of, since a tokenizer would split `send_email` into two words."""
    return "kgtool" + hashlib.sha256(tool.encode()).hexdigest()[:24]


def part_marker(part: str) -> str:
    return "kgpart" + part


def _strings(value: Any) -> Iterable[str]:
    """The text in a JSON value: its strings, at any depth, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def tools_of(expect: dict[str, Any]) -> list[str]:
    """The tools an expectation names: those it should call, then those it must not."""
    decisions = expect.get("decisions") or {}
    return [c["tool"] for c in decisions.get("shouldCall") or []] + list(
        decisions.get("mustNotCall") or []
    )


def matcher_words(expect: dict[str, Any]) -> list[str]:
    """The text an expectation's matchers name: each argument's name and the strings its
    matcher holds (an `anyOf`'s values, a `text`'s texts), so a case is found by them."""
    said: list[str] = []
    for call in (expect.get("decisions") or {}).get("shouldCall") or []:
        for name, matcher in (call.get("match") or {}).items():
            said.append(name)
            said += _strings([matcher.get("anyOf"), matcher.get("text")])
    return said


def expect_words(expect: dict[str, Any]) -> str:
    """The words of what an expectation says, with the markers of its tools and parts, each
    once, separated by a space."""
    answer = expect.get("answer") or {}
    tools = tools_of(expect)
    texts = [answer.get("shouldSay") or "", answer.get("why") or "", *tools]
    texts += [item["key"] for item in expect.get("items") or []]
    texts += matcher_words(expect)
    markers = [tool_marker(t) for t in tools] + [part_marker(p) for p in PARTS if p in expect]
    return " ".join(distinct([*texts, *markers]))


def run_words(input_: Any, output: Any) -> str:
    """The words of what a run said, the text in its snapshot's input and output, each once,
    separated by a space."""
    return " ".join(distinct([*_strings(input_), *_strings(output)]))


def telling_words(value: Any, most: int) -> list[str]:
    """The `most` longest words of the text in a JSON value (a run's input), each once, the
    first found first among the same length: the rarest, most likely, so a search for all of
    them finds what was asked much the same, and cheaply (a long word's matches are few)."""
    said = distinct(_strings(value))
    return sorted(said, key=len, reverse=True)[:most]


def document(expect_part: str, run_part: str) -> str:
    """A case's words (without the retire reason's) as the column stores them: its
    expectation's, then its run's (each part's words once; made once for many cases in a bulk
    load), at most MAX_DOCUMENT_CHARS (the words past that left out)."""
    return capped(f"{expect_part} {run_part}".strip())


def run_document(input_: Any, output: Any) -> str:
    """A run's words as `runs.search_text` stores them: `run_words`, at most
    MAX_DOCUMENT_CHARS."""
    return capped(run_words(input_, output))


def capped(text: str) -> str:
    """Words, those past MAX_DOCUMENT_CHARS left out."""
    if len(text) > MAX_DOCUMENT_CHARS:
        text = text[: text.rfind(" ", 0, MAX_DOCUMENT_CHARS + 1)]
    return text


def reason_words(reason: str | None) -> str | None:
    """A retire reason's words, as the column beside it stores them (none without a reason)."""
    return None if reason is None else " ".join(distinct([reason]))


# How each database writes a search: a word quoted (a word is letters and digits: nothing in it
# is syntax), all of them, any of them
_SYNTAX = {"sqlite": ('"', " AND ", " OR "), "postgresql": ("'", " & ", " | ")}


def _terms(dialect_name: str, q: str | None, tools: list[str], parts: list[str]) -> str:
    """A search in the database's own query language (FTS5's, or a `tsquery`): every word,
    every tool's marker, and any of the parts' markers."""
    quote, every, any_of = _SYNTAX[dialect_name]
    terms = [f"{quote}{w}{quote}" for w in [*words(q or ""), *map(tool_marker, tools)]]
    if parts:
        terms.append("(" + any_of.join(f"{quote}{part_marker(p)}{quote}" for p in parts) + ")")
    return every.join(terms)


# How a search is answered, chosen by how many cases (of every test set) match it, counted
# in the index up to a bound before the list is read:
# - DRIVE (at most FEW): from the index's matches, each case looked up, the few sorted;
# - WALK (more): the list's own index walked newest first, each case checked; on SQLite the
#   matches are gathered once into a set for that (up to MANY), and past that each case is
#   looked up in the index instead, as gathering half a million would cost more than the
#   few dozen look-ups a page of so common a word needs.
# Either way a page is keyset, newest first; the choice only decides which side leads, which
# no planner can know from a word it has no statistics for (a word nowhere made PostgreSQL walk
# the whole list, 0.8 s at a million cases).
DRIVE, WALK, WALK_PROBING = "drive", "walk", "walk-probing"
INDEX_BUILD_MEMORY = "256MB"  # PostgreSQL's GIN index is built in memory, then written
FEW, MANY = 2_000, 50_000
SURELY_COMMON = 0.0075  # PostgreSQL estimates a word ANALYZE hasn't counted in at most 0.5 %
_ALL_ROWS = "SELECT reltuples FROM pg_class WHERE oid = '{table}'::regclass"


# Walking on SQLite, the matches are gathered (into a set the walk looks each case up in) for
# the rowids of the next WINDOW cases of the list first: cases are stored as they are added,
# so the list's next cases lie in a narrow band of rowids, and a page of a word in about 1 % of
# the cases reads a few hundred of its matches, not all of them (gathering is most of the cost).
# The cases outside the band, if the walk gets there, are looked up among all the matches.
# (Runs too are stored mostly as they ran.)
WINDOW, MARGIN = 4096, 64
_MATCHES = "SELECT rowid FROM {fts} WHERE {fts} MATCH :match"
_BAND = "(SELECT lo FROM search_window) AND (SELECT hi FROM search_window)"
_WALK_SQLITE = (
    f"({{table}}.rowid IN ({_MATCHES} AND rowid BETWEEN {_BAND}) "
    f"OR ({{table}}.rowid NOT BETWEEN {_BAND} AND {{table}}.rowid IN ({_MATCHES})))"
)
_PROBE_SQLITE = (
    "EXISTS (SELECT 1 FROM {fts} WHERE {fts} MATCH :match AND {fts}.rowid = {table}.rowid)"
)


def condition(dialect_name: str, how: str | None, of: Indexed = CASES) -> TextClause:
    """The condition "the row's words have every word, every tool and any of the parts",
    for a search answered `how` (None: as the planner likes, for a count). Walking on SQLite,
    the statement must carry `window(after)`."""
    names = {"table": of.table, "fts": of.fts}
    if dialect_name == "sqlite":
        if how == WALK_PROBING:
            return text(_PROBE_SQLITE.format(**names))
        where = _WALK_SQLITE if how == WALK else f"{{table}}.rowid IN ({_MATCHES})"
        return text(where.format(**names))
    # Walking, the document is checked row by row, in a form the GIN index can't serve, and
    # the query is made once (a sub-select), not for each row: a statement run often is
    # prepared, and PostgreSQL's plan for any word read all of a common word's matches through
    # the index, or made the query again for every case (60 ms a page at a million cases, not 2).
    search = f"{of.table}.search"
    document = f"coalesce({search}, {search})" if how == WALK else search
    return text(f"{document} @@ (SELECT {_TSQUERY})")


def window(after: bool, of: Indexed = CASES) -> CTE:
    """The band of rowids of the list's next WINDOW rows (from the start, or from the
    position `after_at`, `after_id`), as `search_window (lo, hi)`: from its last row's rowid
    to its first's, MARGIN wider each way (0 to -1 for an empty list: no row).

    Two steps down the list's index, not the least and greatest rowid of the WINDOW rows: the
    aggregate over every row cost three times as much, a third of a page of a 1 % word. Rows
    added at nearly the same time by two writers may be stored a few rowids out of the list's
    order: the margin keeps them in. A row outside the band is still found, looked up among
    all the matches (which are then gathered once).

    The band starts at the position's time, so at the position's own row or a few rows
    before it (those added in the same instant): SQLite's walk visits that row first and
    checks the search before the position. By the time alone, not the position (time, id):
    SQLite checks a row value on every row it steps over, which cost a deep page 70 % more
    than the first."""
    rows = select(literal_column(f"{of.table}.rowid")).where(
        of.model.agent_pk == bindparam("agent_pk"), of.model.project_id == bindparam("project_id")
    )
    if after:
        rows = rows.where(of.at <= bindparam("after_at", type_=of.at.type))
    rows = rows.order_by(of.at.desc(), of.ident.desc()).limit(1)
    ends = (
        select(
            rows.scalar_subquery().label("a"),  # None for an empty list: then the band is 0 to -1
            func.coalesce(rows.offset(bindparam("band_last")).scalar_subquery(), 0).label("b"),
        )
        .cte("band_ends")
        .prefix_with("MATERIALIZED")
    )  # each end read once, not once a use
    band = select(  # SQLite's min and max of two values (None if either is)
        func.coalesce(func.min(ends.c.a, ends.c.b) - MARGIN, 0).label("lo"),
        func.coalesce(func.max(ends.c.a, ends.c.b) + MARGIN, -1).label("hi"),
    )
    return band.cte("search_window")


_TSQUERY = "CAST(:match AS tsquery)"  # PostgreSQL's search: the words as they are


_FTS5_MATCHES = "SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH :match LIMIT :bound)"


WAYS_KEPT, WAY_KEPT_FOR = 4096, 60.0  # searches whose way is remembered, and for how long (s)
_ways: dict[tuple[Any, ...], tuple[str, float]] = {}


def strategy(dialect_name: str, params: dict[str, Any], of: Indexed = CASES) -> str:
    """How to answer a search (see DRIVE, WALK), remembered a minute in this process: a
    search's next pages, and the same search again, go its way without asking again (how
    common a word is changes slowly, and either way finds exactly the same rows)."""
    key = (dialect_name, of.fts, params["match"])
    now = monotonic()
    kept = _ways.get(key)
    if kept is not None and kept[1] > now:
        return kept[0]
    if len(_ways) >= WAYS_KEPT:
        _ways.clear()
    how = _way(dialect_name, params, of)
    _ways[key] = (how, now + WAY_KEPT_FOR)
    return how


def _way(dialect_name: str, params: dict[str, Any], of: Indexed) -> str:
    """How to answer a search, found out.

    SQLite: its matches counted in the index, up to MANY + 1 (FTS5 reads only its doclists).
    PostgreSQL: the planner's estimate first, from the lexemes' frequencies ANALYZE keeps. Over
    SURELY_COMMON of all cases is a word it has counted (one it hasn't is estimated below
    that), so walking is sure to find a page soon; at most FEW, the index's matches are few.
    Between, the matches are counted in the index up to FEW + 1 (a bitmap of them all, so
    only where they are known to be not many: a word in half the cases took 60 ms)."""
    if dialect_name == "sqlite":
        counting = text(_FTS5_MATCHES.format(fts=of.fts))
        matches = sql().execute(counting, {**params, "bound": MANY + 1}).scalar_one()
        return DRIVE if matches <= FEW else WALK if matches <= MANY else WALK_PROBING
    found = f"{of.table}.search @@ {_TSQUERY}"  # as the planner can see it
    plan = sql().execute(text(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {of.table} WHERE {found}"),
                         params).scalar_one()  # fmt: skip
    estimate = plan[0]["Plan"]["Plan Rows"]
    # -1 until the table is first analyzed
    rows = sql().execute(text(_ALL_ROWS.format(table=of.table))).scalar_one()
    if rows > 0 and estimate > SURELY_COMMON * rows:
        return WALK
    if estimate <= FEW:
        return DRIVE
    counted = select(func.count()).select_from(
        select(of.ident).where(text(found)).limit(FEW + 1).subquery()
    )
    return DRIVE if sql().execute(counted, params).scalar_one() <= FEW else WALK


def parameters(
    dialect_name: str, q: str | None, tools: list[str], parts: list[str]
) -> dict[str, Any]:
    """The values `condition` binds."""
    match = {"match": _terms(dialect_name, q, tools, parts)}
    # SQLite's: how far down the list the band's last row is (see `window`)
    return {**match, "band_last": WINDOW - 1} if dialect_name == "sqlite" else match


@cache
def _note_tools(dialect_name: str) -> Any:
    return insert_for(dialect_name, TestSetTool.__table__).on_conflict_do_nothing()


def note_tools(rows: list[dict[str, Any]]) -> None:
    """Remember the tools cases name, per test set (`agent_pk`, `project_id`, `tool` each)."""
    if rows:
        sql().execute(_note_tools(dialect()), rows)


class _JsonArray(FunctionElement):
    """A column's values gathered into one JSON array, in no set order (none when no rows on
    PostgreSQL)."""

    type = JSON()
    inherit_cache = True


@compiles(_JsonArray, "sqlite")
def _json_group_array(element: _JsonArray, compiler: Any, **kw: Any) -> str:
    return f"json_group_array({compiler.process(element.clauses, **kw)})"


@compiles(_JsonArray, "postgresql")
def _json_agg(element: _JsonArray, compiler: Any, **kw: Any) -> str:
    return f"json_agg({compiler.process(element.clauses, **kw)})"


# The tools a test set's cases name, as one value: the cases page reads them with its counts, in
# the same statement, on every request (`counts.page_counts`).
TOOL_NAMES = (
    select(_JsonArray(TestSetTool.tool))
    .where(
        TestSetTool.agent_pk == bindparam("agent_pk"),
        TestSetTool.project_id == bindparam("project_id"),
    )
    .scalar_subquery()
)


@contextmanager
def indexed_after(of: Indexed = CASES) -> Iterator[None]:
    """Index the rows (cases, or runs) inserted in this block once, after them, in the same
    transaction: for a bulk load (the world loader, the demo).

    Row by row, SQLite's trigger made FTS5 write a segment for every case (each statement that
    fires a trigger is a savepoint, where FTS5 flushes) and PostgreSQL updated the GIN index
    for each; both were most of a million-case load. FTS5's segments are then merged into one.
    The trigger and the index are put back by their stored definitions, so they stay what
    migrations 0008 and 0011 made.
    """
    conn, table, fts = sql(), of.table, of.fts
    if dialect() == "sqlite":
        trigger = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
            (f"{table}_search_insert",),
        ).scalar_one()
        last = conn.exec_driver_sql(f"SELECT coalesce(max(rowid), 0) FROM {table}").scalar_one()
        conn.exec_driver_sql(f"DROP TRIGGER {table}_search_insert")
        yield
        conn.exec_driver_sql(
            f"INSERT INTO {fts} (rowid, doc) SELECT rowid, {of.indexed} FROM {table} "
            "WHERE rowid > ?",
            (last,),
        )
        # one segment, not the dozens a large insert leaves: a word's matches are then read
        # from one list, and a band of them found by seeking in it (20 times faster at 1M)
        conn.exec_driver_sql(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
        conn.exec_driver_sql(trigger)
    else:
        index = conn.exec_driver_sql(
            f"SELECT pg_get_indexdef('ix_{table}_search'::regclass)"
        ).scalar_one()
        conn.exec_driver_sql(f"DROP INDEX ix_{table}_search")
        yield
        bulk()  # building it reads every case
        conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
        conn.exec_driver_sql(index)
