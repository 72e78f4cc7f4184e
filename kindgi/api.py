"""The JSON API under `/v1`. Each route parses, calls one service function, and dumps."""

from __future__ import annotations

from typing import Any

from flask import (
    Blueprint,
    Response,
    current_app,
    g,
    jsonify,
    request,
    stream_with_context,
    url_for,
)
from marshmallow import Schema

from . import grading, http, otlp, reports, service
from .config import API_PREFIX
from .database import reading
from .errors import BadInput, RequestTooLarge, UnsupportedMediaType, bad_input
from .schemas.cases import (
    BulkRestoreBody,
    BulkRetireBody,
    BulkTagsBody,
    CasesQuery,
    ExportQuery,
    RestoreBody,
    RetireBody,
    ReviseBody,
    SnapshotOut,
    TagsBody,
    case_json,
    revision_json,
)
from .schemas.common import (
    PageQuery,
    Paging,
    TestSetQuery,
    TooDeep,
    dump,
    load,
    page_json,
    parse_json,
    too_deep,
)
from .schemas.corrections import (
    AddCaseBody,
    CorrectionOut,
    CorrectionStatusBody,
    RecordCorrectionBody,
)
from .schemas.counts import test_set_json
from .schemas.identity import NewTokenBody, TokenOut
from .schemas.records import health_json, record_json
from .schemas.runs import RecordRunBody, RunOut, RunsQuery
from .schemas.test_runs import (
    CompareQuery,
    DiffQuery,
    EmptyBody,
    ResultsBody,
    ResultsQuery,
    RunCasesQuery,
    StartTestRunBody,
    TestRunsQuery,
    change_counts_json,
    compare_row_json,
    result_detail_json,
    result_json,
    runner_case_json,
    test_run_json,
    version_json,
)

bp = Blueprint("api", __name__, url_prefix=API_PREFIX)
PUBLIC_ENDPOINTS = {"api.openapi"}


@bp.before_request
def _authenticate():
    """Every /v1 route but the OpenAPI document needs a bearer token; writes may carry a key."""
    if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None:
        return None
    with reading():  # a write takes the lock only once it is known who asks
        g.caller = service.authenticate(request.headers.get("Authorization"))
    return http.claim_idempotency_key(g.caller.scope)


def body(schema: type[Schema]) -> dict[str, Any]:
    """The request's JSON body, validated by `schema`; an empty body is an empty object."""
    raw = request.get_data()
    if not raw:
        return load(schema, {})
    if request.mimetype != "application/json":
        raise UnsupportedMediaType()
    try:
        data = parse_json(raw)
    except TooDeep:
        raise too_deep() from None
    except ValueError:
        raise bad_input({"_body": ["The body is not valid JSON."]}) from None
    return load(schema, data)


def query(schema: type[Schema]) -> dict[str, Any]:
    return load(schema, request.args.to_dict())


def _case_url(agent_id: str, case_id: str) -> str:
    return url_for("api.get_case", agent_id=agent_id, case_id=case_id)


# ---------------------------------------------------------------- the test set


@bp.get("/agents/<agent_id>/test-set")
def get_test_set(agent_id: str):
    args = query(TestSetQuery)
    counts = service.test_set(g.caller, agent_id, args["projectId"])
    return jsonify(test_set_json(counts))


@bp.get("/agents/<agent_id>/test-set/cases")
def list_cases(agent_id: str):
    args = query(CasesQuery)
    page = service.list_cases(g.caller, agent_id, args.pop("projectId"), **args)
    return jsonify(page_json(page, case_json))


@bp.post("/agents/<agent_id>/test-set/cases")
def add_case(agent_id: str):
    case, duplicates = service.add_hand_case(g.caller, agent_id, body(AddCaseBody))
    out = case_json(case)
    if duplicates:
        out["duplicates"] = duplicates
    return (
        jsonify(out),
        201,
        {"Location": _case_url(agent_id, case.id)},
    )


@bp.post("/agents/<agent_id>/test-set/cases/retire")
def retire_cases(agent_id: str):
    args = body(BulkRetireBody)
    cases = service.retire_cases(
        g.caller, agent_id, args["projectId"], args["caseIds"], args["reason"]
    )
    return jsonify(data=[case_json(case) for case in cases])


@bp.post("/agents/<agent_id>/test-set/cases/restore")
def restore_cases(agent_id: str):
    args = body(BulkRestoreBody)
    cases = service.restore_cases(g.caller, agent_id, args["projectId"], args["caseIds"])
    return jsonify(data=[case_json(case) for case in cases])


@bp.post("/agents/<agent_id>/test-set/cases/tags")
def tag_cases(agent_id: str):
    args = body(BulkTagsBody)
    cases = service.tag_cases(g.caller, agent_id, args["projectId"], args["caseIds"],
                              args.get("add", []), args.get("remove", []))  # fmt: skip
    return jsonify(data=[case_json(case) for case in cases])


@bp.get("/agents/<agent_id>/test-set/export")
def export(agent_id: str):
    args = query(ExportQuery)
    project_id, form = args.pop("projectId"), args.pop("format")
    rows = service.export_cases(g.caller, agent_id, project_id, **args)
    stem = "-".join([agent_id, project_id, *([args["version"]] if "version" in args else [])])
    return http.download(*reports.export(rows, form), stem, form)


