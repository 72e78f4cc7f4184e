"""The OpenAPI 3.1 document, generated from the marshmallow schemas that validate requests."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Flask

from .schemas.cases import (
    AddedCaseOut,
    BulkRestoreBody,
    BulkRetireBody,
    BulkTagsBody,
    CaseDetailOut,
    CaseList,
    CaseOut,
    CasePage,
    CasesQuery,
    ExportQuery,
    RestoreBody,
    RetireBody,
    ReviseBody,
    RevisionList,
    TagsBody,
)
from .schemas.common import UUID_RE, ErrorOut, PageQuery, Paging, TestSetQuery
from .schemas.corrections import (
    AddCaseBody,
    CorrectionOut,
    CorrectionStatusBody,
    RecordCorrectionBody,
)
from .schemas.counts import TestSetOut
from .schemas.identity import NewTokenBody, NewTokenOut, TokenPage
from .schemas.records import CaseRecordOut, HealthOut
from .schemas.runs import RecordRunBody, RunOut, RunPage, RunsQuery
from .schemas.test_runs import (
    ComparePage,
    CompareQuery,
    DiffPage,
    DiffQuery,
    EmptyBody,
    ResultDetailOut,
    ResultPage,
    ResultsAccepted,
    ResultsBody,
    ResultsQuery,
    RunCasePage,
    RunCasesQuery,
    StartTestRunBody,
    TestRunOut,
    TestRunPage,
    TestRunsQuery,
    VersionPage,
)

ERRORS = {
    400: "Bad input: `bad-input` (`details.fields`, or `details.reason` for cursors; "
    "`details.maxDepth` for a body nested deeper than that), "
    "`item-not-found`, `run-not-of-agent`, `run-is-replay`.",
    401: "Missing, malformed, unknown, expired or revoked bearer token (`unauthenticated`).",
    403: "A permission is missing (`forbidden`, `details.needs`).",
    404: "`agent-not-found`, `project-not-found`, `run-not-found`, `case-not-found`, "
    "`correction-not-found`, `test-run-not-found`, `version-not-found` or `not-found`.",
    405: "`method-not-allowed`; `Allow` lists the methods.",
    409: "`run-not-finished`, `case-retired`, `case-active`, `no-change`, `nothing-to-grade`, "
    "`result-conflict` (`details.caseIds`), `test-run-closed` (`details.status`), "
    "`test-runs-not-comparable`, `idempotency-key-in-flight` (`Retry-After`), "
    "`idempotency-key-replay-withheld`.",
    410: "`run-erased`: an erasure cleared the run's content.",
    412: "`case-changed`: the case was revised since the ETag sent in `If-Match` "
    "(`details.revision`, the current one).",
    413: "`request-too-large` (`details.maxBytes`).",
    415: "`unsupported-media-type`: send `application/json`.",
    422: "`idempotency-key-mismatch`: the key was used for another request.",
    428: "`if-match-required`: send `If-Match` with the case's `ETag`.",
    500: "`internal`: nothing was changed.",
    503: "`database-busy` or `idempotency-store-unavailable` (nothing was changed), or "
    "`outcome-unknown` (a write's commit lost its answer: retry with the same key); "
    "`Retry-After` in seconds.",
}
READ_ERRORS = (400, 401, 403, 404, 405, 500, 503)
WRITE_ERRORS = (400, 401, 403, 404, 405, 409, 413, 415, 422, 500, 503)

IMPLIED = {"HEAD", "OPTIONS"}  # methods Flask answers for every route by itself
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


IF_MATCH = {
    "in": "header",
    "name": "If-Match",
    # needed, but not `required`: a request without it is answered 428, which OpenAPI's
    # missing-header rule (406) does not foresee
    "required": False,
    "schema": {"type": "string"},
    "description": "The case's `ETag` as read (needed: without it the answer is 428 "
    "`if-match-required`; a revision of a case revised since is 412 `case-changed`).",
}
ETAG = {
    "schema": {"type": "string"},
    "description": "The revision of the case's expectation, for a revision's `If-Match`.",
}
# The routes that answer one case with its ETag, and the one that needs it back in If-Match
ONE_CASE = {
    "api.get_case",
    "api.retire_case",
    "api.restore_case",
    "api.revise_case",
    "api.tag_case",
}
NEEDS_IF_MATCH = {"api.revise_case"}


def _path_params(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [
        {"in": "path", "name": n, "required": True, "schema": {"type": "string", "minLength": 1}}
        for n in names
    ]


class Operation(NamedTuple):
    """What the URL map can't say of a route: its name, summary, schemas and answers."""

    op_id: str
    summary: str
    query: Any  # the query string's schema
    body: Any  # the request body's schema
    status: int  # the success status
    answer: Any  # the success answer's schema; for a file, a tuple of its media types
    extra: tuple[int, ...]  # error statuses beyond the method's usual ones


