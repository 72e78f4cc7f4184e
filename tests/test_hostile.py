"""Hostile input and faults: what the other test files leave out.

- Cursors with NUL bytes and other junk are 400 `cursor-invalid`, never 500; paging through a
  thousand cases while a hundred more are added sees each once and misses none.
- Text no database can store (NUL characters, unpaired UTF-16 surrogates) is refused, never 500,
  wherever it is sent: JSON bodies, forms, paths, query strings.
- Every bound not tested elsewhere, at its edge, counted in code points (an emoji is one).
- Bodies over the limit through a real server, with Content-Length and chunked.
- A write lock held past the busy timeout on every write route: 503 `database-busy`, nothing
  changed, and the retry succeeds; the database connection dying in the middle of a request or
  at its commit: a 500 or 503 envelope, no partial write, the key free and the next request fine.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import pytest
import requests
from conftest import (
    AGENT,
    MULTI,
    P1,
    TOKENS,
    csrf_of,
    error_of,
    make_app,
    sign_in,
    snapshot_db,
)
from databases import ENGINE, write_lock
from live import gunicorn
from sqlalchemy import event

from kindgi import world
from kindgi.database import db

PARROT = "🦜"  # one code point, two UTF-16 units, four UTF-8 bytes
CASES = f"/v1/agents/{AGENT}/test-set/cases"
ADMIN = {"Authorization": f"Bearer {TOKENS['admin']}"}


def cases_url(**params: Any) -> str:
    return f"{CASES}?{urlencode({'projectId': P1, **params})}"


def first_cursor(api, url: str) -> str:
    page = api.get(url)
    assert page.status_code == 200, page.get_json()
    return page.get_json()["nextCursor"]


@pytest.fixture
def other_app(app):
    """Another app on the test's database with some settings changed (disposed afterwards)."""
    made = []

    def make(**config):
        made.append(make_app(app.config["SQLALCHEMY_DATABASE_URI"], **config))
        return made[-1]

    yield make
    for other in made:
        with other.app_context():
            db.engine.dispose()


# ---------------------------------------------------------------- cursors


SPOILERS = {
    "a NUL byte in the middle": lambda c: c[:20] + "\x00" + c[20:],
    "a NUL byte first": lambda c: "\x00" + c,
    "only NUL bytes": lambda c: "\x00" * 64,
    "NUL bytes instead of its tail": lambda c: c[:-8] + "\x00" * 8,
    "percent-encoded NUL text": lambda c: c[:10] + "%00" + c[10:],
    "whitespace around it": lambda c: f"  {c}\n",
    "a space inside": lambda c: c[:30] + " " + c[30:],
    "an emoji inside": lambda c: c[:30] + PARROT + c[30:],
    "an unpaired surrogate": lambda c: c[:30] + "\udc80" + c[30:],
    "one character": lambda c: "A",
    "100 KB of padding": lambda c: c + "=" * 100_000,
    "base64 of nothing": lambda c: "AAAA",
    "JSON": lambda c: '{"b": {}, "p": ["2026-04-16T10:00:00", "case-2"]}',
}


@pytest.mark.parametrize("spoil", SPOILERS)
@pytest.mark.parametrize("listing", ["cases", "runs"])
def test_a_cursor_with_nul_bytes_or_other_junk_is_invalid_never_a_crash(api, unchanged, spoil,
                                                                        listing):  # fmt: skip
    path = CASES if listing == "cases" else f"/v1/agents/{AGENT}/runs"
    cursor = first_cursor(api, f"{path}?projectId={P1}&limit=1")
    spoilt = quote(SPOILERS[spoil](cursor), safe="", errors="surrogatepass")
    with unchanged():
        resp = api.get(f"{path}?projectId={P1}&limit=1&cursor={spoilt}")
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert (err["code"], err["details"]["reason"]) == ("bad-input", "cursor-invalid")


