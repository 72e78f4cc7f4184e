"""The error envelope on every /v1 error (docs/design.md §3): one JSON shape, the request id in the
body and the `X-Request-Id` header, the right status, headers and code, and nothing changed."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
import requests
from conftest import AGENT, MULTI, P1, P2, PG, error_of, snapshot_db
from databases import write_lock
from live import ROOT, gunicorn_master

from kindgi import create_app, csrf, service, world
from kindgi.database import db

CASES = f"/v1/agents/{AGENT}/test-set/cases"
BODY = {"runId": "run-1", "answer": "right"}
NO_SUCH_PROJECT = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def make_app(app):
    """Another app on the test's (already loaded) database, with some settings changed."""
    made = []

    def make(**config):
        base = {"TESTING": True, "SECRET_KEY": "test-secret"}
        base["SQLALCHEMY_DATABASE_URI"] = app.config["SQLALCHEMY_DATABASE_URI"]
        made.append(create_app({**base, **config}))
        return made[-1]

    yield make
    for other in made:
        with other.app_context():
            db.engine.dispose()


def without_request_id(resp) -> dict:
    body = resp.get_json()
    body["error"].pop("requestId")
    return body


def padded(size: int) -> bytes:
    """A valid body for adding a case, padded with spaces to `size` bytes."""
    raw = json.dumps(BODY).encode()
    return raw + b" " * (size - len(raw))


def admin() -> dict[str, str]:
    return {"Authorization": "Bearer kgi_admin"}


# ---------------------------------------------------------------- routing


@pytest.mark.parametrize("path", ["/v1/nope", f"/v1/agents/{AGENT}/nope", "/v1"])
def test_an_unknown_v1_url_is_a_json_404_not_found(api, path):
    resp = api.get(path)
    assert resp.status_code == 404
    assert resp.mimetype == "application/json"
    assert error_of(resp)["code"] == "not-found"


def test_an_unknown_page_outside_v1_is_an_html_404(api):
    resp = api.get("/nope")
    assert (resp.status_code, resp.mimetype) == (404, "text/html")
    assert resp.headers["X-Request-Id"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", f"/v1/agents/{AGENT}/test-set", {"GET", "HEAD", "OPTIONS"}),
        ("PUT", "/v1/tokens", {"GET", "HEAD", "OPTIONS", "POST"}),
        ("GET", f"/v1/agents/{AGENT}/runs/run-1/corrections", {"OPTIONS", "POST"}),
    ],
)
def test_a_wrong_method_is_405_method_not_allowed_with_allow(api, unchanged, method, path, allowed):
    with unchanged():
        resp = api.call(method, path, json={})
    assert resp.status_code == 405
    assert error_of(resp)["code"] == "method-not-allowed"
    assert {m.strip() for m in resp.headers["Allow"].split(",")} == allowed


# ---------------------------------------------------------------- 401


BAD_AUTHORIZATION = [
    None,  # no header at all
    "Token kgi_admin",  # another scheme
    "Bearer",  # no token
    "Bearer admin",  # not one of ours
    "Bearer kgi_" + "a" * 300,  # too long
    "Bearer kgi_unknown",
    "Bearer kgi_expired",
    "Bearer kgi_revoked",
]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", f"/v1/agents/{AGENT}/test-set?projectId={P1}", None), ("POST", CASES, BODY)],
)
def test_every_kind_of_bad_token_gets_the_same_401(api, unchanged, method, path, body):
    bodies = []
    with unchanged():
        for authorization in BAD_AUTHORIZATION:
            headers = {"Idempotency-Key": "k-401"} if method == "POST" else {}
            if authorization is not None:
                headers["Authorization"] = authorization
            resp = api.call(method, path, as_=None, json=body, headers=headers)
            assert resp.status_code == 401, authorization
            assert resp.headers["WWW-Authenticate"] == "Bearer"
            assert error_of(resp)["code"] == "unauthenticated"
            bodies.append(without_request_id(resp))
    assert all(b == bodies[0] for b in bodies), bodies


# ---------------------------------------------------------------- request ids


