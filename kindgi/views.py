"""Small pieces of the pages, computed in Python and used by the templates as filters.

The cases page draws 25 rows a request, and Jinja macro calls and lookups in every cell (when,
who, what a case expects, the case's address) were most of its time: a row made here costs a
fraction of that, and the page answers at half the JSON list's rate or better.
"""

from __future__ import annotations

import difflib
import html
from collections import Counter
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson
from flask import request, url_for
from markupsafe import Markup, escape

from .schemas.common import rfc3339
from .words import spans

TRUNCATE_AT, LEEWAY, ELLIPSIS = 60, 5, "..."  # as Jinja's truncate(60) cuts a quote


_EXPERT = ' <span class="tag expert" title="An expert\'s case">expert</span>'
_RETIRED = '<span class="tag retired">retired</span>'
_SERVICE = ' <span class="tag">service</span>'


def when(at: datetime) -> Markup:
    """A moment for people to read, in UTC to the minute, with its exact time for machines."""
    return Markup(_time(at))


def _time(at: datetime) -> str:
    """`when`'s HTML (neither form has a character to escape); the first is cut from the
    second, not strftime'd."""
    exact = rfc3339(at)
    return f'<time datetime="{exact}">{exact[:10]} {exact[11:16]}</time>'


def actor(actor_id: str, kind: str) -> Markup:
    """Who did something: a user's id, or a token's marked as a service."""
    return Markup(_who(actor_id, kind))


def _who(actor_id: str, kind: str) -> str:
    """`actor`'s HTML, the id escaped."""
    return html.escape(actor_id) + (_SERVICE if kind == "service" else "")


def _truncated(text: str) -> str:
    """Text cut at a word near TRUNCATE_AT characters, with an ellipsis (Jinja's truncate)."""
    if len(text) <= TRUNCATE_AT + LEEWAY:
        return text
    return text[: TRUNCATE_AT - len(ELLIPSIS)].rsplit(" ", 1)[0] + ELLIPSIS


def summary(expect: dict[str, Any]) -> str:
    """What a case expects in a line: each part's verdict, the calls named, the answer's
    correction, how many items are judged right."""
    parts = []
    decisions = expect.get("decisions")
    if decisions:
        line = f"decisions {decisions['verdict']}"
        calls = ", ".join(call["tool"] for call in decisions.get("shouldCall") or [])
        banned = ", ".join(decisions.get("mustNotCall") or [])
        line += f": call {calls}" if calls else ""
        line += f"; not {banned}" if banned else ""
        parts.append(line)
    answer = expect.get("answer")
    if answer:
        said = answer.get("shouldSay") or answer.get("why")
        parts.append(f"answer {answer['verdict']}" + (f": “{_truncated(said)}”" if said else ""))
    items = expect.get("items")
    if items:
        right = sum(1 for item in items if item.get("verdict") == "right")
        parts.append(f"{len(items)} items ({right} right)")
    return " · ".join(parts)


def highlighted(value: Any, words: set[str]) -> Markup:
    """Text (or HTML Markup) with the words searched for marked, as the index matches them:
    whole, in any case, with or without accents."""
    plain = value.unescape() if isinstance(value, Markup) else str(value)
    if not words:
        return escape(plain)
    out, at = [], 0
    for start, end, word in spans(plain):
        if word in words and start >= at:
            out += [escape(plain[at:start]), Markup("<mark>%s</mark>") % plain[start:end]]
            at = end
    out.append(escape(plain[at:]))
    return Markup("").join(out)


def one_line(value: Any) -> str:
    """A run's input or output in a line, cut at a word near TRUNCATE_AT characters: a string
    as it is, an object's fields as `name: value`, anything else as compact JSON ("" for
    none)."""
    if value is None:
        return ""
    if isinstance(value, dict):
        said = " · ".join(f"{name}: {_compact(item)}" for name, item in value.items())
    else:
        said = _compact(value)
    return _truncated(" ".join(said.split()))


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def line_diff(before: str, after: str) -> list[tuple[str, str]]:
    """Two texts' lines as a diff shows them: (`same`, `del` or `add`, the line), in order."""
    old, new = before.splitlines(), after.splitlines()
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new).get_opcodes():
        if op == "equal":
            out += [("same", line) for line in old[i1:i2]]
            continue
        out += [("del", line) for line in old[i1:i2]]
        out += [("add", line) for line in new[j1:j2]]
    return out