def test_a_cursor_sent_twice_is_refused_or_used_never_a_crash(api):
    cursor = first_cursor(api, cases_url(limit=1))
    resp = api.get(f"{cases_url(limit=1)}&cursor={quote(cursor)}&cursor=%00")
    assert resp.status_code in (200, 400), resp.get_data(as_text=True)[:300]


@pytest.fixture
def thousand(app):
    """1,000 more hand cases in P1, one a minute, their ids shuffled against their times."""
    base, cases = datetime(2026, 1, 1, 0, 0, 0), []
    for i in range(1000):
        at = (base + timedelta(minutes=i)).isoformat() + "Z"
        cases.append({"id": f"case-k{(i * 389) % 1000:04d}", "run": "run-2", "by": "u-publisher",
                      "at": at, "body": {"answer": "right"}})  # fmt: skip
    with app.app_context():
        world.load({"cases": cases})
        db.session.commit()
        db.session.remove()
    return app


def test_paging_a_thousand_cases_while_a_hundred_are_added_sees_each_once_and_misses_none(
    thousand, api
):
    existing = []
    cursor = None
    while True:  # what exists before the writer starts
        page = api.get(cases_url(limit=100, **({"cursor": cursor} if cursor else {}))).get_json()
        existing += [c["id"] for c in page["data"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert len(existing) == 1002  # and case-2, cor-1 of the world

    added, started, errors = [], threading.Event(), []

    def writer():
        client = thousand.test_client()
        started.set()
        for i in range(100):
            body = {"runId": "run-1" if i % 2 else "run-2", "answer": "right"}
            resp = client.post(CASES, json=body, headers=ADMIN)
            if resp.status_code != 201:
                errors.append(resp.get_data(as_text=True))
                return
            added.append(resp.get_json()["id"])

    seen, cursor, pages = [], None, 0
    thread = threading.Thread(target=writer)
    thread.start()
    started.wait(10)
    while True:
        page = api.get(cases_url(limit=10, **({"cursor": cursor} if cursor else {})))
        assert page.status_code == 200, page.get_json()
        body = page.get_json()
        seen += [c["id"] for c in body["data"]]
        pages += 1
        cursor = body.get("nextCursor")
        if not cursor:
            break
        time.sleep(0.002)  # let the writer in between pages
    thread.join(60)
    assert errors == [] and len(added) == 100
    assert len(seen) == len(set(seen)), "a case was seen twice"
    assert set(existing) <= set(seen), f"missed {sorted(set(existing) - set(seen))[:10]}"
    assert set(seen) - set(existing) <= set(added)
    assert pages > 100  # the writer really ran while the list was being read


# ---------------------------------------------------------------- text no database can store


NUL, SURROGATE = "\x00", "\ud800"
RAW_BODIES = {
    # (method, path, JSON text with \u escapes, the field it names)
    "a token name with NUL": ("POST", "/v1/tokens", '{"name": "a\\u0000b"}', "name"),
    "a token name with a lone surrogate": ("POST", "/v1/tokens", '{"name": "\\ud800"}', "name"),
    "a retire reason with NUL": ("POST", f"{CASES}/case-2/retire", '{"reason": "a\\u0000"}',
                                 "reason"),
    "a retire reason with a lone surrogate": ("POST", f"{CASES}/case-2/retire",
                                              '{"reason": "x\\udfff"}', "reason"),
    "a run id with NUL": ("POST", CASES, '{"runId": "run-1\\u0000", "answer": "right"}', "runId"),
    "why with a lone surrogate": ("POST", CASES,
                                  '{"runId": "run-1", "answer": "wrong", "why": "\\ud800"}', "why"),
    "a tool name with NUL": ("POST", CASES, '{"runId": "run-1", "decisions": "wrong", '
                             '"mustNotCall": ["send\\u0000mail"]}', "mustNotCall.0"),
    "a run's version with NUL": ("POST", f"/v1/agents/{AGENT}/runs",
                                 f'{{"projectId": "{P1}", "version": "1\\u0000", '
                                 '"status": "finished"}', "version"),
    "a correction's group with NUL": ("POST", f"/v1/agents/{MULTI}/runs/run-multi/corrections",
                                      '{"answer": "right", "group": "grp\\u0000"}', "group"),
}  # fmt: skip


@pytest.mark.parametrize("name", RAW_BODIES)
def test_text_no_database_can_store_in_a_json_body_is_bad_input_never_a_crash(api, unchanged, name):
    method, path, raw, field = RAW_BODIES[name]
    with unchanged():
        resp = api.call(method, path, data=raw, content_type="application/json")
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input" and field in err["details"]["fields"], err


ODD_URLS = {
    "an agent id with NUL": f"/v1/agents/acme.dra%00fting/test-set?projectId={P1}",
    "a case id with NUL": f"{CASES}/case-2%00",
    "a run id with NUL": f"/v1/agents/{AGENT}/runs/run-1%00/corrections",
    "a correction id with NUL": f"/v1/agents/{AGENT}/corrections/cor-1%00",
    "a token id with NUL": "/v1/tokens/tok-admin%00",
    "an agent id with an encoded surrogate": f"/v1/agents/acme%ED%A0%80/test-set?projectId={P1}",
    "a kind with NUL": f"{CASES}?projectId={P1}&kind=hand%00",
    "a project id with NUL": f"{CASES}?projectId={P1[:-1]}%00",
}
METHODS = {"a run id with NUL": "POST", "a correction id with NUL": "PATCH",
           "a token id with NUL": "DELETE"}  # fmt: skip


@pytest.mark.parametrize("name", ODD_URLS)
def test_text_no_database_can_store_in_a_url_is_a_4xx_envelope_never_a_crash(api, unchanged, name):
    method = METHODS.get(name, "GET")
    body = {"answer": "right"} if method == "POST" else {"status": "fixed"}
    with unchanged():
        resp = api.call(method, ODD_URLS[name], json=None if method in ("GET", "DELETE") else body)
    assert resp.status_code in (400, 404), resp.get_data(as_text=True)[:300]
    error_of(resp)


PAGE_POSTS = {
    "a sign-in email with NUL": ("/login", {"email": "reader@acme.test\x00", "password": "x"}),
    "a retire reason with NUL": (f"/agents/{AGENT}/test-set/cases/case-2/retire",
                                 {"reason": "stale\x00"}),
    "a token name with NUL": ("/tokens", {"name": "laptop\x00"}),
    "a case's why with NUL": (f"/agents/{AGENT}/test-set/cases/new?projectId={P1}",
                              {"runId": "run-1", "answer": "wrong", "why": "no\x00"}),
}  # fmt: skip


@pytest.mark.parametrize("name", PAGE_POSTS)
def test_text_no_database_can_store_in_a_form_is_refused_on_the_page_never_a_crash(app, name):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    path, form = PAGE_POSTS[name]
    before = snapshot_db(app)
    resp = client.post(path, data={**form, "csrf_token": csrf_of(client)})
    assert resp.status_code in (400, 401), resp.text[:300]
    assert resp.mimetype == "text/html"
    after = snapshot_db(app)
    after.pop("login_failures"), before.pop("login_failures")  # a failed sign-in is counted
    assert after == before


def test_a_search_with_nul_on_the_new_case_page_is_never_a_crash(app):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    resp = client.get(f"/agents/{AGENT}/test-set/cases/new?projectId={P1}&search=run%00")
    assert resp.status_code in (200, 400), resp.text[:300]


# ---------------------------------------------------------------- every other bound, at its edge


def run_body(**more: Any) -> dict[str, Any]:
    return {"projectId": P1, "version": "1.1.0", "status": "finished", **more}


def calls(n: int, tool: str = "t") -> list[dict[str, Any]]:
    return [{"tool": tool, "args": {}} for _ in range(n)]


BOUNDS = {
    # (method, path, at the limit, one past it, field); at the limit passes validation
    "a retire reason has 1000 code points": (
        "POST", f"{CASES}/case-2/retire", {"reason": PARROT * 1000}, {"reason": PARROT * 1001},
        "reason"),
    "a token name has 200 code points": (
        "POST", "/v1/tokens", {"name": PARROT * 200}, {"name": PARROT * 201}, "name"),
    "a run's version has 100 code points": (
        "POST", f"/v1/agents/{AGENT}/runs", run_body(version=PARROT * 100),
        run_body(version=PARROT * 101), "version"),
    "a run has 1000 calls": (
        "POST", f"/v1/agents/{AGENT}/runs", run_body(calls=calls(1000)),
        run_body(calls=calls(1001)), "calls"),
    "a run's tool name has 200 code points": (
        "POST", f"/v1/agents/{AGENT}/runs", run_body(calls=calls(1, PARROT * 200)),
        run_body(calls=calls(1, PARROT * 201)), "calls.0.tool"),
    "a run id has 200 code points": (
        "POST", CASES, {"runId": PARROT * 200, "answer": "right"},
        {"runId": PARROT * 201, "answer": "right"}, "runId"),
    "a replayed run's id has 64 code points": (
        "POST", f"/v1/agents/{AGENT}/runs", run_body(replayOf=PARROT * 64),
        run_body(replayOf=PARROT * 65), "replayOf"),
    "a correction's group has 64 code points": (
        "POST", f"/v1/agents/{MULTI}/runs/run-multi/corrections",
        {"answer": "right", "group": PARROT * 64}, {"answer": "right", "group": PARROT * 65},
        "group"),
}  # fmt: skip


@pytest.mark.parametrize("bound", BOUNDS)
def test_every_other_bound_holds_at_its_edge_in_code_points(api, unchanged, bound):
    method, path, at, past, field = BOUNDS[bound]
    with unchanged():
        refused = api.call(method, path, json=past)
    assert refused.status_code == 400, refused.get_json()
    err = error_of(refused)
    assert err["code"] == "bad-input" and field in err["details"]["fields"], err
    answered = api.call(method, path, json=at)
    if answered.status_code == 400:  # refused for something else than its length
        said = error_of(answered)["details"]["fields"].get(field)
        assert said != err["details"]["fields"][field], answered.get_json()
    else:
        assert answered.status_code in (200, 201, 404), answered.get_json()


# ---------------------------------------------------------------- bodies over the limit, live


@pytest.fixture
def small_server(app, tmp_path) -> Iterator[str]:
    """gunicorn (2 workers) on the test's database, taking bodies of at most 1000 bytes."""
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    with gunicorn(url, tmp_path / "gunicorn.log", workers=2,
                  KINDGI_MAX_CONTENT_LENGTH="1000") as base:  # fmt: skip
        yield base


def padded(size: int) -> bytes:
    raw = json.dumps({"runId": "run-1", "answer": "right"}).encode()
    return raw + b" " * (size - len(raw))


@pytest.mark.parametrize("transfer", ["content-length", "chunked"])
def test_a_body_over_the_limit_through_gunicorn_is_413_with_max_bytes_and_changes_nothing(
    app, small_server, transfer
):
    headers = {**ADMIN, "Content-Type": "application/json"}

    def send(size: int):
        raw = padded(size)
        data: Any = raw
        if transfer == "chunked":  # a generator: requests sends it chunked, with no length
            data = (raw[i : i + 300] for i in range(0, len(raw), 300))
        return requests.post(small_server + CASES, data=data, headers=headers, timeout=30)

    before = snapshot_db(app)
    for size in (1001, 5000, 300_000):
        resp = send(size)
        assert resp.status_code == 413, (size, resp.text[:300])
        err = resp.json()["error"]
        assert err["code"] == "request-too-large" and err["details"] == {"maxBytes": 1000}
        assert err["requestId"] == resp.headers["X-Request-Id"]
    assert snapshot_db(app) == before
    assert send(1000).status_code == 201  # at the limit


# ---------------------------------------------------------------- a busy database


WRITES = {
    # (method, path, body): every write route, and a page's
    "add a case": ("POST", CASES, {"runId": "run-1", "answer": "right"}),
    "retire": ("POST", f"{CASES}/case-2/retire", {"reason": "stale"}),
    "restore": ("POST", f"{CASES}/case-1/restore", {}),
    "record a run": ("POST", f"/v1/agents/{AGENT}/runs", run_body()),
    "record a correction": ("POST", f"/v1/agents/{AGENT}/runs/run-1/corrections",
                            {"answer": "right"}),
    "change a correction": ("PATCH", f"/v1/agents/{AGENT}/corrections/cor-1",
                            {"status": "fixed"}),
    "make a token": ("POST", "/v1/tokens", {"name": "t"}),
    "revoke a token": ("DELETE", "/v1/tokens/tok-expired", None),
}  # fmt: skip


@pytest.mark.parametrize("write", WRITES)
def test_a_write_lock_held_past_the_busy_timeout_is_503_busy_then_the_retry_succeeds(
    app, other_app, write
):
    client = other_app(DB_BUSY_TIMEOUT_MS=300).test_client()
    method, path, body = WRITES[write]
    headers = {**ADMIN, "Idempotency-Key": f"k-busy-{write}"}
    before = snapshot_db(app)
    with write_lock(app.config["SQLALCHEMY_DATABASE_URI"]):
        started = time.monotonic()
        resp = client.open(path, method=method, json=body, headers=headers)
        waited = time.monotonic() - started
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]
    assert error_of(resp)["code"] == "database-busy"
    assert resp.headers["Retry-After"].isdigit()
    assert 0.25 < waited < 5  # it waited for the lock about as long as configured, not forever
    assert snapshot_db(app) == before  # the key's claim was released too
    retry = client.open(path, method=method, json=body, headers=headers)
    assert retry.status_code in (200, 201, 204), retry.get_data(as_text=True)[:300]
    assert "Idempotent-Replayed" not in retry.headers


def test_a_page_write_under_a_held_lock_is_a_503_page_and_changes_nothing(app, other_app):
    client = other_app(DB_BUSY_TIMEOUT_MS=300).test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    token = csrf_of(client)
    path = f"/agents/{AGENT}/test-set/cases/case-2/retire"
    before = snapshot_db(app)
    with write_lock(app.config["SQLALCHEMY_DATABASE_URI"]):
        resp = client.post(path, data={"reason": "stale", "csrf_token": token})
    assert (resp.status_code, resp.mimetype) == (503, "text/html"), resp.text[:300]
    assert "database-busy" in resp.text and resp.headers["Retry-After"].isdigit()
    assert snapshot_db(app) == before
    assert client.post(path, data={"reason": "stale", "csrf_token": token}).status_code == 303


# ---------------------------------------------------------------- the database going away


def kill(connection) -> None:
    """End a database connection from outside, as a crashed or restarted server would."""
    dbapi = connection.connection.dbapi_connection
    if ENGINE == "sqlite":
        dbapi.close()
        return
    url = connection.engine.url.set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (dbapi.info.backend_pid,))


