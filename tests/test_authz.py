"""Who may do what (docs/design.md §1-2, API-ROUTE-CONVENTIONS §2.1 and §4.4), as one table
per surface.

Every `/v1` route is called by ten callers: no token, a malformed one, an expired one, a revoked
one, another tenant's admin, a reader, a user with publish only, a writer, an admin and a service
token. Every HTML route is visited by four: nobody signed in, another tenant's admin, a reader
and an expert. Each answer must be exactly the table's: the status, the error code, and for a
403 the permissions `details.needs` names. A refused request changes nothing; another tenant's
ids answer exactly as ids that do not exist. And no token secret is ever stored or logged.

The world is tests/world.json plus `u-pubonly`, who has publish on both agents and nothing else,
and, for the routes of test runs (docs/design.md §9), four test runs (see `runs`): their ids are
made by the server, so the table names them as `{done}`, `{open}`, `{spare}` and `{theirs}`,
filled in when a route is called.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import (
    AGENT,
    MULTI,
    P1,
    P2,
    PG,
    TOKENS,
    WORLD,
    csrf_of,
    error_of,
    sign_in,
    snapshot_db,
)

from kindgi import world
from kindgi.database import db

UNKNOWN_PROJECT = "0badcafe-0000-4000-8000-000000000000"
PUBONLY = "kgi_pubonly"


@pytest.fixture
def app(app):
    """The test world and one more user, who may publish on both agents but read nothing."""
    with app.app_context():
        world.load(
            {
                "users": [
                    {"id": "u-pubonly", "tenant": "acme", "email": "pubonly@acme.test",
                     "name": "Paul Publish-only"},
                ],
                "tokens": [{"id": "tok-pubonly", "principal": "u-pubonly", "secret": PUBONLY}],
                "grants": [
                    {"principal": "u-pubonly", "permission": "publish", "agent": AGENT},
                    {"principal": "u-pubonly", "permission": "publish", "agent": MULTI},
                ],
            }
        )  # fmt: skip
        db.session.commit()
        db.session.remove()
    return app


@pytest.fixture
def runs(app) -> dict[str, str]:
    """Test runs started through the API by the admins, by the name the table gives their ids:
    in acme.drafting / P1 (cases case-2 and cor-1), `done` (case-2 passed, cor-1 erred),
    `open` (against `done` as its baseline, every case awaiting) and `spare` (open, to
    cancel); and `theirs`, a done run of globex's own acme.drafting."""
    client = app.test_client()

    def send(who: str, path: str, body: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"}
        resp = client.post(f"/v1/agents/{AGENT}/test-runs{path}", json=body, headers=headers)
        assert resp.status_code in (200, 201), resp.get_json()
        return resp.get_json()

    def start(who: str, project: str, **more: Any) -> str:
        return send(who, "", {"projectId": project, "candidate": "2.0.0", **more})["id"]

    done = start("admin", P1)
    finished = send("admin", f"/{done}/results", {"results": [
        {"caseId": "case-2", "output": {}, "calls": [], "ranked": ["k1"]},
        {"caseId": "cor-1", "error": "the candidate crashed"},
    ]})  # fmt: skip
    assert finished["run"]["status"] == "done", finished
    theirs = start("globex", PG)
    over = send("globex", f"/{theirs}/results", {"results": [{"caseId": "cor-g", "error": "x"}]})
    assert over["run"]["status"] == "done", over
    return {
        "done": done,
        "open": start("admin", P1, baseline=done),
        "spare": start("admin", P1),
        "theirs": theirs,
    }


# ---------------------------------------------------------------- the /v1 table


@dataclass(frozen=True)
class Route:
    """One call of a route; `missing` is the same call naming ids that exist nowhere."""

    method: str
    path: str
    body: Any = None
    missing: tuple[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()


ADMINS_OTHER_TOKEN = "tok-spare"  # made by the admin before each table runs
TS = f"/v1/agents/{AGENT}/test-set"
TR = f"/v1/agents/{AGENT}/test-runs"
RESULT = {"results": [{"caseId": "case-2", "output": {"answer": "x"}, "calls": []}]}

V1 = {
    "counts": Route("GET", f"/v1/agents/{AGENT}/test-set?projectId={P1}",
                    missing=(f"/v1/agents/{AGENT}/test-set?projectId={UNKNOWN_PROJECT}", None)),
    "list cases": Route("GET", f"/v1/agents/{AGENT}/test-set/cases?projectId={P1}",
                        missing=(f"/v1/agents/{AGENT}/test-set/cases?projectId={UNKNOWN_PROJECT}",
                                 None)),
    "search cases": Route(
        "GET", f"/v1/agents/{AGENT}/test-set/cases?projectId={P1}&q=lease&tool=lookup&expert=false",
        missing=(f"/v1/agents/{AGENT}/test-set/cases?projectId={UNKNOWN_PROJECT}&q=lease", None)),
    "add a case": Route("POST", f"/v1/agents/{AGENT}/test-set/cases",
                        {"runId": "run-1", "answer": "right"},
                        missing=(f"/v1/agents/{AGENT}/test-set/cases",
                                 {"runId": "run-nope", "answer": "right"})),
    "add a case, two projects": Route(
        "POST", f"/v1/agents/{MULTI}/test-set/cases", {"runId": "run-multi", "answer": "right"},
        missing=("/v1/agents/acme.nope/test-set/cases", {"runId": "run-multi", "answer": "right"})),
    "read a case": Route("GET", f"/v1/agents/{AGENT}/test-set/cases/case-2",
                         missing=(f"/v1/agents/{AGENT}/test-set/cases/case-nope", None)),
    "revise": Route("POST", f"{TS}/cases/case-2/revise", {"note": "x", "answer": "wrong",
                                                           "why": "x"},
                    missing=(f"{TS}/cases/case-nope/revise", {"note": "x", "answer": "right"}),
                    headers=(("If-Match", '"r1"'),)),
    "tag a case": Route("POST", f"{TS}/cases/case-2/tags", {"add": ["smoke"]},
                        missing=(f"{TS}/cases/case-nope/tags", {"add": ["smoke"]})),
    "tag several": Route("POST", f"{TS}/cases/tags",
                         {"projectId": P1, "caseIds": ["case-1", "case-2"], "add": ["smoke"]},
                         missing=(f"{TS}/cases/tags", {"projectId": UNKNOWN_PROJECT,
                                  "caseIds": ["case-1"], "add": ["smoke"]})),
    "list revisions": Route("GET", f"{TS}/cases/case-2/revisions",
                            missing=(f"{TS}/cases/case-nope/revisions", None)),
    "health": Route("GET", f"{TS}/health?projectId={P1}",
                    missing=(f"{TS}/health?projectId={UNKNOWN_PROJECT}", None)),
    "a case's record": Route("GET", f"{TS}/cases/case-2/record",
                             missing=(f"{TS}/cases/case-nope/record", None)),
    "retire": Route("POST", f"/v1/agents/{AGENT}/test-set/cases/case-2/retire", {"reason": "x"},
                    missing=(f"/v1/agents/{AGENT}/test-set/cases/case-nope/retire",
                             {"reason": "x"})),
    "retire, two projects": Route(
        "POST", f"/v1/agents/{MULTI}/test-set/cases/cor-3/retire", {"reason": "x"},
        missing=("/v1/agents/acme.nope/test-set/cases/cor-3/retire", {"reason": "x"})),
    "restore": Route("POST", f"/v1/agents/{AGENT}/test-set/cases/case-1/restore", {},
                     missing=(f"/v1/agents/{AGENT}/test-set/cases/case-nope/restore", {})),
    "retire several": Route("POST", f"{TS}/cases/retire",
                            {"projectId": P1, "caseIds": ["case-1"], "reason": "x"},
                            missing=(f"{TS}/cases/retire", {"projectId": UNKNOWN_PROJECT,
                                     "caseIds": ["case-1"], "reason": "x"})),
    "restore several": Route("POST", f"{TS}/cases/restore",
                             {"projectId": P1, "caseIds": ["case-1"]},
                             missing=(f"{TS}/cases/restore", {"projectId": UNKNOWN_PROJECT,
                                      "caseIds": ["case-1"]})),
    "export": Route("GET", f"{TS}/export?projectId={P1}&format=csv",
                    missing=(f"{TS}/export?projectId={UNKNOWN_PROJECT}&format=csv", None)),
    "list runs": Route("GET", f"/v1/agents/{AGENT}/runs?projectId={P1}",
                       missing=(f"/v1/agents/{AGENT}/runs?projectId={UNKNOWN_PROJECT}", None)),
    "record a run": Route("POST", f"/v1/agents/{AGENT}/runs",
                          {"projectId": P1, "version": "1.1.0", "status": "finished"},
                          missing=(f"/v1/agents/{AGENT}/runs", {"projectId": UNKNOWN_PROJECT,
                                   "version": "1.1.0", "status": "finished"})),
    "record a correction": Route("POST", f"/v1/agents/{AGENT}/runs/run-1/corrections",
                                 {"answer": "right"},
                                 missing=(f"/v1/agents/{AGENT}/runs/run-nope/corrections",
                                          {"answer": "right"})),
    "change a correction": Route("PATCH", f"/v1/agents/{AGENT}/corrections/cor-1",
                                 {"status": "fixed"},
                                 missing=(f"/v1/agents/{AGENT}/corrections/cor-nope",
                                          {"status": "fixed"})),
    "make a token": Route("POST", "/v1/tokens", {"name": "mine"}),
    "list tokens": Route("GET", "/v1/tokens"),
    "revoke a token": Route("DELETE", f"/v1/tokens/{ADMINS_OTHER_TOKEN}",
                            missing=("/v1/tokens/tok-nope", None)),
    "the OpenAPI document": Route("GET", "/v1/openapi.json"),
    # test runs (§9): `{done}` and the like are the ids of `runs`, filled in at call time
    "list versions": Route("GET", f"{TS}/versions?projectId={P1}",
                           missing=(f"{TS}/versions?projectId={UNKNOWN_PROJECT}", None)),
    "diff two versions": Route("GET", f"{TS}/versions/v1/diff/v1?projectId={P1}&change=added",
                               missing=(f"{TS}/versions/v1/diff/v1?projectId={UNKNOWN_PROJECT}"
                                        "&change=added", None)),
    "start a test run": Route("POST", TR, {"projectId": P1, "candidate": "3.0.0"},
                              missing=(TR, {"projectId": UNKNOWN_PROJECT, "candidate": "3.0.0"})),
    "start one against another tenant's baseline": Route(
        "POST", TR, {"projectId": P1, "candidate": "3.0.0", "baseline": "{theirs}"},
        missing=(TR, {"projectId": P1, "candidate": "3.0.0", "baseline": "trun-nope"})),
    "start one re-running another tenant's run": Route(
        "POST", TR, {"projectId": P1, "candidate": "3.0.0", "rerunOf": "{theirs}"},
        missing=(TR, {"projectId": P1, "candidate": "3.0.0", "rerunOf": "trun-nope"})),
    "start one in their project against our baseline": Route(
        "POST", TR, {"projectId": PG, "candidate": "3.0.0", "baseline": "{done}"},
        missing=(TR, {"projectId": PG, "candidate": "3.0.0", "baseline": "trun-nope"})),
    "list test runs": Route("GET", f"{TR}?projectId={P1}&candidate=2.0.0",
                            missing=(f"{TR}?projectId={UNKNOWN_PROJECT}&candidate=2.0.0", None)),
    "read a test run": Route("GET", f"{TR}/{{done}}", missing=(f"{TR}/trun-nope", None)),
    "read a test run under another agent": Route(
        "GET", f"/v1/agents/{MULTI}/test-runs/{{done}}",
        missing=(f"/v1/agents/{MULTI}/test-runs/trun-nope", None)),
    "the runner's cases": Route("GET", f"{TR}/{{open}}/cases?awaiting=true",
                                missing=(f"{TR}/trun-nope/cases?awaiting=true", None)),
    "send results": Route("POST", f"{TR}/{{open}}/results", RESULT,
                          missing=(f"{TR}/trun-nope/results", RESULT)),
    "send results under another agent": Route(
        "POST", f"/v1/agents/{MULTI}/test-runs/{{open}}/results", RESULT,
        missing=(f"/v1/agents/{MULTI}/test-runs/trun-nope/results", RESULT)),
    "finish": Route("POST", f"{TR}/{{open}}/finish", {},
                    missing=(f"{TR}/trun-nope/finish", {})),
    "cancel under another agent": Route(
        "POST", f"/v1/agents/{MULTI}/test-runs/{{spare}}/cancel", {},
        missing=(f"/v1/agents/{MULTI}/test-runs/trun-nope/cancel", {})),
    "cancel": Route("POST", f"{TR}/{{spare}}/cancel", {},
                    missing=(f"{TR}/trun-nope/cancel", {})),
    "list results": Route("GET", f"{TR}/{{done}}/results?outcome=pass,error",
                          missing=(f"{TR}/trun-nope/results?outcome=pass,error", None)),
    "read a result": Route("GET", f"{TR}/{{done}}/results/case-2",
                           missing=(f"{TR}/trun-nope/results/case-nope", None)),
    "compare": Route("GET", f"{TR}/{{open}}/compare/{{done}}",
                     missing=(f"{TR}/trun-nope/compare/trun-nope", None)),
    "compare their run with ours": Route(
        "GET", f"{TR}/{{theirs}}/compare/{{done}}",
        missing=(f"{TR}/trun-nope/compare/trun-nope", None)),
    "the JUnit report": Route("GET", f"{TR}/{{done}}/report.xml",
                              missing=(f"{TR}/trun-nope/report.xml", None)),
}  # fmt: skip

CALLERS = {
    "no token": None,
    "malformed": "Bearer kgi admin",
    "expired": "Bearer kgi_expired",
    "revoked": "Bearer kgi_revoked",
    "another tenant": f"Bearer {TOKENS['globex']}",
    "read only": f"Bearer {TOKENS['reader']}",
    "publish only": f"Bearer {PUBONLY}",
    "write": f"Bearer {TOKENS['writer']}",
    "admin": f"Bearer {TOKENS['admin']}",
    "service token": f"Bearer {TOKENS['ci']}",
}

# Who needs what, in the table's shorthand: "403 publish:acme.drafting read:P1" is a 403 whose
# details.needs names exactly those; "404 run-not-found" a 404 with that code; a bare status is
# a success (or, for 401, `unauthenticated`).
D, M = f"publish:{AGENT}", f"publish:{MULTI}"
R1, W1, R2, W2 = "read:P1", "write:P1", "read:P2", "write:P2"
ANON = {"no token": "401", "malformed": "401", "expired": "401", "revoked": "401"}
TRNF = "404 test-run-not-found"
# columns: another tenant, read only, publish only, write, admin, service token
TABLE = {
    "counts": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "list cases": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "search cases": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "add a case": ("404 run-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "201", "201"),
    "add a case, two projects": ("404 agent-not-found", f"403 {M} {W2}", f"403 {R2} {W2}",
                                 f"403 {M} {R2} {W2}", "201", f"403 {M} {R2} {W2}"),
    "read a case": ("404 case-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "revise": ("404 case-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
    "list revisions": ("404 case-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "a case's record": ("404 case-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "tag a case": ("404 case-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
    "tag several": ("404 project-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
    "health": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "retire": ("404 case-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
    "retire, two projects": ("404 agent-not-found", f"403 {M} {W2}", f"403 {R2} {W2}",
                             f"403 {M} {R2} {W2}", "200", f"403 {M} {R2} {W2}"),
    "restore": ("404 case-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
    "retire several": ("404 project-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200",
                       "200"),
    "restore several": ("404 project-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200",
                        "200"),
    "export": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "list runs": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "record a run": ("404 project-not-found", f"403 {W1}", f"403 {W1}", "201", "201", "201"),
    "record a correction": ("404 run-not-found", f"403 {W1}", f"403 {W1}", "201", "201", "201"),
    "change a correction": ("404 correction-not-found", f"403 {W1}", f"403 {W1}", "200", "200",
                            "200"),
    "make a token": ("201", "201", "201", "201", "201", "201"),
    "list tokens": ("200", "200", "200", "200", "200", "200"),
    "revoke a token": ("404 not-found", "404 not-found", "404 not-found", "404 not-found", "204",
                       "404 not-found"),
    "the OpenAPI document": ("200", "200", "200", "200", "200", "200"),
    "list versions": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "diff two versions": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "start a test run": ("404 project-not-found", f"403 {W1}", f"403 {W1}", "201", "201", "201"),
    "start one against another tenant's baseline": (
        "404 project-not-found", f"403 {W1}", f"403 {W1}", *[TRNF] * 3),
    "start one re-running another tenant's run": (
        "404 project-not-found", f"403 {W1}", f"403 {W1}", *[TRNF] * 3),
    "start one in their project against our baseline": (TRNF, *["404 project-not-found"] * 5),
    "list test runs": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "read a test run": (TRNF, "200", f"403 {R1}", "200", "200", "200"),
    "read a test run under another agent": ("404 agent-not-found", *[TRNF] * 5),
    "the runner's cases": (TRNF, "200", f"403 {R1}", "200", "200", "200"),
    "send results": (TRNF, f"403 {W1}", f"403 {W1}", "200", "200", "200"),
    "send results under another agent": ("404 agent-not-found", *[TRNF] * 5),
    "finish": (TRNF, f"403 {W1}", f"403 {W1}", "200", "200", "200"),
    "cancel under another agent": ("404 agent-not-found", *[TRNF] * 5),
    "cancel": (TRNF, f"403 {W1}", f"403 {W1}", "200", "200", "200"),
    "list results": (TRNF, "200", f"403 {R1}", "200", "200", "200"),
    "read a result": (TRNF, "200", f"403 {R1}", "200", "200", "200"),
    "compare": (TRNF, "200", f"403 {R1}", "200", "200", "200"),
    "compare their run with ours": (TRNF,) * 6,
    "the JUnit report": (TRNF, "200", f"403 {R1}", "200", "200", "200"),
}  # fmt: skip
SIGNED = ("another tenant", "read only", "publish only", "write", "admin", "service token")
PROJECTS = {"P1": P1, "P2": P2}


def expected(route: str, caller: str) -> str:
    if route == "the OpenAPI document":
        return "200"  # public
    if caller in ANON:
        return ANON[caller]
    return TABLE[route][SIGNED.index(caller)]


def needs_of(err: dict[str, Any]) -> set[str]:
    """`details.needs` in the table's shorthand."""
    out = set()
    for need in err["details"]["needs"]:
        target = need.get("agent") or next(k for k, v in PROJECTS.items() if v == need["project"])
        out.add(f"{need['permission']}:{target}")
    return out


def filled(value: Any, ids: dict[str, str]) -> Any:
    """A path or body with the table's `{done}` and the like replaced by those runs' ids."""
    if isinstance(value, str):
        return value.format_map(ids)
    if isinstance(value, dict):
        return {k: filled(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, ids) for v in value]
    return value


def call(client, route: Route, authorization: str | None, ids: dict[str, str], *,
         missing: bool = False):  # fmt: skip
    path, body = route.missing if missing else (route.path, route.body)
    headers = dict(route.headers)
    if authorization:
        headers["Authorization"] = authorization
    return client.open(filled(path, ids), method=route.method, json=filled(body, ids),
                       headers=headers)  # fmt: skip


def answered_as(resp, want: str) -> str | None:
    """None if `resp` is the answer `want` describes, else what is wrong with it."""
    status, *rest = want.split()
    got = resp.status_code
    if str(got) != status:
        return f"{got} {resp.get_data(as_text=True)[:200]}"
    if got >= 400:
        err = error_of(resp)
        if got == 401:
            if err["code"] != "unauthenticated" or resp.headers.get("WWW-Authenticate") != "Bearer":
                return f"401 {err} {resp.headers.get('WWW-Authenticate')}"
        elif got == 403:
            if err["code"] != "forbidden" or needs_of(err) != set(rest):
                return f"403 {err}"
        elif err["code"] != rest[0]:
            return f"{got} {err['code']}"
    return None


def without_request_id(resp) -> dict[str, Any]:
    body = resp.get_json()
    body["error"]["requestId"] = ""
    return body


def test_the_v1_table_names_every_route_and_method(app):
    served = {
        (method, re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/v1/")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    # OTLP's endpoint answers in its own protocol (google.rpc.Status, protobuf or JSON), not the
    # envelope this table compares: tests/test_otlp.py holds each caller to docs/design.md §10
    # (401 for a bad token, 403 when it may write none of the spans, rejected spans elsewhere)
    served.discard(("POST", "/v1/traces"))
    templates = {
        f"/v1/agents/{AGENT}": "/v1/agents/{agent_id}",
        f"/v1/agents/{MULTI}": "/v1/agents/{agent_id}",
        "/case-2/": "/{case_id}/",
        "/case-1/": "/{case_id}/",
        "/cor-3/": "/{case_id}/",
        "/run-1/": "/{run_id}/",
        "/corrections/cor-1": "/corrections/{correction_id}",
        f"/tokens/{ADMINS_OTHER_TOKEN}": "/tokens/{token_id}",
        "/cases/case-2": "/cases/{case_id}",
        "/compare/{run_id}": "/compare/{other_id}",
        "/versions/v1/diff/v1": "/versions/{version}/diff/{other}",
    }
    runs = dict.fromkeys(("done", "open", "spare", "theirs"), "{run_id}")
    tabled = set()
    for route in V1.values():
        path = filled(route.path, runs).split("?")[0] + "/"
        for concrete, template in templates.items():
            path = path.replace(concrete, template)
        tabled.add((route.method, path.rstrip("/")))
    assert tabled == served


@pytest.mark.parametrize("caller", CALLERS)
def test_every_v1_route_answers_each_caller_exactly_as_design_section_2_says(app, api, runs,
                                                                             caller):  # fmt: skip
    spare = api.post("/v1/tokens", json={"name": "spare"})  # for "revoke a token"
    assert spare.status_code == 201
    sql_rename_token(app, spare.get_json()["id"], ADMINS_OTHER_TOKEN)
    client, wrong = app.test_client(), []
    for name, route in V1.items():
        want = expected(name, caller)
        before = snapshot_db(app)
        resp = call(client, route, CALLERS[caller], runs)
        problem = answered_as(resp, want)
        if problem:
            wrong.append(f"{route.method} {route.path} as {caller}: wanted {want}, got {problem}")
            continue
        if resp.status_code >= 400:
            after = snapshot_db(app)
            if after != before:
                wrong.append(f"{route.method} {route.path} as {caller}: refused but changed")
        if resp.status_code == 404 and route.missing:  # theirs looks like nothing at all
            nothing = call(client, route, CALLERS[caller], runs, missing=True)
            if without_request_id(nothing) != without_request_id(resp):
                wrong.append(f"{route.method} {route.path} as {caller}: {resp.get_json()} "
                             f"but for ids that do not exist {nothing.get_json()}")  # fmt: skip
    assert wrong == []


def sql_rename_token(app, old: str, new: str) -> None:
    """Give a token a known id, so the table can name it."""
    from sqlalchemy import update

    from kindgi.models import Token

    with app.app_context():
        db.session.execute(update(Token).where(Token.id == old).values(id=new))
        db.session.commit()
        db.session.remove()


def test_unauthenticated_answers_are_one_and_the_same_body_on_every_route(app, runs):
    client = app.test_client()
    for name, route in V1.items():
        if name == "the OpenAPI document":
            continue
        bodies = {
            str(without_request_id(call(client, route, CALLERS[caller], runs)))
            for caller in ("no token", "malformed", "expired", "revoked")
        }
        assert len(bodies) == 1, (name, bodies)


def test_another_tenants_run_to_compare_with_is_a_run_that_does_not_exist(app, runs):
    """The second run of a comparison, for everyone who may read the first (the table's
    `compare their run with ours` is the other way round)."""
    client = app.test_client()
    for caller in ("read only", "write", "admin", "service token"):
        headers = {"Authorization": CALLERS[caller]}
        theirs = client.get(filled(f"{TR}/{{done}}/compare/{{theirs}}", runs), headers=headers)
        nothing = client.get(filled(f"{TR}/{{done}}/compare/trun-nope", runs), headers=headers)
        assert answered_as(theirs, "404 test-run-not-found") is None, (caller, theirs.get_json())
        assert without_request_id(theirs) == without_request_id(nothing), caller


# What a path names beyond the run (its other run, its case, a version), named by a caller in the
# tenant who may not read the project: §2 checks what the request names (404) before the grants
# (403), as it does for a case (`GET …/test-set/cases/case-nope` is 404 for "publish only").
NAMED_AFTER_THE_RUN = {
    "an unknown version": (f"{TS}/versions/v9/diff/v1?projectId={P1}", "404 version-not-found"),
    "an unknown run to compare with": (f"{TR}/{{done}}/compare/trun-nope",
                                       "404 test-run-not-found"),
    "another tenant's run to compare with": (f"{TR}/{{done}}/compare/{{theirs}}",
                                             "404 test-run-not-found"),
    "an unknown case of the run": (f"{TR}/{{done}}/results/case-nope", "404 case-not-found"),
}  # fmt: skip


@pytest.mark.parametrize("named", NAMED_AFTER_THE_RUN)
def test_what_a_path_names_is_404_before_the_grants_as_design_section_2_orders(app, runs, named):
    path, want = NAMED_AFTER_THE_RUN[named]
    resp = app.test_client().get(
        filled(path, runs), headers={"Authorization": CALLERS["publish only"]}
    )
    problem = answered_as(resp, want)
    assert problem is None, problem


def test_another_tenant_sees_only_its_own_tokens(api):
    listed = {t["id"] for t in api.get("/v1/tokens", as_="globex").get_json()["data"]}
    assert listed == {"tok-globex"}


# ---------------------------------------------------------------- the HTML table


@dataclass
class Page:
    method: str
    path: str
    form: dict[str, str] = field(default_factory=dict)


PAGES = {
    "overview": Page("GET", "/"),
    "cases": Page("GET", f"/agents/{MULTI}/test-set/cases?projectId={P2}"),
    "a case": Page("GET", f"/agents/{MULTI}/test-set/cases/cor-3"),
    "revise form": Page("GET", f"/agents/{MULTI}/test-set/cases/cor-3/revise"),
    "revise a case": Page("POST", f"/agents/{MULTI}/test-set/cases/cor-3/revise",
                          {"expect": '{"answer": "right"}', "note": "x",
                           "etag": '"r1"', "action": "save"}),
    "retire": Page("POST", f"/agents/{MULTI}/test-set/cases/cor-3/retire", {"reason": "stale"}),
    "restore": Page("POST", f"/agents/{MULTI}/test-set/cases/cor-3/restore"),
    "retire several": Page("POST", f"/agents/{MULTI}/test-set/cases/bulk",
                           {"projectId": P2, "caseIds": "cor-3", "reason": "stale",
                            "action": "retire"}),
    "export": Page("GET", f"/agents/{MULTI}/test-set/export?projectId={P2}"),
    "new case form": Page("GET", f"/agents/{MULTI}/test-set/cases/new?projectId={P2}"),
    "add a case": Page("POST", f"/agents/{MULTI}/test-set/cases/new?projectId={P2}",
                       {"runId": "run-multi", "answer": "right"}),
    "runs inbox": Page("GET", f"/agents/{MULTI}/runs?projectId={P2}&hasCase=true"),
    "a run": Page("GET", f"/agents/{MULTI}/runs/run-multi"),
    "test runs": Page("GET", f"/agents/{AGENT}/test-set/runs?projectId={P1}"),
    "health": Page("GET", f"/agents/{AGENT}/test-set/health?projectId={P1}"),
    "a test run": Page("GET", f"/agents/{AGENT}/test-runs/{{done}}?outcome=error"),
    "a run's progress": Page("GET", f"/agents/{AGENT}/test-runs/{{done}}/progress"),
    "a run's result": Page("GET", f"/agents/{AGENT}/test-runs/{{done}}/results/case-2"),
    "a comparison": Page("GET", f"/agents/{AGENT}/test-runs/{{open}}/compare"),
    "triage: revise form": Page("GET", f"/agents/{AGENT}/test-runs/{{done}}/results/case-2/revise"),
    "triage: revise": Page("POST", f"/agents/{AGENT}/test-runs/{{done}}/results/case-2/revise",
                           {"expect": '{"answer": "right"}', "note": "x", "etag": '"r1"',
                            "action": "save"}),
    "triage: retire form": Page("GET", f"/agents/{AGENT}/test-runs/{{done}}/results/case-2/retire"),
    "triage: retire": Page("POST", f"/agents/{AGENT}/test-runs/{{done}}/results/case-2/retire",
                           {"reason": "stale"}),
    "tokens": Page("GET", "/tokens"),
    "make a token": Page("POST", "/tokens", {"name": "from the page"}),
    "revoke a token": Page("POST", "/tokens/tok-expert/revoke"),
    "API reference": Page("GET", "/docs"),
    "sign-in page": Page("GET", "/login"),
    "sign-out page": Page("GET", "/logout"),
    "a stylesheet": Page("GET", "/static/style.css"),
    "liveness": Page("GET", "/healthz"),
    "readiness": Page("GET", "/readyz"),
    "metrics": Page("GET", "/metrics"),
    "sign in, wrong password": Page("POST", "/login", {"email": "reader@acme.test",
                                                       "password": "wrong"}),
    "sign out": Page("POST", "/logout"),  # last: it ends the session
}  # fmt: skip
LOGINS = {
    "anonymous": None,
    "another tenant": ("admin@globex.test", "globex-pass-1"),
    "read only": ("reader@acme.test", "reader-pass-1"),
    "expert": ("expert@acme.test", "expert-pass-1"),
}
# columns: anonymous, another tenant, read only, expert ("login" is a redirect to sign in)
PAGE_TABLE = {
    "overview": ("login", "200", "200", "200"),
    "cases": ("login", "404", "200", "200"),
    "a case": ("login", "404", "200", "200"),
    "retire": ("login", "404", "403", "303"),
    "restore": ("login", "404", "403", "303"),
    "retire several": ("login", "404", "403", "303"),
    "revise form": ("login", "404", "403", "200"),
    "revise a case": ("login", "404", "403", "303"),
    "export": ("login", "404", "200", "200"),
    "new case form": ("login", "404", "403", "200"),
    "add a case": ("login", "404", "403", "303"),
    "runs inbox": ("login", "404", "200", "200"),
    "a run": ("login", "404", "200", "200"),
    "test runs": ("login", "404", "200", "403"),  # the runs' pages are in P1: the expert reads P2
    "health": ("login", "404", "200", "403"),
    "a test run": ("login", "404", "200", "403"),
    "a run's progress": ("login", "404", "200", "403"),
    "a run's result": ("login", "404", "200", "403"),
    "a comparison": ("login", "404", "200", "403"),
    # triage needs `publish` in P1: the reader may only read there, the expert not even that
    "triage: revise form": ("login", "404", "403", "403"),
    "triage: revise": ("login", "404", "403", "403"),
    "triage: retire form": ("login", "404", "403", "403"),
    "triage: retire": ("login", "404", "403", "403"),
    "tokens": ("login", "200", "200", "200"),
    "make a token": ("login", "201", "201", "201"),
    "revoke a token": ("login", "404", "404", "303"),
    "API reference": ("200", "200", "200", "200"),
    "sign-in page": ("200", "200", "200", "200"),
    "sign-out page": ("200", "200", "200", "200"),
    "a stylesheet": ("200", "200", "200", "200"),
    "liveness": ("200", "200", "200", "200"),
    "readiness": ("200", "200", "200", "200"),
    "metrics": ("200", "200", "200", "200"),
    "sign in, wrong password": ("401", "401", "401", "401"),
    "sign out": ("302", "302", "302", "302"),
}


def test_the_page_table_names_every_page_and_method(app):
    served = {
        (rule.endpoint, method)
        for rule in app.url_map.iter_rules()
        if not rule.rule.startswith("/v1")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    adapter = app.url_map.bind("localhost")
    visited = {
        (adapter.match(page.path.split("?")[0], method=page.method)[0], page.method)
        for page in PAGES.values()
    }
    assert visited == served


@pytest.mark.parametrize("who", LOGINS)
def test_every_page_answers_each_visitor_exactly_as_design_section_2_says(app, runs, who):
    client, wrong = app.test_client(), []
    if LOGINS[who]:
        sign_in(client, *LOGINS[who])
    token = csrf_of(client)
    for name, page in PAGES.items():
        want = PAGE_TABLE[name][list(LOGINS).index(who)]
        before = snapshot_db(app)
        path = filled(page.path, runs)
        if page.method == "POST":
            resp = client.post(path, data={**page.form, "csrf_token": token})
        else:
            resp = client.get(path)
        if want == "login":
            ok = resp.status_code == 302 and resp.headers["Location"].startswith("/login?next=")
        else:
            ok = resp.status_code == int(want)
        if not ok:
            wrong.append(f"{page.method} {page.path} as {who}: wanted {want}, "
                         f"got {resp.status_code} {resp.headers.get('Location')}")  # fmt: skip
        refused = resp.status_code >= 300 and want not in ("302", "303")
        if ok and refused and name != "sign in, wrong password" and snapshot_db(app) != before:
            wrong.append(f"{page.method} {page.path} as {who}: refused but changed")
    assert wrong == []


REQUEST_ID = re.compile(r"<code>[0-9a-f]{32}</code>")


def test_another_tenants_case_page_is_the_page_of_a_case_that_does_not_exist(app):
    client = app.test_client()
    sign_in(client, *LOGINS["another tenant"])  # globex has an acme.drafting of its own
    theirs = client.get(f"/agents/{AGENT}/test-set/cases/case-2")
    nothing = client.get(f"/agents/{AGENT}/test-set/cases/case-nope")
    assert theirs.status_code == nothing.status_code == 404

    def plain(resp) -> str:
        text = REQUEST_ID.sub("", resp.get_data(as_text=True))
        # the CSRF token, wherever it is written (htmx's header, each form's field), is signed
        # with the second it was made: two requests a second apart differ there alone
        text = re.sub(r'"X-CSRFToken": "[^"]+"', "", text)
        return re.sub(r'name="csrf_token" value="[^"]+"', "", text)

    assert plain(theirs) == plain(nothing)
    assert "case-2" not in theirs.get_data(as_text=True)


# ---------------------------------------------------------------- secrets


def test_token_secrets_are_stored_and_logged_nowhere(app, api, caplog):
    """Every secret the world and this test know, after tokens are made (by the API, with an
    Idempotency-Key, and on the page), used, refused and revoked, with SQL logged too."""
    caplog.set_level(logging.DEBUG)
    logging.getLogger("sqlalchemy.engine").setLevel(logging.INFO)  # statements and parameters
    secrets = {t["secret"] for t in WORLD["tokens"]} | {PUBONLY}
    made = api.post("/v1/tokens", json={"name": "ci"}, headers={"Idempotency-Key": "k-secret"})
    assert made.status_code == 201
    secret = made.get_json()["secret"]
    secrets.add(secret)
    assert api.post("/v1/tokens", json={"name": "ci"}, headers={"Idempotency-Key": "k-secret"},
                    ).status_code == 409  # fmt: skip
    body = {"runId": "run-1", "answer": "right"}
    cases = f"/v1/agents/{AGENT}/test-set/cases"
    used = api.post(cases, json=body, as_=secret, headers={"Idempotency-Key": "k-used"})
    assert used.status_code == 201
    assert api.get("/v1/tokens", as_=secret).status_code == 200
    unknown = "kgi_" + "s3cr3t-never-issued"
    secrets.add(unknown)
    assert api.get("/v1/tokens", as_=unknown).status_code == 401
    client = app.test_client()
    sign_in(client, *LOGINS["read only"])
    page = client.post("/tokens", data={"name": "page", "csrf_token": csrf_of(client)})
    assert page.status_code == 201 and page.headers["Cache-Control"] == "no-store"
    shown = re.search(r'id="new-secret" readonly value="([^"]+)"', page.get_data(as_text=True))
    secrets.add(shown.group(1))
    assert api.delete(f"/v1/tokens/{made.get_json()['id']}").status_code == 204
    assert api.get("/v1/tokens", as_=secret).status_code == 401

    stored = repr(snapshot_db(app))
    logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
    assert "INSERT INTO tokens" in logged  # the SQL log did capture the writes
    for s in secrets:
        assert s not in stored, s
        assert s not in logged, s
        if len(s) > 30:  # an issued secret: not even its random part
            assert s[len("kgi_") :] not in stored + logged, s
