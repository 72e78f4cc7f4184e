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
from collections.abc import Iterable
from typing import Any

from sqlalchemy import TextClause, text

from ..grading import PARTS
from ..schemas import WORD_RE

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


def expect_words(expect: dict[str, Any]) -> str:
    """What an expectation says, with the markers of its tools and parts."""
    decisions = expect.get("decisions") or {}
    answer = expect.get("answer") or {}
    tools = [c["tool"] for c in decisions.get("shouldCall") or []]
    tools += list(decisions.get("mustNotCall") or [])
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
    return " ".join(terms)


def _tsquery_terms(tools: list[str], parts: list[str]) -> str:
    """The markers as a `to_tsquery` text (markers are plain words: nothing to escape)."""
    terms = [tool_marker(t) for t in tools]
    if parts:
        terms.append("(" + " | ".join(part_marker(p) for p in parts) + ")")
    return " & ".join(terms)


def condition(dialect_name: str, words: bool, markers: bool) -> TextClause:
    """The condition "the case's document has every word, every tool and any of the parts",
    for a search with words and/or markers. On SQLite the matching rowids come from FTS5 once
    and the list walks its own index newest first, checking each row against them."""
    if dialect_name == "sqlite":
        return text("cases.rowid IN (SELECT rowid FROM case_search WHERE case_search MATCH :match)")
    query = []
    if words:
        query.append("plainto_tsquery('simple', kindgi_unaccent(:search_q))")
    if markers:
        query.append("to_tsquery('simple', :search_markers)")
    return text(f"cases.search @@ ({' && '.join(query)})")


def parameters(
    dialect_name: str, q: str | None, tools: list[str], parts: list[str]
) -> dict[str, Any]:
    """The values `condition` binds."""
    if dialect_name == "sqlite":
        return {"match": _fts5_terms(q, tools, parts)}
    return {"search_q": q, "search_markers": _tsquery_terms(tools, parts)}