def test_every_answer_carries_its_own_request_id(api):
    token = api.post("/v1/tokens", json={"name": "t"})
    answers = [
        api.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}"),  # 200
        api.get("/v1/openapi.json", as_=None),  # 200, public
        token,  # 201
        api.delete(f"/v1/tokens/{token.get_json()['id']}"),  # 204
        api.get("/v1/nope"),  # 404
        api.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}", as_=None),  # 401
        api.call("PUT", "/v1/tokens"),  # 405
        api.get(f"/v1/agents/{AGENT}/test-set"),  # 400
    ]
    assert [a.status_code for a in answers] == [200, 200, 201, 204, 404, 401, 405, 400]
    ids = [a.headers["X-Request-Id"] for a in answers]
    assert all(re.fullmatch(r"[0-9A-Za-z-]{8,}", i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    for resp in answers[4:]:
        error_of(resp)  # the body's requestId is the header's


# ---------------------------------------------------------------- bodies


@pytest.mark.parametrize("transfer", ["content-length", "chunked"])
def test_a_body_over_the_limit_is_413_with_max_bytes_and_changes_nothing(app, make_app, transfer):
    small = make_app(MAX_CONTENT_LENGTH=1000)
    headers = {**admin(), "Content-Type": "application/json"}
    before = snapshot_db(app)
    if transfer == "chunked":  # as gunicorn passes it: no length, the server ends the stream
        resp = small.test_client().post(
            CASES,
            input_stream=io.BytesIO(padded(3000)),
            headers={**headers, "Transfer-Encoding": "chunked"},
            environ_overrides={"wsgi.input_terminated": True},
        )
    else:
        resp = small.test_client().post(CASES, data=padded(3000), headers=headers)
    assert resp.status_code == 413, resp.get_json()
    err = error_of(resp)
    assert err["code"] == "request-too-large"
    assert err["details"]["maxBytes"] == 1000
    assert snapshot_db(app) == before


def test_the_default_limit_is_one_mebibyte(api, unchanged):
    with unchanged():
        resp = api.post(CASES, data=padded(1024 * 1024 + 1), content_type="application/json")
    assert resp.status_code == 413
    assert error_of(resp)["details"]["maxBytes"] == 1024 * 1024
    at_limit = api.post(CASES, data=padded(1024 * 1024), content_type="application/json")
    assert at_limit.status_code == 201, at_limit.get_json()


@pytest.mark.parametrize("mimetype", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_is_415(api, unchanged, mimetype):
    with unchanged():
        resp = api.post(CASES, data=json.dumps(BODY), content_type=mimetype)
    assert resp.status_code == 415
    assert error_of(resp)["code"] == "unsupported-media-type"


# ---------------------------------------------------------------- query strings


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (f"/v1/agents/{AGENT}/test-set", "projectId"),
        (f"/v1/agents/{AGENT}/test-set?projectId=nope", "projectId"),
        (f"{CASES}?limit=10", "projectId"),
        (f"{CASES}?projectId={P1[:-1]}", "projectId"),
        (f"{CASES}?projectId={P1}&limit=0", "limit"),
        (f"{CASES}?projectId={P1}&limit=101", "limit"),
        (f"{CASES}?projectId={P1}&limit=abc", "limit"),
        (f"{CASES}?projectId={P1}&limit=2.5", "limit"),
        (f"{CASES}?projectId={P1}&include=other", "include"),
        (f"{CASES}?projectId={P1}&kind=foo", "kind"),
        (f"/v1/agents/{AGENT}/runs?projectId={P1}&limit=-1", "limit"),
        (f"/v1/agents/{AGENT}/runs?projectId={P1}&status=done", "status"),
    ],
)
def test_a_bad_query_string_is_400_bad_input_naming_the_field(api, path, field):
    resp = api.get(path)
    assert resp.status_code == 400, resp.get_json()
    err = error_of(resp)
    assert err["code"] == "bad-input"
    assert list(err["details"]["fields"]) == [field]
    assert all(isinstance(m, str) for m in err["details"]["fields"][field])


@pytest.mark.parametrize("spelled", [P1.upper(), P1[:8].upper() + P1[8:]])
def test_a_project_id_in_any_case_is_accepted_and_answered_lower_case(api, spelled):
    counts = api.get(f"/v1/agents/{AGENT}/test-set?projectId={spelled}")
    assert counts.status_code == 200, counts.get_json()
    assert counts.get_json()["projectId"] == P1
    cases = api.get(f"{CASES}?projectId={spelled}").get_json()["data"]
    assert cases and {c["projectId"] for c in cases} == {P1}


# ---------------------------------------------------------------- tenancy


@pytest.mark.parametrize(
    ("who", "method", "foreign", "missing", "body"),
    [
        ("globex", "GET", f"/v1/agents/{MULTI}/test-set?projectId={P2}",
         f"/v1/agents/acme.nope/test-set?projectId={P2}", None),
        ("admin", "GET", f"/v1/agents/{AGENT}/test-set?projectId={PG}",
         f"/v1/agents/{AGENT}/test-set?projectId={NO_SUCH_PROJECT}", None),
        ("admin", "GET", f"/v1/agents/{AGENT}/runs?projectId={PG}",
         f"/v1/agents/{AGENT}/runs?projectId={NO_SUCH_PROJECT}", None),
        ("admin", "POST", CASES, CASES, "run"),
        ("admin", "POST", f"/v1/agents/{AGENT}/runs/run-globex/corrections",
         f"/v1/agents/{AGENT}/runs/run-nope/corrections", {"answer": "right"}),
        ("admin", "GET", f"{CASES}/cor-g", f"{CASES}/cor-nope", None),
        ("globex", "GET", f"{CASES}/case-2", f"{CASES}/case-nope", None),
        ("globex", "POST", f"{CASES}/case-2/retire", f"{CASES}/case-nope/retire",
         {"reason": "mine now"}),
        ("admin", "PATCH", f"/v1/agents/{AGENT}/corrections/cor-g",
         f"/v1/agents/{AGENT}/corrections/cor-nope", {"status": "fixed"}),
        ("admin", "DELETE", "/v1/tokens/tok-globex", "/v1/tokens/tok-nope", None),
    ],
    ids=["agent", "project", "project-runs", "run-in-body", "run-in-path", "case",
         "case-seen-from-globex", "retire", "correction", "token"],
)  # fmt: skip
def test_another_tenants_things_look_exactly_like_things_that_do_not_exist(
    api, unchanged, who, method, foreign, missing, body
):
    foreign_body = missing_body = body
    if body == "run":  # the run is named in the body, not the path
        foreign_body, missing_body = {**BODY, "runId": "run-globex"}, {**BODY, "runId": "run-nope"}
    with unchanged():
        theirs = api.call(method, foreign, as_=who, json=foreign_body)
        nothing = api.call(method, missing, as_=who, json=missing_body)
    assert theirs.status_code == nothing.status_code == 404, theirs.get_json()
    assert error_of(theirs)["code"] == error_of(nothing)["code"]
    assert without_request_id(theirs) == without_request_id(nothing)
    assert theirs.headers.get("WWW-Authenticate") is None


# ---------------------------------------------------------------- the server's own failures


def test_a_crash_is_a_500_internal_without_a_stack_trace_and_changes_nothing(app, make_app):
    crashing = make_app()

    def boom():
        caller = service.authenticate("Bearer kgi_admin")
        service.create_token(caller, "half-made", None)  # a change that must not survive
        raise RuntimeError("kaboom in /srv/kindgi/secret_module.py line 42")

    # A writing request (reads never write: on PostgreSQL they are not even in a transaction)
    crashing.add_url_rule("/v1/boom", "boom", csrf.exempt(boom), methods=["POST"])
    before = snapshot_db(app)
    resp = crashing.test_client().post("/v1/boom", headers=admin())
    assert resp.status_code == 500
    assert resp.mimetype == "application/json"
    assert error_of(resp)["code"] == "internal"
    text = resp.get_data(as_text=True)
    for leak in ("Traceback", "RuntimeError", "kaboom", "secret_module", 'File "'):
        assert leak not in text
    assert snapshot_db(app) == before


def test_a_locked_database_is_503_busy_and_the_retry_succeeds(app, make_app):
    quick = make_app(DB_BUSY_TIMEOUT_MS=200).test_client()
    headers = {**admin(), "Idempotency-Key": "k-busy"}
    before = snapshot_db(app)
    with write_lock(app.config["SQLALCHEMY_DATABASE_URI"]):  # another writer holds the lock
        started = time.monotonic()
        resp = quick.post(CASES, json=BODY, headers=headers)
        assert time.monotonic() - started < 3  # waited about DB_BUSY_TIMEOUT_MS, not forever
        assert resp.status_code == 503, resp.get_json()
        assert error_of(resp)["code"] == "database-busy"
        assert resp.headers["Retry-After"].isdigit()
    assert snapshot_db(app) == before
    retry = quick.post(CASES, json=BODY, headers=headers)
    assert retry.status_code == 201, retry.get_json()
    assert "Idempotent-Replayed" not in retry.headers  # a 503 is not kept


# ---------------------------------------------------------------- what gunicorn answers itself

# The cases list at its longest (docs/errors.md, past the request line): an agent whose dotted id
# fills its 200 characters, and every filter at its most, in the longest bytes a character takes
# percent-encoded (four UTF-8 bytes, 12 in the URL): q and tool of 200 characters, addedBy and
# runId of 64 (the longest id a user or run has); the cursor after a case whose 64-character id
# is all characters JSON escapes in six bytes.
LONG_AGENT = "a" * 99 + "." + "b" * 100
LONG_PROJECT = "7e57ab1e-0000-4000-8000-00000000f00d"
LONG_USER, LONG_RUN, LONG_TOOL = "🦜" * 64, "🦝" * 64, "🦜" * 200
LONG_QUERY = "gnu" + "🦜" * 197  # one word, found in the cases; parrots are no words
LONG_WORLD = {
    "projects": [{"id": LONG_PROJECT, "tenant": "acme"}],
    "agents": [{"id": LONG_AGENT, "tenant": "acme", "projects": [LONG_PROJECT]}],
    "users": [{"id": LONG_USER, "tenant": "acme", "email": "long@acme.test", "name": "Long"}],
    "runs": [{"id": LONG_RUN, "agent": LONG_AGENT, "project": LONG_PROJECT, "version": "1",
              "output": {"answer": "a gnu"}, "at": "2026-11-30T10:00:00.123Z"}],
    "corrections": [
        {"id": chr(n) * 64, "run": LONG_RUN, "by": LONG_USER, "at": f"2026-11-30T10:0{n}:00.123Z",
         "body": {"decisions": "wrong", "shouldCall": [{"tool": LONG_TOOL}], "answer": "wrong",
                  "shouldSay": "Name the gnu."}}
        for n in (1, 2)
    ],
}  # fmt: skip
REQUEST_LINE, HEADER_LINE = 8190, 8702  # bytes gunicorn reads, as kindgi/gunicorn_conf.py says
GUNICORN_WAYS = {  # as README.md and docs/deploy.md start it
    "from a checkout": {"app": "app:app"},
    "installed": {"app": "kindgi:create_app()", "config": "python:kindgi.gunicorn_conf"},
}


@pytest.mark.parametrize("way", GUNICORN_WAYS)
def test_the_longest_url_the_app_makes_fits_gunicorns_request_line(app, tmp_path, way):
    with app.app_context():
        world.load(LONG_WORLD)
        db.session.commit()
    where = ROOT if way == "from a checkout" else tmp_path  # no gunicorn.conf.py there
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    with gunicorn_master(url, tmp_path / "g.log", 1, cwd=where, **GUNICORN_WAYS[way]) as (_, base):
        http = requests.Session()
        http.headers["Authorization"] = "Bearer kgi_admin"
        path = f"/v1/agents/{LONG_AGENT}/test-set/cases"
        listed = http.get(base + path, params={"projectId": LONG_PROJECT}, timeout=30).json()
        filters = {
            "projectId": LONG_PROJECT, "limit": 1, "include": "retired",
            "kind": "correction,hand", "q": LONG_QUERY, "tool": LONG_TOOL,
            "part": "answer,decisions,items", "expert": "false", "addedBy": LONG_USER,
            "runId": LONG_RUN, "addedAfter": listed["data"][-1]["addedAt"],
            "addedBefore": "2099-12-31T23:59:59.999Z",
        }  # fmt: skip
        first = http.get(base + path, params=filters, timeout=30)
        assert first.status_code == 200, first.text[:300]
        assert [c["id"] for c in first.json()["data"]] == [chr(2) * 64]
        deepest = {**filters, "limit": 100, "cursor": first.json()["nextCursor"]}
        asked = requests.Request("GET", base + path, params=deepest).prepare()
        line = len(f"GET {asked.path_url} HTTP/1.1")
        assert 7000 < line <= REQUEST_LINE
        # a page's URL comes back in headers, with its scheme and host (at their longest)
        origin = "https://" + "h" * 253 + ":65535"
        as_page = {"Referer": origin + asked.path_url, "HX-Current-URL": origin + asked.path_url}
        assert len("HX-Current-URL: " + as_page["HX-Current-URL"]) <= HEADER_LINE
        deep = http.get(base + path, params=deepest, headers=as_page, timeout=30)
        assert deep.status_code == 200 and deep.headers["Content-Type"] == "application/json"
        assert [c["id"] for c in deep.json()["data"]] == [chr(1) * 64]

        # past the limit gunicorn answers itself; at the limit the app does
        def padded_to(size: int) -> requests.Response:
            pad = size - line - len("&pad=")
            return http.get(f"{base}{asked.path_url}&pad={'x' * pad}", timeout=30)

        at_limit = padded_to(REQUEST_LINE)
        assert at_limit.status_code == 200 and at_limit.json()["data"] == deep.json()["data"]
        past = padded_to(REQUEST_LINE + 1)
        assert past.status_code == 414 and "X-Request-Id" not in past.headers
        assert past.headers["Content-Type"].startswith("text/html")
        header = requests.get(f"{base}/healthz", headers={"X-Long": "x" * HEADER_LINE}, timeout=30)
        assert header.status_code == 431 and "X-Request-Id" not in header.headers
