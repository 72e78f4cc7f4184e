"""Domain errors: each has a stable code and an HTTP status, and how one is rendered.

Every error becomes one envelope under `/v1`, `{"error": {code, message, details?, requestId}}`,
and an HTML page elsewhere. Nothing else (no stack trace, no SQL) reaches a client; the request
boundary (`kindgi/http.py`) ends the transaction before it renders one.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, g, jsonify, render_template, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException

from . import otlp
from .config import OTLP_TRACES_PATH, is_api


class DomainError(Exception):
    """A refusal with a code clients can branch on."""

    status: int = 400
    code: str = "bad-input"
    message: str = "The request is not valid."

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message or self.message)
        self.message = message or self.message
        self.details = details
        self.headers = headers or {}


def _error(status: int, code: str, message: str) -> type[DomainError]:
    return type(
        code.title().replace("-", ""),
        (DomainError,),
        {
            "status": status,
            "code": code,
            "message": message,
        },
    )


BadInput = _error(400, "bad-input", "The request is not valid.")
ItemNotFound = _error(
    400, "item-not-found", "An item's pointer resolves to nothing in the run's output."
)
RunNotOfAgent = _error(400, "run-not-of-agent", "The run is not one of this agent's runs.")
RunIsReplay = _error(400, "run-is-replay", "The run is a comparison's replay and can't be a case.")
Unauthenticated = _error(401, "unauthenticated", "A valid bearer token is required.")
Forbidden = _error(403, "forbidden", "You lack a permission this needs.")
AgentNotFound = _error(404, "agent-not-found", "No such agent.")
ProjectNotFound = _error(404, "project-not-found", "No such project serves this agent.")
RunNotFound = _error(404, "run-not-found", "No such run.")
CaseNotFound = _error(404, "case-not-found", "No such case in this agent's test set.")
CorrectionNotFound = _error(404, "correction-not-found", "No such correction.")
TestRunNotFound = _error(404, "test-run-not-found", "No such test run of this agent.")
VersionNotFound = _error(404, "version-not-found", "No such version of this test set.")
NotFound = _error(404, "not-found", "Nothing is here.")
MethodNotAllowed = _error(405, "method-not-allowed", "This method is not allowed here.")
UnsupportedMediaType = _error(415, "unsupported-media-type", "Send the body as application/json.")
RunNotFinished = _error(409, "run-not-finished", "The run has not finished; it has no output yet.")
CaseRetired = _error(409, "case-retired", "The case is already retired.")
CaseActive = _error(409, "case-active", "The case is active; only a retired case can be restored.")
NoChange = _error(409, "no-change", "The revision expects exactly what the case expects now.")
NothingToGrade = _error(409, "nothing-to-grade", "The test run would have no case to grade.")
ResultConflict = _error(
    409, "result-conflict", "A result differs from the one already kept for its case."
)
TestRunClosed = _error(409, "test-run-closed", "The test run no longer takes this.")
TestRunsNotComparable = _error(
    409, "test-runs-not-comparable", "The runs are not of the same test set, or not done."
)
KeyInFlight = _error(
    409,
    "idempotency-key-in-flight",
    "A request with this Idempotency-Key is still running; retry later.",
)
ReplayWithheld = _error(
    409, "idempotency-key-replay-withheld", "The first answer carried a secret and is not kept."
)
RunErased = _error(410, "run-erased", "An erasure cleared the run's content.")
RequestTooLarge = _error(413, "request-too-large", "The request body is over the limit.")
CaseChanged = _error(
    412, "case-changed", "The case was revised since the ETag you sent; read it again."
)
IfMatchRequired = _error(
    428, "if-match-required", "Send If-Match with the case's ETag, as read from the case."
)
KeyMismatch = _error(
    422, "idempotency-key-mismatch", "This Idempotency-Key was used for a different request."
)
TooManyAttempts = _error(
    429, "too-many-attempts", "Too many failed sign-ins for this email; try again later."
)
Internal = _error(500, "internal", "Something went wrong on our side; nothing was changed.")
DatabaseBusy = _error(503, "database-busy", "The database is too busy to answer; retry soon.")
OutcomeUnknown = _error(
    503,
    "outcome-unknown",
    "The connection to the database was lost as the change was committed: it may or may not "
    "have been made. Retry with the same Idempotency-Key to get the first answer; without one, "
    "look before sending it again.",
)
StoreUnavailable = _error(
    503,
    "idempotency-store-unavailable",
    "The Idempotency-Key store could not be read; nothing ran. Retry soon.",
)

RETRY_AFTER = {"Retry-After": "1"}


def bad_input(fields: dict[str, list[str]] | None = None, **details: Any) -> DomainError:
    """400 `bad-input` naming the offending fields (path → messages)."""
    if fields is not None:
        details["fields"] = fields
    return BadInput(details=details or None)


def body_limit() -> int:
    """The largest body this request may have: an OTLP export's own limit, else the app's."""
    config = current_app.config
    return config["OTLP_MAX_BYTES" if request.path == OTLP_TRACES_PATH else "MAX_CONTENT_LENGTH"]


def from_http(exc: HTTPException) -> DomainError:
    """Werkzeug's own refusals (routing, body limits, CSRF), in the domain's words."""
    if exc.code == 405:
        allowed = ", ".join(sorted(getattr(exc, "valid_methods", None) or []))
        return MethodNotAllowed(headers={"Allow": allowed})
    if exc.code == 413:
        return RequestTooLarge(details={"maxBytes": body_limit()})
    if exc.code == 400:
        return BadInput(exc.description if isinstance(exc.description, str) else None)
    plain = {401: Unauthenticated, 403: Forbidden, 404: NotFound, 415: UnsupportedMediaType}
    return plain.get(exc.code or 500, Internal if (exc.code or 500) >= 500 else BadInput)()


def render(err: DomainError) -> tuple[Any, int, dict[str, str]]:
    """The response for a domain error: the JSON envelope under the API's prefix, a page
    elsewhere."""
    headers = dict(err.headers)
    g.error_code = err.code  # for the request's log line and the metrics
    as_json = is_api(request.path)
    if err.status == 401 and as_json:
        headers.setdefault("WWW-Authenticate", "Bearer")
    if err.status == 503:
        headers.setdefault("Retry-After", "1")
    if request.path == OTLP_TRACES_PATH:  # as OTLP/HTTP answers: a Status, in the request's form
        form = otlp.encoding_of(request.mimetype)
        status = otlp.status(err, g.get("request_id", ""), form)
        return current_app.response_class(status, mimetype=form), err.status, headers
    if as_json:
        body: dict[str, Any] = {"code": err.code, "message": err.message}
        if err.details:
            body["details"] = err.details
        body["requestId"] = g.get("request_id", "")
        return jsonify(error=body), err.status, headers
    try:
        page = render_template("error.html", error=err)
    except SQLAlchemyError:  # the signed-in user could not be loaded: the database is away
        g._login_user = current_app.login_manager.anonymous_user()  # flask-login's slot
        page = render_template("error.html", error=err)
    return page, err.status, headers
