"""Who may do what (docs/design.md §1-2, API-ROUTE-CONVENTIONS §2.1 and §4.4), as one table
per surface.

Every `/v1` route is called by ten callers: no token, a malformed one, an expired one, a revoked
one, another tenant's admin, a reader, a user with publish only, a writer, an admin and a service
token. Every HTML route is visited by four: nobody signed in, another tenant's admin, a reader
and an expert. Each answer must be exactly the table's: the status, the error code, and for a
403 the permissions `details.needs` names. A refused request changes nothing; another tenant's
ids answer exactly as ids that do not exist. And no token secret is ever stored or logged.

The world is tests/world.json plus `u-pubonly`, who has publish on both agents and nothing else.
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


# ---------------------------------------------------------------- the /v1 table


@dataclass(frozen=True)
class Route:
    """One call of a route; `missing` is the same call naming ids that exist nowhere."""

    method: str
    path: str
    body: Any = None
    missing: tuple[str, Any] | None = None


ADMINS_OTHER_TOKEN = "tok-spare"  # made by the admin before each table runs

V1 = {
    "counts": Route("GET", f"/v1/agents/{AGENT}/test-set?projectId={P1}",
                    missing=(f"/v1/agents/{AGENT}/test-set?projectId={UNKNOWN_PROJECT}", None)),
    "list cases": Route("GET", f"/v1/agents/{AGENT}/test-set/cases?projectId={P1}",
                        missing=(f"/v1/agents/{AGENT}/test-set/cases?projectId={UNKNOWN_PROJECT}",
                                 None)),
    "add a case": Route("POST", f"/v1/agents/{AGENT}/test-set/cases",
                        {"runId": "run-1", "answer": "right"},
                        missing=(f"/v1/agents/{AGENT}/test-set/cases",
                                 {"runId": "run-nope", "answer": "right"})),
    "add a case, two projects": Route(
        "POST", f"/v1/agents/{MULTI}/test-set/cases", {"runId": "run-multi", "answer": "right"},
        missing=("/v1/agents/acme.nope/test-set/cases", {"runId": "run-multi", "answer": "right"})),
    "read a case": Route("GET", f"/v1/agents/{AGENT}/test-set/cases/case-2",
                         missing=(f"/v1/agents/{AGENT}/test-set/cases/case-nope", None)),
    "retire": Route("POST", f"/v1/agents/{AGENT}/test-set/cases/case-2/retire", {"reason": "x"},
                    missing=(f"/v1/agents/{AGENT}/test-set/cases/case-nope/retire",
                             {"reason": "x"})),
    "retire, two projects": Route(
        "POST", f"/v1/agents/{MULTI}/test-set/cases/cor-3/retire", {"reason": "x"},
        missing=("/v1/agents/acme.nope/test-set/cases/cor-3/retire", {"reason": "x"})),
    "restore": Route("POST", f"/v1/agents/{AGENT}/test-set/cases/case-1/restore", {},
                     missing=(f"/v1/agents/{AGENT}/test-set/cases/case-nope/restore", {})),
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
# columns: another tenant, read only, publish only, write, admin, service token
TABLE = {
    "counts": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "list cases": ("404 project-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "add a case": ("404 run-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "201", "201"),
    "add a case, two projects": ("404 agent-not-found", f"403 {M} {W2}", f"403 {R2} {W2}",
                                 f"403 {M} {R2} {W2}", "201", f"403 {M} {R2} {W2}"),
    "read a case": ("404 case-not-found", "200", f"403 {R1}", "200", "200", "200"),
    "retire": ("404 case-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
    "retire, two projects": ("404 agent-not-found", f"403 {M} {W2}", f"403 {R2} {W2}",
                             f"403 {M} {R2} {W2}", "200", f"403 {M} {R2} {W2}"),
    "restore": ("404 case-not-found", f"403 {D}", f"403 {R1}", f"403 {D}", "200", "200"),
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


def call(client, route: Route, authorization: str | None, *, missing: bool = False):
    path, body = route.missing if missing else (route.path, route.body)
    headers = {"Authorization": authorization} if authorization else {}
    return client.open(path, method=route.method, json=body, headers=headers)


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
    }
    tabled = set()
    for route in V1.values():
        path = route.path.split("?")[0] + "/"
        for concrete, template in templates.items():
            path = path.replace(concrete, template)
        tabled.add((route.method, path.rstrip("/")))
    assert tabled == served


@pytest.mark.parametrize("caller", CALLERS)
def test_every_v1_route_answers_each_caller_exactly_as_design_section_2_says(app, api, caller):
    spare = api.post("/v1/tokens", json={"name": "spare"})  # for "revoke a token"
    assert spare.status_code == 201
    sql_rename_token(app, spare.get_json()["id"], ADMINS_OTHER_TOKEN)
    client, wrong = app.test_client(), []
    for name, route in V1.items():
        want = expected(name, caller)
        before = snapshot_db(app)
        resp = call(client, route, CALLERS[caller])
        problem = answered_as(resp, want)
        if problem:
            wrong.append(f"{route.method} {route.path} as {caller}: wanted {want}, got {problem}")
            continue
        if resp.status_code >= 400:
            after = snapshot_db(app)
            if after != before:
                wrong.append(f"{route.method} {route.path} as {caller}: refused but changed")
        if resp.status_code == 404 and route.missing:  # theirs looks like nothing at all
            nothing = call(client, route, CALLERS[caller], missing=True)
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


def test_unauthenticated_answers_are_one_and_the_same_body_on_every_route(app):
    client = app.test_client()
    for name, route in V1.items():
        if name == "the OpenAPI document":
            continue
        bodies = {
            str(without_request_id(call(client, route, CALLERS[caller])))
            for caller in ("no token", "malformed", "expired", "revoked")
        }
        assert len(bodies) == 1, (name, bodies)


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
    "retire": Page("POST", f"/agents/{MULTI}/test-set/cases/cor-3/retire", {"reason": "stale"}),
    "restore": Page("POST", f"/agents/{MULTI}/test-set/cases/cor-3/restore"),
    "new case form": Page("GET", f"/agents/{MULTI}/test-set/cases/new?projectId={P2}"),
    "add a case": Page("POST", f"/agents/{MULTI}/test-set/cases/new?projectId={P2}",
                       {"runId": "run-multi", "answer": "right"}),
    "tokens": Page("GET", "/tokens"),
    "make a token": Page("POST", "/tokens", {"name": "from the page"}),
    "revoke a token": Page("POST", "/tokens/tok-expert/revoke"),
    "API reference": Page("GET", "/docs"),
    "sign-in page": Page("GET", "/login"),
    "sign-out page": Page("GET", "/logout"),
    "a stylesheet": Page("GET", "/static/style.css"),
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
    "new case form": ("login", "404", "403", "200"),
    "add a case": ("login", "404", "403", "303"),
    "tokens": ("login", "200", "200", "200"),
    "make a token": ("login", "201", "201", "201"),
    "revoke a token": ("login", "404", "404", "303"),
    "API reference": ("200", "200", "200", "200"),
    "sign-in page": ("200", "200", "200", "200"),
    "sign-out page": ("200", "200", "200", "200"),
    "a stylesheet": ("200", "200", "200", "200"),
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
def test_every_page_answers_each_visitor_exactly_as_design_section_2_says(app, who):
    client, wrong = app.test_client(), []
    if LOGINS[who]:
        sign_in(client, *LOGINS[who])
    token = csrf_of(client)
    for name, page in PAGES.items():
        want = PAGE_TABLE[name][list(LOGINS).index(who)]
        before = snapshot_db(app)
        if page.method == "POST":
            resp = client.post(page.path, data={**page.form, "csrf_token": token})
        else:
            resp = client.get(page.path)
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
        return re.sub(r'"X-CSRFToken": "[^"]+"', "", text)

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