# Every /v1 endpoint's operation, by endpoint name; the routes themselves come from the URL map.
OPERATIONS: dict[str, Operation] = {
    "api.get_test_set": Operation(
        "agentsTestSetGet",
        "A project's test set of an agent: its counts, exact as of now.",
        TestSetQuery,
        None,
        200,
        TestSetOut,
        (),
    ),
    "api.list_cases": Operation(
        "agentsTestSetListCases",
        "List a project's cases of an agent's test set, newest added first.",
        CasesQuery,
        None,
        200,
        CasePage,
        (),
    ),
    "api.add_case": Operation(
        "agentsTestSetAddCase",
        "Add a case by hand from a correction's body on one of the agent's finished runs.",
        None,
        AddCaseBody,
        201,
        AddedCaseOut,
        (410,),
    ),
    "api.get_case": Operation(
        "agentsTestSetGetCase",
        "One case, with its run's snapshot.",
        None,
        None,
        200,
        CaseDetailOut,
        (),
    ),
    "api.get_test_set_health": Operation(
        "agentsTestSetHealth",
        "The test set's health: its always-failing, flaky, never-run and contradicting active "
        "cases, and a histogram of their pass rates (computed once per state of the set).",
        TestSetQuery,
        None,
        200,
        HealthOut,
        (),
    ),
    "api.get_case_record": Operation(
        "agentsTestSetGetCaseRecord",
        "A case's record over its test set's last 50 done full runs: its outcomes, the "
        "candidates that failed it, whether it is flaky, how well it separates candidates.",
        None,
        None,
        200,
        CaseRecordOut,
        (),
    ),
    "api.retire_case": Operation(
        "agentsTestSetRetireCase",
        "Retire a case: it stays listed with include=retired and no test run checks it.",
        None,
        RetireBody,
        200,
        CaseOut,
        (),
    ),
    "api.restore_case": Operation(
        "agentsTestSetRestoreCase",
        "Restore a retired case.",
        None,
        RestoreBody,
        200,
        CaseOut,
        (),
    ),
    "api.revise_case": Operation(
        "agentsTestSetReviseCase",
        "Revise a case's expectation, with a note saying why: the case keeps its id and run, "
        "its `revision` goes up by one. Versions frozen before keep grading with the "
        "expectation they froze; the next freeze holds the new one. Send `If-Match` with the "
        "case's `ETag`.",
        None,
        ReviseBody,
        200,
        CaseOut,
        (412, 428),
    ),
    "api.tag_case": Operation(
        "agentsTestSetTagCase",
        "Add tags to a case and take others off it (lower-case letters, digits and hyphens, "
        "at most 20 a case; retired cases keep theirs). Tags never change a version.",
        None,
        TagsBody,
        200,
        CaseOut,
        (),
    ),
    "api.tag_cases": Operation(
        "agentsTestSetTagCases",
        "Add tags to and take others off several cases of one test set at once: all of them, "
        "or none (an unknown case is 404 naming it).",
        None,
        BulkTagsBody,
        200,
        CaseList,
        (),
    ),
    "api.list_revisions": Operation(
        "agentsTestSetListRevisions",
        "A case's revisions, the current one first: each expectation with who, when and why.",
        None,
        None,
        200,
        RevisionList,
        (),
    ),
    "api.list_runs": Operation(
        "agentsListRuns",
        "The agent's runs in a project, newest first: runs to pick a case from, filtered by "
        "status, version, a tool called, whether a case was made from them, time and text "
        "(every filter combines, and is bound into the cursor). Runs no case was made from are "
        "deleted after `KINDGI_RUN_RETENTION_DAYS` (30 by default).",
        RunsQuery,
        None,
        200,
        RunPage,
        (),
    ),
    "api.record_run": Operation(
        "agentsRecordRun",
        "Record a run of an agent version in a project.",
        None,
        RecordRunBody,
        201,
        RunOut,
        (),
    ),
    "api.record_correction": Operation(
        "agentsRecordCorrection",
        "Record an expert's correction of a finished run.",
        None,
        RecordCorrectionBody,
        201,
        CorrectionOut,
        (410,),
    ),
    "api.set_correction_status": Operation(
        "agentsSetCorrectionStatus",
        "Change a correction's status; won't-fix and removed take it out of the test set.",
        None,
        CorrectionStatusBody,
        200,
        CorrectionOut,
        (),
    ),
    "api.create_token": Operation(
        "tokensCreate",
        "Create a personal API token; the only answer that ever shows its secret.",
        None,
        NewTokenBody,
        201,
        NewTokenOut,
        (),
    ),
    "api.list_tokens": Operation(
        "tokensList",
        "Your tokens, newest first, a page at a time; never their secrets.",
        Paging,
        None,
        200,
        TokenPage,
        (),
    ),
    "api.revoke_token": Operation(
        "tokensRevoke",
        "Revoke one of your tokens.",
        None,
        None,
        204,
        None,
        (),
    ),
    "api.openapi": Operation(
        "openapiDocument",
        "This document: OpenAPI 3.1, generated from the schemas that validate requests. "
        "Public: the one route that needs no token.",
        None,
        None,
        200,
        {"type": "object", "required": ["openapi", "info", "paths"]},
        (),
    ),
    "api.list_versions": Operation(
        "agentsTestSetListVersions",
        "The test set's frozen versions, newest first.",
        PageQuery,
        None,
        200,
        VersionPage,
        (),
    ),
    "api.diff_versions": Operation(
        "agentsTestSetDiffVersions",
        "The cases in one version and not the other (added), or the reverse (removed), and "
        "those in both whose expectation was revised between them (changed).",
        DiffQuery,
        None,
        200,
        DiffPage,
        (),
    ),
    "api.start_test_run": Operation(
        "agentsTestRunsStart",
        "Freeze the test set (or reuse its unchanged version) and open a test run: of all its "
        "cases, or a quick run of a sample of them (`sample`), which estimates the full pass rate.",
        None,
        StartTestRunBody,
        201,
        TestRunOut,
        (),
    ),
    "api.list_test_runs": Operation(
        "agentsTestRunsList",
        "A test set's test runs, newest first.",
        TestRunsQuery,
        None,
        200,
        TestRunPage,
        (),
    ),
    "api.get_test_run": Operation(
        "agentsTestRunsGet",
        "One test run with its counts, pass rate and comparison with its baseline.",
        None,
        None,
        200,
        TestRunOut,
        (),
    ),
    "api.runner_cases": Operation(
        "agentsTestRunsCases",
        "What a runner needs of each case, by case id (awaiting=true: only those with no "
        "result yet).",
        RunCasesQuery,
        None,
        200,
        RunCasePage,
        (),
    ),
    "api.send_results": Operation(
        "agentsTestRunsSendResults",
        "Send 1 to 500 results, graded at once; all or nothing, a duplicate is a no-op.",
        None,
        ResultsBody,
        200,
        ResultsAccepted,
        (),
    ),
    "api.finish_test_run": Operation(
        "agentsTestRunsFinish",
        "No more results: cases without one become errors (no-result).",
        None,
        EmptyBody,
        200,
        TestRunOut,
        (),
    ),
    "api.cancel_test_run": Operation(
        "agentsTestRunsCancel",
        "Cancel a test run that is not over.",
        None,
        EmptyBody,
        200,
        TestRunOut,
        (),
    ),
    "api.list_results": Operation(
        "agentsTestRunsListResults",
        "The cases that have a result, by case id, each outcome explained.",
        ResultsQuery,
        None,
        200,
        ResultPage,
        (),
    ),
    "api.get_result": Operation(
        "agentsTestRunsGetResult",
        "One case's result beside its expectation and its run's snapshot.",
        None,
        None,
        200,
        ResultDetailOut,
        (),
    ),
    "api.compare": Operation(
        "agentsTestRunsCompare",
        "This run against another of the same test set, paired by case id, with the exact "
        "McNemar p-value of regressed against fixed (only the cases both had when one is a "
        "quick run).",
        CompareQuery,
        None,
        200,
        ComparePage,
        (409,),
    ),
    "api.report": Operation(
        "agentsTestRunsReport",
        "The run as a JUnit XML report.",
        None,
        None,
        200,
        ("application/xml",),
        (),
    ),
    "api.retire_cases": Operation(
        "agentsTestSetRetireCases",
        "Retire several cases of a test set at once: all of them, or none (404 `case-not-found` "
        "or 409 `case-retired` with `details.caseIds` naming the cases at fault).",
        None,
        BulkRetireBody,
        200,
        CaseList,
        (),
    ),
    "api.restore_cases": Operation(
        "agentsTestSetRestoreCases",
        "Restore several retired cases at once: all of them, or none (404 `case-not-found` or "
        "409 `case-active` with `details.caseIds`).",
        None,
        BulkRestoreBody,
        200,
        CaseList,
        (),
    ),
    "api.export_traces": Operation(
        "tracesExport",
        "OTLP/HTTP's traces endpoint: an OpenTelemetry exporter's spans, made into runs "
        "(docs/design.md §10). Protobuf or OTLP/JSON, gzip or deflate; answers and errors "
        "as OTLP says, in the request's encoding.",
        None,
        None,
        200,
        None,
        (413, 415),
    ),
    "api.export": Operation(
        "agentsTestSetExport",
        "The whole test set, streamed: a JSON line a case (the case as listed, plus its run's "
        "`input`, `output` and `calls`), or CSV with the columns docs/deploy.md lists.",
        ExportQuery,
        None,
        200,
        ("application/x-ndjson", "text/csv"),
        (),
    ),
}


