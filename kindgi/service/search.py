"""Finding cases by what they say: the text a case is searched by, and the filters' SQL.

A case's document is written once, when the case is made (`document`): its expectation's words
(what it should say, why, the tools it names, its items' keys) and its run's input and output
as the snapshot keeps them, plus one marker word per tool it names and per part it has, so the
`tool` and `part` filters are exact lookups in the same index. Neither an expectation nor a
snapshot changes afterwards; the retire reason, which does, is joined to the document by the
database itself:

- SQLite: the FTS5 table `case_search` (contentless, keyed by the case's rowid, accents and
  case folded by its `unicode61` tokenizer), kept in step by triggers on `cases`;
- PostgreSQL: the generated column `cases.search`, a `tsvector` of `kindgi_unaccent(...)`
  under the `simple` configuration (whole words, no stemming), with a GIN index.

So every write path (the service, the world loader, a bulk `UPDATE` of `retired_reason`) keeps
the index exact in its own transaction with nothing to call. Migration 0006 builds both.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from sqlalchemy import TextClause, bindparam, func, select, text

from ..grading import PARTS
from ..models import Case, TestSetTool
from ..schemas import WORD_RE
from .common import bulk, dialect, insert_for, sql

MAX_DOCUMENT_CHARS = 100_000  # a run's output may be large; a tsvector holds at most 1 MB


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


def expect_words(expect: dict[str, Any]) -> str:
    """What an expectation says, with the markers of its tools and parts."""
    answer = expect.get("answer") or {}
    tools = tools_of(expect)
    words = [answer.get("shouldSay", ""), answer.get("why", ""), *tools]
    words += [item["key"] for item in expect.get("items") or []]
    words += [tool_marker(t) for t in tools] + [part_marker(p) for p in PARTS if p in expect]
    return " ".join(w for w in words if w)


def run_words(input_: Any, output: Any) -> str:
    """What a run said: the text in its snapshot's input and output."""
    return " ".join([*_strings(input_), *_strings(output)])


def document(expect_part: str, run_part: str) -> str:
    """A case's searched text (without the retire reason, which the database adds)."""
    return f"{expect_part} {run_part}"[:MAX_DOCUMENT_CHARS]


def words_of(q: str) -> list[str]:
    """The words of a search, as the indexes cut them; none means nothing to search for."""
    return WORD_RE.findall(q)


def _fts5_terms(q: str | None, tools: list[str], parts: list[str]) -> str:
    """An FTS5 query: every word (each quoted, so nothing in it is syntax), every tool's
    marker, and any of the parts' markers."""
    terms = [f'"{w}"' for w in words_of(q or "")] + [f'"{tool_marker(t)}"' for t in tools]
    if parts:
        terms.append("(" + " OR ".join(f'"{part_marker(p)}"' for p in parts) + ")")
    return " AND ".join(terms)


def _tsquery_terms(tools: list[str], parts: list[str]) -> str:
    """The markers as a `to_tsquery` text (markers are plain words: nothing to escape)."""
    terms = [tool_marker(t) for t in tools]
    if parts:
        terms.append("(" + " | ".join(part_marker(p) for p in parts) + ")")
    return " & ".join(terms)


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


def condition(dialect_name: str, words: bool, markers: bool, how: str) -> TextClause:
    """The condition "the case's document has every word, every tool and any of the parts",
    for a search with words and/or markers, answered `how`."""
    if dialect_name == "sqlite":
        if how == WALK_PROBING:
            return text(
                "EXISTS (SELECT 1 FROM case_search WHERE case_search MATCH :match "
                "AND case_search.rowid = cases.rowid)"
            )
        return text("cases.rowid IN (SELECT rowid FROM case_search WHERE case_search MATCH :match)")
    query = []
    if words:
        query.append("plainto_tsquery('simple', kindgi_unaccent(:search_q))")
    if markers:
        query.append("to_tsquery('simple', :search_markers)")
    return text(f"cases.search @@ ({' && '.join(query)})")


