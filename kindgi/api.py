"""The JSON API under `/v1`. Each route parses, calls one service function, and dumps."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, current_app, g, jsonify, request, url_for

from . import http, schemas, service
from .config import API_PREFIX
from .database import reading
from .errors import UnsupportedMediaType, bad_input

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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def body(schema: type[schemas.Schema]) -> dict[str, Any]:
    """The request's JSON body, validated by `schema`; an empty body is an empty object."""
    raw = request.get_data()
    if not raw:
        return schemas.load(schema, {})
    if request.mimetype != "application/json":
        raise UnsupportedMediaType()
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise bad_input({"_body": ["The body is not valid JSON."]}) from None
    return schemas.load(schema, data)


def query(schema: type[schemas.Schema]) -> dict[str, Any]:
    return schemas.load(schema, request.args.to_dict())


def _case_url(agent_id: str, case_id: str) -> str:
    return url_for("api.get_case", agent_id=agent_id, case_id=case_id)


# ---------------------------------------------------------------- the test set


@bp.get("/agents/<agent_id>/test-set")
def get_test_set(agent_id: str):
    args = query(schemas.TestSetQuery)
    counts = service.test_set(g.caller, agent_id, args["projectId"])
    return jsonify(schemas.test_set_json(counts))


@bp.get("/agents/<agent_id>/test-set/cases")
def list_cases(agent_id: str):
    args = query(schemas.CasesQuery)
    page = service.list_cases(g.caller, agent_id, args.pop("projectId"), **args)
    return jsonify(schemas.page_json(page, schemas.case_json))


@bp.post("/agents/<agent_id>/test-set/cases")
def add_case(agent_id: str):
    case = service.add_hand_case(g.caller, agent_id, body(schemas.AddCaseBody))
    return (
        jsonify(schemas.case_json(case)),
        201,
        {"Location": _case_url(agent_id, case.id)},
    )


@bp.get("/agents/<agent_id>/test-set/cases/<case_id>")
def get_case(agent_id: str, case_id: str):
    view = service.get_case(g.caller, agent_id, case_id)
    out = schemas.case_json(view.case)
    out["snapshot"] = schemas.dump(schemas.SnapshotOut, view.snapshot)
    return jsonify(out)


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/retire")
def retire_case(agent_id: str, case_id: str):
    reason = body(schemas.RetireBody)["reason"]
    return jsonify(schemas.case_json(service.retire_case(g.caller, agent_id, case_id, reason)))


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/restore")
def restore_case(agent_id: str, case_id: str):
    body(schemas.RestoreBody)
    return jsonify(schemas.case_json(service.restore_case(g.caller, agent_id, case_id)))


# ---------------------------------------------------------------- runs and corrections


@bp.get("/agents/<agent_id>/runs")
def list_runs(agent_id: str):
    args = query(schemas.RunsQuery)
    page = service.list_runs(g.caller, agent_id, args.pop("projectId"), **args)
    return jsonify(schemas.page_json(page, lambda run: schemas.dump(schemas.RunOut, run)))


@bp.post("/agents/<agent_id>/runs")
def record_run(agent_id: str):
    run = service.record_run(g.caller, agent_id, body(schemas.RecordRunBody))
    return jsonify(schemas.dump(schemas.RunOut, run)), 201


@bp.post("/agents/<agent_id>/runs/<run_id>/corrections")
def record_correction(agent_id: str, run_id: str):
    case = service.record_correction(g.caller, agent_id, run_id, body(schemas.RecordCorrectionBody))
    return jsonify(schemas.dump(schemas.CorrectionOut, case)), 201


@bp.patch("/agents/<agent_id>/corrections/<correction_id>")
def set_correction_status(agent_id: str, correction_id: str):
    status = body(schemas.CorrectionStatusBody)["status"]
    case = service.set_correction_status(g.caller, agent_id, correction_id, status)
    return jsonify(schemas.dump(schemas.CorrectionOut, case))


# ---------------------------------------------------------------- tokens


@bp.post("/tokens")
def create_token():
    args = body(schemas.NewTokenBody)
    token, secret = service.create_token(g.caller, args["name"], args.get("expiresAt"))
    g.withhold_answer = True  # an answer with a secret is never kept for replay
    return jsonify({**schemas.dump(schemas.TokenOut, token), "secret": secret}), 201


@bp.get("/tokens")
def list_tokens():
    page = service.list_tokens(g.caller, **query(schemas.Paging))
    return jsonify(schemas.page_json(page, lambda token: schemas.dump(schemas.TokenOut, token)))


@bp.delete("/tokens/<token_id>")
def revoke_token(token_id: str):
    service.revoke_token(g.caller, token_id)
    return "", 204


@bp.get("/openapi.json")
def openapi():
    from .openapi import document

    return jsonify(document(current_app))