def _operation(method: str, path: str, endpoint: str, operation: Operation) -> dict[str, Any]:
    op_id, summary, query, body, status, answer, extra = operation
    params = _path_params(path)
    if query is not None:
        params.append({"in": "query", "schema": query})
    if method != "get":
        params.append(IDEMPOTENCY_KEY)
    if endpoint in NEEDS_IF_MATCH:
        params.append(IF_MATCH)
    request_id: dict[str, Any] = {
        "X-Request-Id": {"schema": {"type": "string"}, "description": "Server-assigned request id."}
    }
    if endpoint in ONE_CASE:
        request_id["ETag"] = ETAG
    success: dict[str, Any] = {"description": summary, "headers": request_id}
    if isinstance(answer, tuple):  # a file
        success["content"] = {media: {"schema": {"type": "string"}} for media in answer}
    elif answer is not None:
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
    if not path.endswith("/openapi.json"):
        op["security"] = [{"bearerAuth": []}]
    if body is not None:
        op["requestBody"] = {
            "required": method != "post" or body is not RestoreBody,
            "content": {"application/json": {"schema": body}},
        }
    return op


_OTLP_MEDIA = ("application/x-protobuf", "application/json")
_OTLP_REQUEST = {
    "type": "object",
    "description": "ExportTraceServiceRequest in OTLP/JSON: protobuf's JSON mapping, but "
    "trace and span ids in hex.",
    "properties": {"resourceSpans": {"type": "array", "items": {"type": "object"}}},
}
_OTLP_ANSWER = {
    "type": "object",
    "description": "ExportTraceServiceResponse; `partialSuccess` when spans were rejected.",
    "properties": {
        "partialSuccess": {
            "type": "object",
            "properties": {
                "rejectedSpans": {"type": ["string", "integer"]},
                "errorMessage": {"type": "string"},
            },
        }
    },
}
_OTLP_STATUS = {
    "type": "object",
    "description": "google.rpc.Status; its `details` hold an ErrorInfo whose `reason` is the "
    "error's code (docs/errors.md) and whose `metadata.requestId` is the request's id.",
    "properties": {
        "code": {"type": "integer"},
        "message": {"type": "string"},
        "details": {"type": "array", "items": {"type": "object"}},
    },
}