@contextmanager
def dies_at(app, when: str) -> Iterator[list[str]]:
    """The app's connection dies at the first statement starting with `when`, or for "COMMIT"
    at the request's own commit (not the Idempotency-Key claim's, which commits first), while
    the block runs; yields what it killed."""
    engine, fired, commits = None, [], []
    with app.app_context():
        engine = db.engine

    def on_statement(conn, cursor, statement, *_):
        if not fired and statement.lstrip().upper().startswith(when):
            fired.append(statement.split("\n")[0][:80])
            kill(conn)

    def on_commit(conn):
        commits.append(conn)
        if not fired and when == "COMMIT" and len(commits) == 2:
            fired.append("COMMIT")
            kill(conn)

    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine, "commit", on_commit)
    try:
        yield fired
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
        event.remove(engine, "commit", on_commit)


DEATHS = {
    # (a write, where its connection dies)
    "adding a case, at the case's insert": ("add a case", "INSERT INTO CASES"),
    "adding a case, at the count's update": ("add a case", "INSERT INTO TALLIES"),
    "adding a case, at its commit": ("add a case", "COMMIT"),
    "retiring, at the case's update": ("retire", "UPDATE CASES"),
    "recording a run, at its commit": ("record a run", "COMMIT"),
    "making a token, at its insert": ("make a token", "INSERT INTO TOKENS"),
    "changing a correction, at its row lock": ("change a correction", "SELECT CASES"),
}