def _one_case(case: Any, out: dict[str, Any] | None = None) -> tuple[Any, dict[str, str]]:
    """One case's answer, with its ETag (what a revision's If-Match names)."""
    return jsonify(out or case_json(case)), {"ETag": service.etag(case)}


@bp.get("/agents/<agent_id>/test-set/cases/<case_id>")
def get_case(agent_id: str, case_id: str):
    view = service.get_case(g.caller, agent_id, case_id)
    out = case_json(view.case)
    out["snapshot"] = dump(SnapshotOut, view.snapshot)
    return _one_case(view.case, out)


@bp.get("/agents/<agent_id>/test-set/health")
def get_test_set_health(agent_id: str):
    health = service.test_set_health(g.caller, agent_id, query(TestSetQuery)["projectId"])
    return jsonify(health_json(health, health.test_set_id))


@bp.get("/agents/<agent_id>/test-set/cases/<case_id>/record")
def get_case_record(agent_id: str, case_id: str):
    return jsonify(record_json(*service.get_record(g.caller, agent_id, case_id)))


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/retire")
def retire_case(agent_id: str, case_id: str):
    args = body(RetireBody)
    case = service.retire_case(g.caller, agent_id, case_id, args["reason"], args.get("fromTestRun"))
    return _one_case(case)


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/restore")
def restore_case(agent_id: str, case_id: str):
    body(RestoreBody)
    return _one_case(service.restore_case(g.caller, agent_id, case_id))


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/revise")
def revise_case(agent_id: str, case_id: str):
    args, if_match = body(ReviseBody), request.headers.get("If-Match")
    from_run = args.pop("fromTestRun", None)
    return _one_case(service.revise_case(g.caller, agent_id, case_id, args, if_match, from_run))


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/tags")
def tag_case(agent_id: str, case_id: str):
    args = body(TagsBody)
    case = service.tag_case(
        g.caller, agent_id, case_id, args.get("add", []), args.get("remove", [])
    )
    return _one_case(case)


@bp.get("/agents/<agent_id>/test-set/cases/<case_id>/revisions")
def list_revisions(agent_id: str, case_id: str):
    _, revisions = service.list_revisions(g.caller, agent_id, case_id)
    return jsonify(data=[revision_json(revision) for revision in revisions])


# ---------------------------------------------------------------- runs and corrections


@bp.get("/agents/<agent_id>/runs")
def list_runs(agent_id: str):
    args = query(RunsQuery)
    page = service.list_runs(g.caller, agent_id, args.pop("projectId"), **args)
    return jsonify(page_json(page, lambda run: dump(RunOut, run)))


@bp.post("/agents/<agent_id>/runs")
def record_run(agent_id: str):
    run = service.record_run(g.caller, agent_id, body(RecordRunBody))
    return jsonify(dump(RunOut, run)), 201


@bp.post("/agents/<agent_id>/runs/<run_id>/corrections")
def record_correction(agent_id: str, run_id: str):
    case = service.record_correction(g.caller, agent_id, run_id, body(RecordCorrectionBody))
    return jsonify(dump(CorrectionOut, case)), 201


@bp.patch("/agents/<agent_id>/corrections/<correction_id>")
def set_correction_status(agent_id: str, correction_id: str):
    status = body(CorrectionStatusBody)["status"]
    case = service.set_correction_status(g.caller, agent_id, correction_id, status)
    return jsonify(dump(CorrectionOut, case))


# ---------------------------------------------------------------- OpenTelemetry traces


def _otlp_export() -> Any:
    """The OTLP export in the body: protobuf or OTLP/JSON, gzip, deflate or plain."""
    if request.mimetype not in otlp.ENCODINGS:
        raise UnsupportedMediaType("Send application/x-protobuf or application/json.")
    limit = current_app.config["OTLP_MAX_BYTES"]
    try:
        data = otlp.inflate(request.get_data(), request.headers.get("Content-Encoding"), limit)
        return otlp.decode(data, request.mimetype)
    except otlp.UnknownEncoding:
        raise UnsupportedMediaType("Send the body as it is, gzip or deflate.") from None
    except otlp.TooLarge:
        raise RequestTooLarge(details={"maxBytes": limit}) from None
    except otlp.Unreadable as exc:
        raise BadInput(str(exc)) from None


@bp.post("/traces")
def export_traces():
    """OTLP/HTTP's traces endpoint: an exporter's spans, as runs (docs/design.md §10)."""
    found = service.ingest_traces(g.caller, _otlp_export())
    body = otlp.answer(found.rejected, found.message, request.mimetype)
    return Response(body, mimetype=request.mimetype)


# ---------------------------------------------------------------- tokens


@bp.post("/tokens")
def create_token():
    args = body(NewTokenBody)
    token, secret = service.create_token(g.caller, args["name"], args.get("expiresAt"))
    g.withhold_answer = True  # an answer with a secret is never kept for replay
    return jsonify({**dump(TokenOut, token), "secret": secret}), 201


