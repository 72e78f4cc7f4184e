"""The request boundary: request ids, the transaction, and Idempotency-Key, for every request.

A request runs in one transaction that commits in `after_request`, after the answer is known, so
the answer kept for an Idempotency-Key commits together with the change it reports. A request
that failed rolled back in the error handler before this runs. A request of any other method
only reads: it is never committed (on PostgreSQL its statements run in autocommit), so no route
may change anything on GET.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import orjson
from flask import Flask, Response, current_app, g, request
from flask.json.provider import DefaultJSONProvider

from . import service
from .database import set_writing
from .errors import DomainError, NotFound, RequestTooLarge, bad_input, render

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

    def response(self, *args: Any, **kwargs: Any) -> Response:
        obj = self._prepare_response_obj(args, kwargs)
        if self._app.debug:
            return super().response(obj)
        try:
            body = orjson.dumps(obj, default=self.default, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            return super().response(obj)
        return self._app.response_class(body, mimetype=self.mimetype)


def fingerprint() -> str:
    """What makes two requests the same request: method, path with query, and body bytes."""
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.full_path.encode(), request.get_data()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def claim_idempotency_key() -> Response | None:
    """Before a write runs: claim its key, or answer with the first request's stored answer."""
    key = request.headers.get("Idempotency-Key")
    if request.method not in WRITE_METHODS or key is None:
        return None
    if not 1 <= len(key) <= 255 or not key.isprintable():
        raise bad_input({"Idempotency-Key": ["1 to 255 printable characters."]})
    stored = service.claim_key(g.caller, key, fingerprint())
    if stored is None:
        g.idempotency_key = key
        return None
    replay = Response(stored.body, status=stored.status, content_type=stored.content_type)
    if stored.location:
        replay.headers["Location"] = stored.location
    replay.headers["Idempotent-Replayed"] = "true"
    g.replayed = True
    return replay


def _settle(response: Response) -> None:
    """Keep a decided answer (2xx, 4xx but 401) with the key; release the key otherwise."""
    key = g.get("idempotency_key")
    if key is None:
        return
    status = response.status_code
    if status < 500 and status != 401:
        service.settle_key(
            g.caller,
            key,
            status,
            response.content_type,
            response.headers.get("Location"),
            response.get_data(),
            withhold=bool(g.get("withhold_answer")),
        )
    else:
        service.release_key(g.caller, key)


def enforce_body_limit() -> None:
    """Refuse a chunked body over the limit: Werkzeug would cut it there silently."""
    if "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
        return  # with Content-Length, Werkzeug refuses an over-long body itself
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    request.max_content_length = limit + 1
    if len(request.get_data()) > limit:
        raise RequestTooLarge(details={"maxBytes": limit})


def register(app: Flask) -> None:
    @app.before_request
    def _begin() -> None:
        g.request_id = uuid.uuid4().hex
        set_writing(request.method in WRITE_METHODS)
        if "\x00" in request.path:  # no id has one, and PostgreSQL can't even look one up
            raise NotFound()
        enforce_body_limit()

    @app.after_request
    def _finish(response: Response) -> Response:
        # A read changed nothing: its transaction ends as the session closes, with no commit.
        if request.method in WRITE_METHODS and not g.get("replayed"):
            try:
                _settle(response)
                service.commit()
            except DomainError as err:  # the database could not take the commit: 503 or 500
                if g.get("idempotency_key"):
                    service.release_key(g.caller, g.idempotency_key)
                response = app.make_response(render(err))
        response.headers["X-Request-Id"] = g.request_id
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response