def tools_line(calls: Any) -> str:
    """The tools a run called, in the order first called, with how often (`lookup (2)`)."""
    if not isinstance(calls, list):
        return ""
    called = Counter(
        call.get("tool") for call in calls if isinstance(call, dict) and "tool" in call
    )
    return ", ".join(f"{tool} ({n})" if n > 1 else str(tool) for tool, n in called.items())


def swap() -> bool:
    """Whether this is htmx asking for a part of the page (not a history restore, which
    wants it whole)."""
    return bool(request.headers.get("HX-Request")) and not request.headers.get(
        "HX-History-Restore-Request"
    )


def case_rows(rows: Any, case_url: str, words: set[str], may_publish: bool) -> Markup:
    """The rows of the cases list, each a case's id and address (`case_url` and its id), kind,
    the version it was made on, what its run was asked (in a line), what it expects (the
    searched words marked), who added it and when, and whether it is retired, its tags beside
    its id; with a box to tick when the caller may change it. `rows` are the cases page's
    (`service.cases._page_query`): a list's row (`schemas.cases.CASE_FIELDS`, each expectation
    the JSON text stored) and its run's input, the JSON text stored, read by position.

    Written as one text in Python, not a template loop: Jinja's per-row filter calls, Markup's
    `%` and an escape per cell were most of the page's time. Every text from the database is
    escaped (`html.escape`) once, here; a run's input is read and made a line once a page,
    however many of its cases the page shows."""
    url = html.escape(case_url)
    asked: dict[str, str] = {}  # each run's input in a line, escaped, by run id
    out = []
    for (added_at, ident, kind, _, run_id, made_on, expect, expert, by_kind, by_id, _, _, _, _,
         retired_at, _, tags, _, said_in) in rows:  # fmt: skip
        case_id = html.escape(ident)
        chips = (
            "".join(f' <span class="tag">{html.escape(t)}</span>' for t in tags.split(","))
            if tags
            else ""
        )
        said = summary(orjson.loads(expect))
        said = highlighted(said, words) if words else html.escape(said)
        line = asked.get(run_id)
        if line is None:
            line = html.escape(one_line(None if said_in is None else orjson.loads(said_in)))
            asked[run_id] = line
        out.append(  # a cell a line, as a template would write them: the text has its spaces
            f'<tr class="{"" if retired_at is None else "retired"}">'
            + (
                f'\n  <td><input type="checkbox" name="caseIds" value="{case_id}" form="bulk" '
                f'aria-label="Select {case_id}"></td>'
                if may_publish
                else ""
            )
            + f'\n  <td><a href="{url}{case_id}">{case_id}</a>{chips}</td>'
            f"\n  <td>{'correction' if kind == 'correction' else 'by hand'}"
            f"{_EXPERT if expert else ''}</td>"
            f"\n  <td>{html.escape(made_on)}</td>"
            f'\n  <td class="summary">{line}</td>'
            f'\n  <td class="summary">{said}</td>'
            f"\n  <td>{_who(by_id, by_kind)}</td>"
            f"\n  <td>{_time(added_at)}</td>"
            f"\n  <td>{'active' if retired_at is None else _RETIRED}</td>\n</tr>\n"
        )
    return Markup("".join(out))


def link(endpoint: str, **values: Any) -> str:
    """`url_for` for the templates, remembered: a page draws some twenty links, most of them
    the same on every request (the static files, the menu, a test set's tabs), and building
    one cost half a row of the cases list. Kept by all that a link depends on here: where the
    request came to (scheme, host, server, root), its blueprint (for a relative endpoint) and
    the values."""
    req = request._get_current_object()  # type: ignore[attr-defined]  # one look-up, not six
    env = req.environ
    where = (
        env.get("wsgi.url_scheme"),
        env.get("HTTP_HOST"),
        env.get("SERVER_NAME"),
        env.get("SERVER_PORT"),
        env.get("SCRIPT_NAME"),
    )
    try:
        # the values in the order given: a set's order differs between processes, and so did
        # the order of a link's query arguments
        return _link(where, req.blueprint, endpoint, tuple(values.items()))
    except TypeError:  # a value that can't be kept by (a list): built each time
        return url_for(endpoint, **values)


@lru_cache(maxsize=4096)
def _link(
    addressed: tuple[Any, ...], blueprint: str | None, endpoint: str, values: tuple[Any, ...]
) -> str:
    return url_for(endpoint, **dict(values))