@pytest.mark.parametrize("death", DEATHS)
def test_the_database_going_away_mid_request_is_an_envelope_with_no_partial_write(app, death):
    write, when = DEATHS[death]
    method, path, body = WRITES[write]
    client = app.test_client()
    headers = {**ADMIN, "Idempotency-Key": f"k-gone-{write}"}
    before = snapshot_db(app)
    with dies_at(app, when) as fired:
        resp = client.open(path, method=method, json=body, headers=headers)
    assert fired, f"nothing ran {when}"
    assert resp.status_code in (500, 503), resp.get_data(as_text=True)[:300]
    assert resp.mimetype == "application/json"
    err = error_of(resp)
    assert err["code"] in ("internal", "database-busy")
    assert "Traceback" not in resp.get_data(as_text=True)
    assert snapshot_db(app) == before  # no partial write, and the key's claim released
    again = client.open(path, method=method, json=body, headers=headers)
    assert again.status_code in (200, 201), again.get_data(as_text=True)[:300]
    assert "Idempotent-Replayed" not in again.headers
    assert client.get(f"{CASES}?projectId={P1}", headers=ADMIN).status_code == 200


# ---------------------------------------------------------------- writers at once


@pytest.fixture
def toggling(app):
    """Six hand cases in one cell of the counts (same week, kind and expertness), every
    other one retired: the cases that writers retire and restore at once."""
    cases = [
        {"id": f"case-t{i}", "run": "run-2", "by": "u-publisher",
         "at": f"2026-02-03T10:0{i}:00Z", "body": {"answer": "right"},
         **({"retired": {"reason": "x", "by": "u-publisher", "at": "2026-02-04T00:00:00Z"}}
            if i % 2 else {})}
        for i in range(6)
    ]  # fmt: skip
    with app.app_context():
        world.load({"cases": cases})
        db.session.commit()
        db.session.remove()
    return [c["id"] for c in cases]