def _in_otlp(op: dict[str, Any]) -> dict[str, Any]:
    """The traces endpoint's operation as OTLP/HTTP has it: protobuf or OTLP/JSON in, the
    same out, and every error a `google.rpc.Status` (not the JSON envelope)."""

    def content(schema: dict[str, Any]) -> dict[str, Any]:
        binary = {"schema": {"type": "string", "format": "binary"}}
        return {_OTLP_MEDIA[0]: binary, _OTLP_MEDIA[1]: {"schema": schema}}

    op["requestBody"] = {"required": True, "content": content(_OTLP_REQUEST)}
    op["parameters"].append(
        {
            "in": "header",
            "name": "Content-Encoding",
            "required": False,
            "schema": {"type": "string", "enum": ["gzip", "deflate", "identity"]},
        }
    )
    for code, answer in op["responses"].items():
        if code.startswith("2"):
            answer["content"] = content(_OTLP_ANSWER)
            continue
        headers = {"X-Request-Id": {"schema": {"type": "string"}}}
        if code in ("429", "503"):
            headers["Retry-After"] = {"schema": {"type": "string"}}
        text = ERRORS.get(int(code), "")
        op["responses"][code] = {
            "description": text,
            "headers": headers,
            "content": content(_OTLP_STATUS),
        }
    return op


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


