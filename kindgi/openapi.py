"""The OpenAPI 3.1 document, generated from the marshmallow schemas that validate requests."""

from __future__ import annotations

from functools import cache
from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Flask

from . import schemas

ERRORS = {
    400: "Bad input: `bad-input` (`details.fields`, or `details.reason` for cursors), "
    "`item-not-found`, `run-not-of-agent`, `run-is-replay`.",
    401: "Missing, malformed, unknown, expired or revoked bearer token (`unauthenticated`).",
    403: "A permission is missing (`forbidden`, `details.needs`).",
    404: "`agent-not-found`, `project-not-found`, `run-not-found`, `case-not-found`, "
    "`correction-not-found` or `not-found`.",
    405: "`method-not-allowed`; `Allow` lists the methods.",
    409: "`run-not-finished`, `case-retired`, `case-active`, `idempotency-key-in-flight` "
    "(`Retry-After`), `idempotency-key-replay-withheld`.",
    410: "`run-erased`: an erasure cleared the run's content.",
    413: "`request-too-large` (`details.maxBytes`).",
    415: "`unsupported-media-type`: send `application/json`.",
    422: "`idempotency-key-mismatch`: the key was used for another request.",
    500: "`internal`: nothing was changed.",
    503: "`database-busy` or `idempotency-store-unavailable`; `Retry-After` in seconds.",
}
READ_ERRORS = (400, 401, 403, 404, 405, 500, 503)
WRITE_ERRORS = (400, 401, 403, 404, 405, 409, 413, 415, 422, 500, 503)

IDEMPOTENCY_KEY = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        # printable characters, as a header carries them (Latin-1): no controls, no NBSP or SHY
        "pattern": "^[\\x20-\\x7e\\xa1-\\xac\\xae-\\xff]+$",
    },
    "description": "Retries with the same key get the first answer byte for byte "
    "(`Idempotent-Replayed: true`); scoped to the caller, kept 24 hours.",
}