def test_retiring_and_restoring_at_once_never_deadlocks_and_keeps_the_counts_exact(
    app, api, other_app, toggling
):
    rounds, answers = 10, []
    quick = other_app(DB_BUSY_TIMEOUT_MS=3000)  # a deadlock's refusals come sooner than in 5 s

    def toggle(case_id: str) -> None:
        client = quick.test_client()
        path = f"{CASES}/{case_id}"
        retired = case_id[-1] in "1357"
        for _ in range(rounds):
            if retired:
                resp = client.post(f"{path}/restore", json={}, headers=ADMIN)
            else:
                resp = client.post(f"{path}/retire", json={"reason": "churn"}, headers=ADMIN)
            answers.append((resp.status_code, resp.get_data(as_text=True)[:200]))
            retired = not retired if resp.status_code == 200 else retired

    threads = [threading.Thread(target=toggle, args=(c,)) for c in toggling]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    failed = [a for a in answers if a[0] != 200]
    assert failed == [], f"{len(failed)} of {len(answers)}: {failed[:3]}"
    counts = api.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}").get_json()["cases"]
    listed = api.get(cases_url(include="retired", limit=100)).get_json()["data"]
    assert counts["active"] + counts["retired"] == len(listed)
    assert counts["retired"] == sum(1 for c in listed if "retired" in c)