def routes(app: Flask) -> list[tuple[str, str, str]]:
    """The API's (method, OpenAPI path, endpoint), as the app's URL map serves them."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.split(".")[0] != "api":
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: "{" + _camel(m[1]) + "}", rule.rule)
        found += [(m.lower(), path, rule.endpoint) for m in sorted(rule.methods - IMPLIED)]
    return found


def _build(app: Flask) -> dict[str, Any]:
    served = routes(app)
    undocumented = {endpoint for *_, endpoint in served} ^ set(OPERATIONS)
    if undocumented:  # a route without its operation, or an operation without its route
        raise LookupError(f"OpenAPI operations and routes differ: {sorted(undocumented)}")
    spec = APISpec(
        title="Kindgi test sets",
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
    spec.components.schema("Error", schema=ErrorOut)
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
    for method, path, endpoint in served:
        operation = _operation(method, path, endpoint, OPERATIONS[endpoint])
        if endpoint == "api.export_traces":
            operation = _in_otlp(operation)
        paths.setdefault(path, {})[method] = operation
    for path, operations in paths.items():
        spec.path(path=path, operations=operations)
    return _with_uuid_patterns(spec.to_dict())


def _with_uuid_patterns(node: Any) -> Any:
    """A `format: uuid` string also gets the pattern the app checks, since a validator or a
    client generator need not know the format (`schemas.common.UUID_RE`: any case, hyphenated)."""
    if isinstance(node, list):
        return [_with_uuid_patterns(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _with_uuid_patterns(v) for k, v in node.items()}
    if out.get("format") == "uuid" and out.get("type") == "string":
        out.setdefault("pattern", UUID_RE.pattern)
    return out


def document(app: Flask) -> dict[str, Any]:
    """The OpenAPI document of the routes `app` serves (built once per app)."""
    if "kindgi.openapi" not in app.extensions:
        app.extensions["kindgi.openapi"] = _build(app)
    return app.extensions["kindgi.openapi"]