_FTS5_MATCHES = text(
    "SELECT count(*) FROM (SELECT 1 FROM case_search WHERE case_search MATCH :match LIMIT :bound)"
)


def strategy(dialect_name: str, words: bool, markers: bool, params: dict[str, Any]) -> str:
    """How to answer a search (see DRIVE, WALK): its matches counted in the index, up to
    MANY + 1 on SQLite (FTS5 reads only its doclists) and FEW + 1 on PostgreSQL (the GIN
    index, or the table's first rows when the word is common)."""
    if dialect_name == "sqlite":
        matches = sql().execute(_FTS5_MATCHES, {**params, "bound": MANY + 1}).scalar_one()
        return DRIVE if matches <= FEW else WALK if matches <= MANY else WALK_PROBING
    some = select(Case.id).where(condition(dialect_name, words, markers, WALK))
    counted = select(func.count()).select_from(some.limit(FEW + 1).subquery())
    return DRIVE if sql().execute(counted, params).scalar_one() <= FEW else WALK


def parameters(
    dialect_name: str, q: str | None, tools: list[str], parts: list[str]
) -> dict[str, Any]:
    """The values `condition` binds."""
    if dialect_name == "sqlite":
        return {"match": _fts5_terms(q, tools, parts)}
    return {"search_q": q, "search_markers": _tsquery_terms(tools, parts)}


def folded(word: str) -> str:
    """A word as both indexes compare it: without accents, in lower case."""
    plain = unicodedata.normalize("NFKD", word)
    return "".join(ch for ch in plain if not unicodedata.combining(ch)).casefold()


@cache
def _note_tools(dialect_name: str) -> Any:
    return insert_for(dialect_name, TestSetTool.__table__).on_conflict_do_nothing()


def note_tools(rows: list[dict[str, Any]]) -> None:
    """Remember the tools cases name, per test set (`agent_pk`, `project_id`, `tool` each)."""
    if rows:
        sql().execute(_note_tools(dialect()), rows)


# The tools a test set's cases name, built once: the cases page reads them on every request.
_TOOLS = (
    select(TestSetTool.tool)
    .where(
        TestSetTool.agent_pk == bindparam("agent_pk"),
        TestSetTool.project_id == bindparam("project_id"),
    )
    .order_by(TestSetTool.tool)
)


def tools(agent_pk: int, project_id: str) -> list[str]:
    """The tools the test set's cases name, in order: the cases page's choice."""
    return list(sql().scalars(_TOOLS, {"agent_pk": agent_pk, "project_id": project_id}))


@contextmanager
def indexed_after() -> Iterator[None]:
    """Index the cases inserted in this block once, after them, in the same transaction: for
    a bulk load (the world loader, the demo).

    Row by row, SQLite's trigger made FTS5 write a segment for every case (each statement that
    fires a trigger is a savepoint, where FTS5 flushes) and PostgreSQL updated the GIN index
    for each; both were most of a million-case load. The trigger and the index are put back
    by their stored definitions, so they stay what migration 0006 made.
    """
    conn = sql()
    if dialect() == "sqlite":
        trigger = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'cases_search_insert'"
        ).scalar_one()
        last = conn.exec_driver_sql("SELECT coalesce(max(rowid), 0) FROM cases").scalar_one()
        conn.exec_driver_sql("DROP TRIGGER cases_search_insert")
        yield
        conn.exec_driver_sql(
            "INSERT INTO case_search (rowid, doc) SELECT rowid, coalesce(search_text, '') "
            "|| ' ' || coalesce(retired_reason, '') FROM cases WHERE rowid > ?",
            (last,),
        )
        conn.exec_driver_sql(trigger)
    else:
        index = conn.exec_driver_sql(
            "SELECT pg_get_indexdef('ix_cases_search'::regclass)"
        ).scalar_one()
        conn.exec_driver_sql("DROP INDEX ix_cases_search")
        yield
        bulk()  # building it reads every case
        conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
        conn.exec_driver_sql(index)