@bp.get("/tokens")
def list_tokens():
    page = service.list_tokens(g.caller, **query(Paging))
    return jsonify(page_json(page, lambda token: dump(TokenOut, token)))


@bp.delete("/tokens/<token_id>")
def revoke_token(token_id: str):
    service.revoke_token(g.caller, token_id)
    return "", 204


@bp.get("/openapi.json")
def openapi():
    from .openapi import document

    return jsonify(document(current_app))


# ---------------------------------------------------------------- versions and test runs


@bp.get("/agents/<agent_id>/test-set/versions")
def list_versions(agent_id: str):
    args = query(PageQuery)
    set_id, page = service.list_versions(g.caller, agent_id, args.pop("projectId"), **args)
    return jsonify(page_json(page, lambda row: version_json(row, set_id)))


@bp.get("/agents/<agent_id>/test-set/versions/<version>/diff/<other>")
def diff_versions(agent_id: str, version: str, other: str):
    args = query(DiffQuery)
    diff = service.diff_versions(g.caller, agent_id, args.pop("projectId"), version, other, **args)
    out = page_json(
        diff.page,
        lambda r: {"caseId": r[0], "change": r[1], "kind": r[2], "expert": bool(r[3])},
    )
    out["counts"] = {"added": diff.added, "removed": diff.removed, "changed": diff.changed}
    return jsonify(out)


def _run_json(view: service.RunView) -> dict[str, Any]:
    return test_run_json(view, grading.wilson)


def _run_url(agent_id: str, run_id: str) -> str:
    return url_for("api.get_test_run", agent_id=agent_id, run_id=run_id)


@bp.post("/agents/<agent_id>/test-runs")
def start_test_run(agent_id: str):
    view = service.start_test_run(g.caller, agent_id, body(StartTestRunBody))
    return jsonify(_run_json(view)), 201, {"Location": _run_url(agent_id, view.run.id)}


@bp.get("/agents/<agent_id>/test-runs")
def list_test_runs(agent_id: str):
    args = query(TestRunsQuery)
    page, agent = service.list_test_runs(g.caller, agent_id, args.pop("projectId"), **args)
    return jsonify(page_json(page, lambda run: _run_json(service.RunView(run, agent))))


@bp.get("/agents/<agent_id>/test-runs/<run_id>")
def get_test_run(agent_id: str, run_id: str):
    return jsonify(_run_json(service.get_test_run(g.caller, agent_id, run_id)))


@bp.get("/agents/<agent_id>/test-runs/<run_id>/cases")
def runner_cases(agent_id: str, run_id: str):
    args = query(RunCasesQuery)
    args["awaiting"] = args.get("awaiting") == "true"
    page = service.runner_cases(g.caller, agent_id, run_id, **args)
    return jsonify(page_json(page, runner_case_json))


@bp.post("/agents/<agent_id>/test-runs/<run_id>/results")
def send_results(agent_id: str, run_id: str):
    results = body(ResultsBody)["results"]
    accepted, duplicates, view = service.send_results(g.caller, agent_id, run_id, results)
    return jsonify({"accepted": accepted, "duplicates": duplicates, "run": _run_json(view)})


@bp.post("/agents/<agent_id>/test-runs/<run_id>/finish")
def finish_test_run(agent_id: str, run_id: str):
    body(EmptyBody)
    return jsonify(_run_json(service.finish_test_run(g.caller, agent_id, run_id)))


@bp.post("/agents/<agent_id>/test-runs/<run_id>/cancel")
def cancel_test_run(agent_id: str, run_id: str):
    body(EmptyBody)
    return jsonify(_run_json(service.cancel_test_run(g.caller, agent_id, run_id)))


@bp.get("/agents/<agent_id>/test-runs/<run_id>/results")
def list_results(agent_id: str, run_id: str):
    args = query(ResultsQuery)
    if "outcome" in args:
        args["outcome"] = args["outcome"].split(",")
    page = service.list_results(g.caller, agent_id, run_id, **args)
    return jsonify(page_json(page, result_json))


@bp.get("/agents/<agent_id>/test-runs/<run_id>/results/<case_id>")
def get_result(agent_id: str, run_id: str, case_id: str):
    return jsonify(result_detail_json(service.get_result(g.caller, agent_id, run_id, case_id)))


@bp.get("/agents/<agent_id>/test-runs/<run_id>/compare/<other_id>")
def compare(agent_id: str, run_id: str, other_id: str):
    args = query(CompareQuery)
    if "change" in args:
        args["change"] = args["change"].split(",")
    found = service.compare(g.caller, agent_id, run_id, other_id, **args)
    out = page_json(found.page, compare_row_json)
    out["counts"] = change_counts_json(found.counts)
    out["pValue"] = found.p_value
    if found.shared_only:
        out["sharedOnly"] = True
    return jsonify(out)


@bp.get("/agents/<agent_id>/test-runs/<run_id>/report.xml")
def report(agent_id: str, run_id: str):
    view, rows = service.report(g.caller, agent_id, run_id)
    return Response(stream_with_context(reports.junit(view, rows)), mimetype="application/xml")
