"""Keyset pages, newest first, resumed after a sealed cursor (see `kindgi/cursors.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import current_app
from sqlalchemy import ColumnElement, Select, bindparam, tuple_

from .. import cursors
from .common import clock, sql


@dataclass
class Page:
    """One page of a list: its rows, and where the next page starts while there is one."""

    items: list[Any]
    has_more: bool
    next_cursor: str | None = None


def keyset_page(
    query: Callable[[bool], Select[Any]],
    params: dict[str, Any],
    limit: int,
    cursor: str | None,
    binding: dict[str, Any],
) -> Page:
    """Newest first by (time, id), resuming strictly after a sealed cursor's position.

    `query(after)` is the list's statement from `newest_first`; its rows' first two columns
    are their position. `binding` names the list (its filters and caller): a cursor is good
    for that list only.
    """
    secret = current_app.config["SECRET_KEY"]
    now = clock().replace(tzinfo=UTC).timestamp()
    params = {**params, "limit": limit + 1}
    if cursor:
        at, ident = cursors.unseal(secret, cursor, binding, now)
        params["after_at"], params["after_id"] = datetime.fromisoformat(at), ident
    rows = sql().execute(query(bool(cursor)), params).all()
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if has_more:
        at, ident = rows[-1][:2]
        next_cursor = cursors.seal(secret, binding, [at.isoformat(), ident], now)
    return Page(rows, has_more, next_cursor)


def newest_first(query: Select[Any], at: Any, ident: Any, after: bool) -> Select[Any]:
    """`query` newest first: from the start, or after the position `after_at`, `after_id`."""
    if after:
        query = query.where(past_position(at, ident))
    return query.order_by(at.desc(), ident.desc()).limit(bindparam("limit"))


def past_position(at: Any, ident: Any, *, inclusive: bool = False) -> ColumnElement[bool]:
    """Rows older than the position `after_at`, `after_id` (and the position's own row, when
    `inclusive`)."""
    row = tuple_(at, ident)
    position = tuple_(bindparam("after_at", type_=at.type), bindparam("after_id", type_=ident.type))
    return row <= position if inclusive else row < position


def after_id(cursor: str | None, binding: dict[str, Any]) -> str:
    """For a list in id order: the id a cursor resumes after ("" from the start)."""
    if not cursor:
        return ""
    now = clock().replace(tzinfo=UTC).timestamp()
    (ident,) = cursors.unseal(current_app.config["SECRET_KEY"], cursor, binding, now)
    return str(ident)


def id_page(rows: list[Any], limit: int, binding: dict[str, Any], ident: Any = None) -> Page:
    """A page of a list in id order from up to `limit + 1` rows (`ident(row)` its id, the first
    column unless told): the next page resumes after the last id shown."""
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if has_more:
        last = ident(rows[-1]) if ident else rows[-1][0]
        now = clock().replace(tzinfo=UTC).timestamp()
        next_cursor = cursors.seal(current_app.config["SECRET_KEY"], binding, [last], now)
    return Page(rows, has_more, next_cursor)
