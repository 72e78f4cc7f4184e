"""The request boundary: request ids, the transaction's life, Idempotency-Key, headers, and the
one handler that turns every error into the JSON envelope or a page.

A request runs in one transaction that commits in `after_request`, after the answer is known, so
the answer kept for an Idempotency-Key commits together with the change it reports. A request
that failed is rolled back by the error handler before the error is rendered. A request of any
other method only reads: it is never committed (on PostgreSQL its statements run in autocommit),
so no route may change anything on GET.

An error never claims that nothing changed when something did: once the change has committed,
its answer stands whatever fails afterwards; a commit whose answer was lost answers what the
Idempotency-Key's record says happened, or that nobody can tell (503 `outcome-unknown`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
from flask import Flask, Request, Response, current_app, g, request, stream_with_context
from flask.json.provider import DefaultJSONProvider
from flask.sessions import SecureCookieSessionInterface, SessionMixin
from werkzeug.exceptions import HTTPException

from . import idempotency
from .config import is_api
from .database import commit, is_busy, rollback, set_writing
from .errors import (
    DatabaseBusy,
    DomainError,
    Internal,
    NotFound,
    OutcomeUnknown,
    RequestTooLarge,
    body_limit,
    from_http,
    render,
)

log = logging.getLogger("kindgi")
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


class JSONAnswers(DefaultJSONProvider):
    """JSON answers written by orjson, several times faster than the standard library; what
    orjson refuses (integers past 64 bits, which a run's output may hold) falls back to it.
    Reading JSON stays with the standard library, which keeps such integers exact."""

    sort_keys = False  # answers keep the order clients gave (args "as given")

    def response(self, *args: Any, **kwargs: Any) -> Response:
        obj = self._prepare_response_obj(args, kwargs)
        option = orjson.OPT_APPEND_NEWLINE | (orjson.OPT_INDENT_2 if self._app.debug else 0)
        try:  # stored JSON text (`orjson.Fragment`, never in an answer that could fall back)
            body = orjson.dumps(obj, default=self.default, option=option)
        except TypeError:
            return super().response(obj)
        return self._app.response_class(body, mimetype=self.mimetype)


class PagesOnlySessions(SecureCookieSessionInterface):
    """Cookie sessions for the pages only: an API request is its bearer token, so it neither
    reads nor sets a session cookie (and skips the cost of opening one)."""

    def open_session(self, app: Flask, request: Request) -> SessionMixin | None:
        if is_api(request.path):
            return self.null_session_class()
        return super().open_session(app, request)


def claim_idempotency_key(scope: str) -> Response | None:
    """For a write: claim its Idempotency-Key, or the first request's answer to replay."""
    if request.method not in WRITE_METHODS:
        return None
    return idempotency.claim_or_replay(scope)


def _enforce_body_limit() -> None:
    """Refuse a body over the limit; a chunked one too, which Werkzeug would cut there
    silently."""
    limit = body_limit()
    request.max_content_length = limit  # with Content-Length, Werkzeug refuses it itself
    if "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
        return
    request.max_content_length = limit + 1
    if len(request.get_data()) > limit:
        raise RequestTooLarge(details={"maxBytes": limit})


def download(pieces: Iterator[Any], mimetype: str, stem: str, extension: str) -> Response:
    """A file streamed as it is written (the request's transaction stays open until its end),
    named for saving."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", stem) + "." + extension
    return Response(
        stream_with_context(pieces),
        mimetype=mimetype,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _scope() -> str:
    caller = g.get("caller")
    return caller.scope if caller is not None else ""


def _commit(response: Response) -> Response:
    """Keep the answer with its key and commit the change it reports: the answer, or the error
    to give instead (the claim released when nothing was changed)."""
    scope = _scope()
    try:
        idempotency.settle(scope, response)
        commit()
    except OutcomeUnknown as err:
        happened = idempotency.kept(scope)
        log.warning("the commit's answer was lost; committed: %s", happened)
        if happened is None:  # the claim stays: its lease runs out, or it replays what it kept
            return current_app.make_response(render(err))
        if not happened:
            idempotency.release(scope)
            return current_app.make_response(render(DatabaseBusy()))
    except DomainError as err:  # the database refused the commit: 503 or 500
        log.warning("the commit failed: %s", err.code)
        idempotency.release(scope)
        return current_app.make_response(render(err))
    g.committed = response
    return response


def register(app: Flask) -> None:
    """The boundary's hooks and the app-wide error handler."""

    @app.before_request
    def _begin() -> None:
        g.request_id = uuid.uuid4().hex
        # the boundary's marks start unset (`g` is shared by requests run in one app context)
        for mark in ("idempotency_key", "replayed", "committed"):
            g.pop(mark, None)
        set_writing(request.method in WRITE_METHODS)
        if "\x00" in request.path:  # no id has one, and PostgreSQL can't even look one up
            raise NotFound()
        _enforce_body_limit()

    @app.after_request
    def _finish(response: Response) -> Response:
        # A read changed nothing: its transaction ends as the session closes, with no commit.
        if request.method in WRITE_METHODS and "committed" not in g:
            if g.get("replayed"):
                g.committed = response  # the first answer, committed with its change before
            else:
                response = _commit(response)
        response.headers["X-Request-Id"] = g.request_id
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.errorhandler(Exception)
    def _failed(exc: Exception):
        """Every error ends the transaction, changing nothing, then is rendered; clients only
        ever see the envelope or a page, never a stack trace. An error after the commit (a hook
        that runs later, as the metrics' does; Flask has logged it) leaves the committed
        answer as it was."""
        if "committed" in g:
            return g.committed
        rollback()
        if isinstance(exc, DomainError):
            return render(exc)
        if isinstance(exc, HTTPException):
            return render(from_http(exc))
        if is_busy(exc):
            log.warning("the database was busy: %s", type(exc).__name__)
            return render(DatabaseBusy())
        log.exception("unhandled error in %s %s", request.method, request.path)
        return render(Internal())