def _path_params(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [
        {"in": "path", "name": n, "required": True, "schema": {"type": "string", "minLength": 1}}
        for n in names
    ]


# (method, path, operationId, summary, query schema, body schema, status, answer schema, extra)
OPERATIONS: list[tuple[str, str, str, str, Any, Any, int, Any, tuple[int, ...]]] = [
    (
        "get",
        "/v1/agents/{agentId}/test-set",
        "agentsTestSetGet",
        "A project's test set of an agent: its counts, exact as of now.",
        schemas.TestSetQuery,
        None,
        200,
        schemas.TestSetOut,
        (),
    ),
    (
        "get",
        "/v1/agents/{agentId}/test-set/cases",
        "agentsTestSetListCases",
        "List a project's cases of an agent's test set, newest added first.",
        schemas.CasesQuery,
        None,
        200,
        schemas.CasePage,
        (),
    ),
    (
        "post",
        "/v1/agents/{agentId}/test-set/cases",
        "agentsTestSetAddCase",
        "Add a case by hand from a correction's body on one of the agent's finished runs.",
        None,
        schemas.AddCaseBody,
        201,
        schemas.CaseOut,
        (410,),
    ),
    (
        "get",
        "/v1/agents/{agentId}/test-set/cases/{caseId}",
        "agentsTestSetGetCase",
        "One case, with its run's snapshot.",
        None,
        None,
        200,
        schemas.CaseDetailOut,
        (),
    ),
    (
        "post",
        "/v1/agents/{agentId}/test-set/cases/{caseId}/retire",
        "agentsTestSetRetireCase",
        "Retire a case: it stays listed with include=retired and no test run checks it.",
        None,
        schemas.RetireBody,
        200,
        schemas.CaseOut,
        (),
    ),
    (
        "post",
        "/v1/agents/{agentId}/test-set/cases/{caseId}/restore",
        "agentsTestSetRestoreCase",
        "Restore a retired case.",
        None,
        schemas.RestoreBody,
        200,
        schemas.CaseOut,
        (),
    ),
    (
        "get",
        "/v1/agents/{agentId}/runs",
        "agentsListRuns",
        "The agent's runs in a project, newest first: runs to pick a case from.",
        schemas.RunsQuery,
        None,
        200,
        schemas.RunPage,
        (),
    ),
    (
        "post",
        "/v1/agents/{agentId}/runs",
        "agentsRecordRun",
        "Record a run of an agent version in a project.",
        None,
        schemas.RecordRunBody,
        201,
        schemas.RunOut,
        (),
    ),
    (
        "post",
        "/v1/agents/{agentId}/runs/{runId}/corrections",
        "agentsRecordCorrection",
        "Record an expert's correction of a finished run.",
        None,
        schemas.RecordCorrectionBody,
        201,
        schemas.CorrectionOut,
        (410,),
    ),
    (
        "patch",
        "/v1/agents/{agentId}/corrections/{correctionId}",
        "agentsSetCorrectionStatus",
        "Change a correction's status; won't-fix and removed take it out of the test set.",
        None,
        schemas.CorrectionStatusBody,
        200,
        schemas.CorrectionOut,
        (),
    ),
    (
        "post",
        "/v1/tokens",
        "tokensCreate",
        "Create a personal API token; the only answer that ever shows its secret.",
        None,
        schemas.NewTokenBody,
        201,
        schemas.NewTokenOut,
        (),
    ),
    (
        "get",
        "/v1/tokens",
        "tokensList",
        "Your tokens, newest first, a page at a time; never their secrets.",
        schemas.Paging,
        None,
        200,
        schemas.TokenPage,
        (),
    ),
    (
        "delete",
        "/v1/tokens/{tokenId}",
        "tokensRevoke",
        "Revoke one of your tokens.",
        None,
        None,
        204,
        None,
        (),
    ),
    (
        "get",
        "/v1/openapi.json",
        "openapiDocument",
        "This document: OpenAPI 3.1, generated from the schemas that validate requests. "
        "Public: the one route that needs no token.",
        None,
        None,
        200,
        {"type": "object", "required": ["openapi", "info", "paths"]},
        (),
    ),
]


def _operation(
    method: str,
    path: str,
    op_id: str,
    summary: str,
    query: Any,
    body: Any,
    status: int,
    answer: Any,
    extra: tuple[int, ...],
) -> dict[str, Any]:
    params = _path_params(path)
    if query is not None:
        params.append({"in": "query", "schema": query})
    if method != "get":
        params.append(IDEMPOTENCY_KEY)
    request_id = {
        "X-Request-Id": {"schema": {"type": "string"}, "description": "Server-assigned request id."}
    }
    success: dict[str, Any] = {"description": summary, "headers": request_id}
    if answer is not None:
        success["content"] = {"application/json": {"schema": answer}}
    responses: dict[str, Any] = {str(status): success}
    for code in sorted(set(READ_ERRORS if method == "get" else WRITE_ERRORS) | set(extra)):
        responses[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    op: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "parameters": params,
        "responses": responses,
    }
    if path.startswith("/v1/agents") or path.startswith("/v1/tokens"):
        op["security"] = [{"bearerAuth": []}]
    if body is not None:
        op["requestBody"] = {
            "required": method != "post" or body is not schemas.RestoreBody,
            "content": {"application/json": {"schema": body}},
        }
    return op


@cache
def _build(title: str) -> dict[str, Any]:
    spec = APISpec(
        title=title,
        version="0.5.0",
        openapi_version="3.1.0",
        plugins=[MarshmallowPlugin()],
        info={
            "description": "The test-set API: counts, cases, runs, corrections, "
            "tokens. Errors are `{error: {code, message, details?, requestId}}`."
        },
    )
    spec.components.security_scheme(
        "bearerAuth",
        {"type": "http", "scheme": "bearer", "description": "`kgi_…` personal or service token."},
    )
    spec.components.schema("Error", schema=schemas.ErrorOut)
    for code, text in ERRORS.items():
        headers = {"X-Request-Id": {"schema": {"type": "string"}}}
        if code in (409, 503):
            headers["Retry-After"] = {
                "schema": {"type": "string"},
                "description": "Seconds to wait (in-flight and 503).",
            }
        spec.components.response(
            f"E{code}",
            {
                "description": text,
                "headers": headers,
                "content": {"application/json": {"schema": "Error"}},
            },
        )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, *rest in OPERATIONS:
        paths.setdefault(path, {})[method] = _operation(method, path, *rest)
    for path, operations in paths.items():
        spec.path(path=path, operations=operations)
    return _with_uuid_patterns(spec.to_dict())


def _with_uuid_patterns(node: Any) -> Any:
    """A `format: uuid` string also gets the pattern the app checks, since a validator or a
    client generator need not know the format (`schemas.UUID_RE`: any case, hyphenated)."""
    if isinstance(node, list):
        return [_with_uuid_patterns(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _with_uuid_patterns(v) for k, v in node.items()}
    if out.get("format") == "uuid" and out.get("type") == "string":
        out.setdefault("pattern", schemas.UUID_RE.pattern)
    return out


def document(app: Flask) -> dict[str, Any]:
    """The OpenAPI document (built once per process)."""
    return _build(app.name and "Kindgi test sets")
