"""Hostile input and faults: what the other test files leave out.

- Cursors with NUL bytes and other junk are 400 `cursor-invalid`, never 500; paging through a
  thousand cases while a hundred more are added sees each once and misses none.
- Text no database can store (NUL characters, unpaired UTF-16 surrogates) is refused, never 500,
  wherever it is sent: JSON bodies, forms, paths, query strings.
- Every bound not tested elsewhere, at its edge, counted in code points (an emoji is one).
- Test runs (docs/design.md §9.2): every hostile body of starting a run, sending results,
  finishing and cancelling, and every hostile query string of their lists, is 400 `bad-input`
  naming exactly the fields at fault, and changes nothing; a spoilt cursor on any of their lists
  is `cursor-invalid`, one of another list `cursor-mismatch`; each bound holds at its edge.
- Bodies over the limit through a real server, with Content-Length and chunked.
- A write lock held past the busy timeout on every write route (test runs' too): 503
  `database-busy`, nothing changed, and the retry succeeds; the database connection dying in the
  middle of a request or at its commit: a 500 or 503 envelope, no partial write, the key free and
  the next request fine.

The tests marked `one_world` are refused or only read, and each checks that nothing changed: they
share one world with test runs per file and worker (`one_world_app` in conftest,
`shared_test_runs`), built once, not once a test.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode
from xml.etree import ElementTree

import psycopg
import pytest
import requests
from conftest import (
    AGENT,
    MULTI,
    P1,
    TOKENS,
    WORLD,
    csrf_of,
    error_of,
    make_app,
    sign_in,
    snapshot_db,
)
from databases import ENGINE, write_lock
from live import gunicorn
from sqlalchemy import event
from sqlalchemy.engine import make_url

from kindgi import world
from kindgi.database import db
from kindgi.schemas import cases as case_schemas
from kindgi.schemas import common as common_schemas
from kindgi.schemas import test_runs as run_schemas

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


def test_text_that_only_looks_like_an_escaped_nul_is_taken_as_it_is(api):
    """A backslash before `u0000` is plain text: the quick check behind the refusal above takes
    it for a NUL and leaves it to the full walk, which keeps it."""
    name = "a\\u0000b"  # six characters between a and b: a backslash, then u0000
    resp = api.call("POST", "/v1/tokens", json={"name": name})
    assert resp.status_code == 201, resp.get_data(as_text=True)[:300]
    assert resp.get_json()["name"] == name


ODD_URLS = {
    "an agent id with NUL": f"/v1/agents/acme.dra%00fting/test-set?projectId={P1}",
    "a case id with NUL": f"{CASES}/case-2%00",
    "a run id with NUL": f"/v1/agents/{AGENT}/runs/run-1%00/corrections",
    "a correction id with NUL": f"/v1/agents/{AGENT}/corrections/cor-1%00",
    "a token id with NUL": "/v1/tokens/tok-admin%00",
    "an agent id with an encoded surrogate": f"/v1/agents/acme%ED%A0%80/test-set?projectId={P1}",
    "a kind with NUL": f"{CASES}?projectId={P1}&kind=hand%00",
    "a project id with NUL": f"{CASES}?projectId={P1[:-1]}%00",
    # free text in a query string: PostgreSQL can't even compare a NUL (the fuzzer found it)
    "a candidate with NUL": f"/v1/agents/{AGENT}/test-runs?projectId={P1}&candidate=2.0%000",
    "a search with NUL": f"{CASES}?projectId={P1}&q=refund%00",
    "a tool with NUL": f"{CASES}?projectId={P1}&tool=send%00mail",
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


# ---------------------------------------------------------------- test runs (docs/design.md §9.2)


TR = f"/v1/agents/{AGENT}/test-runs"
TS = f"/v1/agents/{AGENT}/test-set"


one_world = pytest.mark.one_world  # refused or only read: on its file's shared world (conftest)


@pytest.fixture(scope="module")
def shared_test_runs(one_world_app) -> dict[str, str]:
    """`make_test_runs` once, in the world the `one_world` tests share."""
    return make_test_runs(one_world_app)


@pytest.fixture
def test_runs(request, app) -> dict[str, str]:
    """The test runs of `make_test_runs`, made in this test's world or found in the shared one."""
    if request.node.get_closest_marker("one_world"):
        return request.getfixturevalue("shared_test_runs")
    return make_test_runs(app)


def make_test_runs(app) -> dict[str, str]:
    """Test runs of acme.drafting / P1 by the admin, by name: `done` (v1: case-2 passed, cor-1
    erred) and `open` (v1, against `done`, both cases awaiting); then `later`, canceled, on v2,
    frozen once case-2 was retired and a hand case added (so v2 and v1 differ by two cases)."""
    client = app.test_client()

    def post(path: str, body: Any) -> dict[str, Any]:
        resp = client.post(path, json=body, headers=ADMIN)
        assert resp.status_code in (200, 201), resp.get_json()
        return resp.get_json()

    def start(**more: Any) -> str:
        return post(TR, {"projectId": P1, "candidate": "2.0.0", **more})["id"]

    done = start()
    post(f"{TR}/{done}/results", {"results": [
        {"caseId": "case-2", "output": {}, "calls": [], "ranked": ["k1"]},
        {"caseId": "cor-1", "error": "crashed"}]})  # fmt: skip
    runs = {"done": done, "open": start(baseline=done)}
    post(CASES, {"runId": "run-2", "answer": "right"})
    post(f"{CASES}/case-2/retire", {"reason": "for v2"})
    runs["later"] = start()
    post(f"{TR}/{runs['later']}/cancel", {})
    return runs


def start_body(**more: Any) -> dict[str, Any]:
    return {"projectId": P1, "candidate": "2.0.0", **more}


def result(case_id: str = "case-2", **more: Any) -> dict[str, Any]:
    return {"caseId": case_id, "output": {"answer": "x"}, "calls": [], **more}


def results(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"results": list(entries)}


def without(entry: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in names}


RESULTS, FINISH, CANCEL = f"{TR}/{{open}}/results", f"{TR}/{{open}}/finish", f"{TR}/{{open}}/cancel"
HOSTILE_RUN_BODIES = {
    # (path, body: an object, or JSON text with \u escapes, every field the 400 names)
    "a candidate left out": (TR, {"projectId": P1}, "candidate"),
    "an empty candidate": (TR, start_body(candidate=""), "candidate"),
    "a candidate of 101 code points": (TR, start_body(candidate=PARROT * 101), "candidate"),
    "a candidate that is a number": (TR, start_body(candidate=2), "candidate"),
    "a candidate with NUL": (TR, f'{{"projectId": "{P1}", "candidate": "2\\u0000"}}',
                             "candidate"),
    "a weighting not in the list": (TR, start_body(weighting="experts"), "weighting"),
    "a weighting in capitals": (TR, start_body(weighting="ALL"), "weighting"),
    "a weighting of null": (TR, start_body(weighting=None), "weighting"),
    "only without rerunOf": (TR, start_body(only="failed"), "only"),
    "only both without rerunOf": (TR, start_body(only="failed,errored"), "only"),
    "only naming passed cases": (TR, start_body(rerunOf="{done}", only="failed,passed"), "only"),
    "only empty": (TR, start_body(rerunOf="{done}", only=""), "only"),
    "only as a list": (TR, start_body(rerunOf="{done}", only=["failed"]), "only"),
    "itemsThreshold as a string": (TR, start_body(itemsThreshold="0.5"), "itemsThreshold"),
    "itemsThreshold as a boolean": (TR, start_body(itemsThreshold=True), "itemsThreshold"),
    "itemsThreshold below 0": (TR, start_body(itemsThreshold=-0.001), "itemsThreshold"),
    "itemsThreshold above 1": (TR, start_body(itemsThreshold=1.001), "itemsThreshold"),
    "itemsThreshold of 80 (a percentage)": (TR, start_body(itemsThreshold=80), "itemsThreshold"),
    "itemsThreshold of null": (TR, start_body(itemsThreshold=None), "itemsThreshold"),
    "itemsThreshold past a double (1e400)": (
        TR, f'{{"projectId": "{P1}", "candidate": "2", "itemsThreshold": 1e400}}',
        "itemsThreshold"),
    "metadata of 4001 code points of canonical JSON": (
        TR, start_body(metadata={"c": PARROT * 3993}), "metadata"),
    "metadata short as text but over 4000 once escaped": (
        TR, start_body(metadata={"c": "\n" * 1997}), "metadata"),
    "metadata that is a list": (TR, start_body(metadata=["commit"]), "metadata"),
    "metadata that is a string": (TR, start_body(metadata="commit abc"), "metadata"),
    "metadata with a number past a double": (
        TR, f'{{"projectId": "{P1}", "candidate": "2", "metadata": {{"n": 1e400}}}}',
        "metadata.n"),
    "metadata with NUL in a value": (
        TR, f'{{"projectId": "{P1}", "candidate": "2", "metadata": {{"c": "a\\u0000"}}}}',
        "metadata.c"),
    "a label of 201 code points": (TR, start_body(label=PARROT * 201), "label"),
    "an empty label": (TR, start_body(label=""), "label"),
    "a label with a lone surrogate": (
        TR, f'{{"projectId": "{P1}", "candidate": "2", "label": "\\udfff"}}', "label"),
    "an empty baseline": (TR, start_body(baseline=""), "baseline"),
    "a baseline of 65 characters": (TR, start_body(baseline="t" * 65), "baseline"),
    "a rerunOf that is a number": (TR, start_body(rerunOf=7), "rerunOf"),
    "a project id that is no UUID": (TR, start_body(projectId="P1"), "projectId"),
    "an unknown field": (TR, start_body(colour="red"), "colour"),
    "a list for a body": (TR, [start_body()], "_body"),
    # sending results
    "no results": (RESULTS, results(), "results"),
    "501 results": (RESULTS, results(*(result(f"case-{i}") for i in range(501))), "results"),
    "results left out": (RESULTS, {}, "results"),
    "results that are an object": (RESULTS, {"results": result()}, "results"),
    "a case twice": (RESULTS, results(result(), result("cor-1"), result()), "results.2.caseId"),
    "a case not in the run": (RESULTS, results(result(), result("case-nope")),
                              "results.1.caseId"),
    "a retired case, not in the version": (RESULTS, results(result("case-1")),
                                           "results.0.caseId"),
    "a correction that is no case": (RESULTS, results(result("cor-2")), "results.0.caseId"),
    "another tenant's case": (RESULTS, results(result("cor-g")), "results.0.caseId"),
    "an empty case id": (RESULTS, results(result("")), "results.0.caseId"),
    "a case id of 65 characters": (RESULTS, results(result("c" * 65)), "results.0.caseId"),
    "a case id with NUL": (RESULTS, '{"results": [{"caseId": "case-2\\u0000", "output": null, '
                           '"calls": []}]}', "results.0.caseId"),
    "output left out without an error": (RESULTS, results(without(result(), "output")),
                                         "results.0.output"),
    "calls left out without an error": (RESULTS, results(without(result(), "calls")),
                                        "results.0.calls"),
    "both left out without an error": (RESULTS, results({"caseId": "case-2"}),
                                       ("results.0.output", "results.0.calls")),
    "an empty error": (RESULTS, results(result(error="")), "results.0.error"),
    "an error of 4001 code points": (RESULTS, results({"caseId": "case-2",
                                                       "error": PARROT * 4001}),
                                     "results.0.error"),
    "an error that is an object": (RESULTS, results({"caseId": "case-2", "error": {"x": 1}}),
                                   "results.0.error"),
    "an error with a lone surrogate": (RESULTS, '{"results": [{"caseId": "case-2", '
                                       '"error": "boom \\ud800"}]}', "results.0.error"),
    "calls that are a string": (RESULTS, results(result(calls="search")), "results.0.calls"),
    "calls that are an object": (RESULTS, results(result(calls={"tool": "search"})),
                                 "results.0.calls"),
    "calls of null": (RESULTS, results(result(calls=None)), "results.0.calls"),
    "a call without its tool": (RESULTS, results(result(calls=[{"args": {}}])),
                                "results.0.calls.0.tool"),
    "a call's args that are a list": (RESULTS, results(result(calls=[{"tool": "t", "args": []}])),
                                      "results.0.calls.0.args"),
    "1001 calls": (RESULTS, results(result(calls=calls(1001))), "results.0.calls"),
    "ranked that is a string": (RESULTS, results(result(ranked="k1")), "results.0.ranked"),
    "1001 ranked keys": (RESULTS, results(result(ranked=["k"] * 1001)), "results.0.ranked"),
    "NUL deep in the output": (RESULTS, '{"results": [{"caseId": "case-2", "output": '
                               '{"a": [{"b": "x\\u0000"}]}, "calls": []}]}',
                               "results.0.output.a.0.b"),
    "an unknown field in a result": (RESULTS, results(result(score=1)), "results.0.score"),
    "an unknown field beside results": (RESULTS, {**results(result()), "runId": "x"}, "runId"),
    "a result that is a string": (RESULTS, results("case-2"), "results.0._body"),
    # finishing and cancelling take an empty object
    "finish with a field": (FINISH, {"now": True}, "now"),
    "finish with a list": (FINISH, [], "_body"),
    "cancel with a field": (CANCEL, {"reason": "enough"}, "reason"),
    "cancel with a NUL-named field": (CANCEL, '{"a\\u0000": 1}', "a\x00"),
}  # fmt: skip


def send_as_admin(api, path: str, body: Any, runs: dict[str, str]):
    """POST `body` (an object, or JSON text as it stands) to `path` with runs' ids filled in."""
    path = path.format_map(runs)
    if isinstance(body, str):
        return api.post(path, data=body, content_type="application/json")
    if isinstance(body, dict) and isinstance(body.get("rerunOf"), str):
        body = {**body, "rerunOf": body["rerunOf"].format_map(runs)}
    return api.post(path, json=body)


@one_world
@pytest.mark.parametrize("name", HOSTILE_RUN_BODIES)
def test_a_hostile_test_run_body_is_bad_input_naming_its_field_and_changes_nothing(
    api, unchanged, test_runs, name
):
    path, body, fields = HOSTILE_RUN_BODIES[name]
    with unchanged():
        resp = send_as_admin(api, path, body, test_runs)
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input", err
    named = set(err["details"]["fields"])
    assert named == ({fields} if isinstance(fields, str) else set(fields)), err


RUN_BOUNDS = {
    # (path, at the limit, one past it, field); at the limit passes validation
    "a test run's candidate has 100 code points": (
        TR, start_body(candidate=PARROT * 100), start_body(candidate=PARROT * 101), "candidate"),
    "a test run's label has 200 code points": (
        TR, start_body(label=PARROT * 200), start_body(label=PARROT * 201), "label"),
    "a test run's metadata has 4000 code points of canonical JSON": (
        TR, start_body(metadata={"c": PARROT * 3992}), start_body(metadata={"c": PARROT * 3993}),
        "metadata"),
    "a test run's metadata has 4000 characters once its newlines are escaped": (
        TR, start_body(metadata={"c": "\n" * 1996}), start_body(metadata={"c": "\n" * 1997}),
        "metadata"),
    "a test run's metadata has 100 properties": (
        TR, start_body(metadata={f"k{i}": i for i in range(100)}),
        start_body(metadata={f"k{i}": i for i in range(101)}), "metadata"),
    "itemsThreshold is 1": (TR, start_body(itemsThreshold=1), start_body(itemsThreshold=1.0001),
                            "itemsThreshold"),
    "itemsThreshold is 0": (TR, start_body(itemsThreshold=0), start_body(itemsThreshold=-1e-9),
                            "itemsThreshold"),
    "a result's error has 4000 code points": (
        RESULTS, results({"caseId": "case-2", "error": PARROT * 4000}),
        results({"caseId": "case-2", "error": PARROT * 4001}), "results.0.error"),
    "a batch has 500 results": (  # at the limit, 499 of them are not the run's cases
        RESULTS, results(result(), *(result(f"case-x{i}") for i in range(499))),
        results(result(), *(result(f"case-x{i}") for i in range(500))), "results"),
    "a case id has 64 characters": (
        RESULTS, results(result("c" * 64)), results(result("c" * 65)), "results.0.caseId"),
}  # fmt: skip


@pytest.mark.parametrize("bound", RUN_BOUNDS)
def test_every_test_run_bound_holds_at_its_edge(api, unchanged, test_runs, bound):
    path, at, past, field = RUN_BOUNDS[bound]
    with unchanged():
        refused = send_as_admin(api, path, past, test_runs)
    assert refused.status_code == 400, refused.get_json()
    err = error_of(refused)
    assert err["code"] == "bad-input" and field in err["details"]["fields"], err
    answered = send_as_admin(api, path, at, test_runs)
    if answered.status_code == 400:  # refused for something else than its length
        said = error_of(answered)["details"]["fields"].get(field)
        assert said != err["details"]["fields"][field], answered.get_json()
    else:
        assert answered.status_code in (200, 201), answered.get_json()


HOSTILE_QUERIES = {
    # (path and query string, the field the 400 names)
    "the runner's cases, limit 0": (f"{TR}/{{open}}/cases?limit=0", "limit"),
    "the runner's cases, limit 501": (f"{TR}/{{open}}/cases?limit=501", "limit"),
    "the runner's cases, limit 1.5": (f"{TR}/{{open}}/cases?limit=1.5", "limit"),
    "the runner's cases, limit in hex": (f"{TR}/{{open}}/cases?limit=0x10", "limit"),
    "the runner's cases, limit empty": (f"{TR}/{{open}}/cases?limit=", "limit"),
    "the runner's cases, awaiting=yes": (f"{TR}/{{open}}/cases?awaiting=yes", "awaiting"),
    "the runner's cases, awaiting=TRUE": (f"{TR}/{{open}}/cases?awaiting=TRUE", "awaiting"),
    "results, limit 0": (f"{TR}/{{done}}/results?limit=0", "limit"),
    "results, limit 101": (f"{TR}/{{done}}/results?limit=101", "limit"),
    "results, an outcome not in the list": (f"{TR}/{{done}}/results?outcome=passed", "outcome"),
    "results, awaiting is no result's outcome": (f"{TR}/{{done}}/results?outcome=awaiting",
                                                 "outcome"),
    "results, an outcome list with a gap": (f"{TR}/{{done}}/results?outcome=pass,,fail",
                                            "outcome"),
    "results, an outcome list ending in a comma": (f"{TR}/{{done}}/results?outcome=pass,",
                                                   "outcome"),
    "results, an outcome with spaces": (f"{TR}/{{done}}/results?outcome=pass,%20fail",
                                        "outcome"),
    "results, an outcome with NUL": (f"{TR}/{{done}}/results?outcome=pass%00", "outcome"),
    "results, a part not in the list": (f"{TR}/{{done}}/results?part=all", "part"),
    "results, two parts": (f"{TR}/{{done}}/results?part=items,answer", "part"),
    "results, a part in capitals": (f"{TR}/{{done}}/results?part=Items", "part"),
    "compare, a change not in the list": (f"{TR}/{{open}}/compare/{{done}}?change=worse",
                                          "change"),
    "compare, a change in camel case": (f"{TR}/{{open}}/compare/{{done}}?change=stillFailing",
                                        "change"),
    "compare, limit 101": (f"{TR}/{{open}}/compare/{{done}}?limit=101", "limit"),
    "the versions, limit 0": (f"{TS}/versions?projectId={P1}&limit=0", "limit"),
    "the versions, no projectId": (f"{TS}/versions", "projectId"),
    "a diff, a change not in the list": (f"{TS}/versions/v2/diff/v1?projectId={P1}&change=both",
                                         "change"),
    "a diff, both changes listed": (
        f"{TS}/versions/v2/diff/v1?projectId={P1}&change=added,removed", "change"),
    "a diff, a project id that is no UUID": (f"{TS}/versions/v2/diff/v1?projectId=P1",
                                             "projectId"),
    "the test runs, no projectId": (f"{TR}", "projectId"),
    "the test runs, an empty candidate": (f"{TR}?projectId={P1}&candidate=", "candidate"),
    "the test runs, a candidate of 101 code points": (
        f"{TR}?projectId={P1}&candidate={quote(PARROT * 101)}", "candidate"),
    "the test runs, limit 101": (f"{TR}?projectId={P1}&limit=101", "limit"),
}  # fmt: skip


@one_world
@pytest.mark.parametrize("name", HOSTILE_QUERIES)
def test_a_hostile_query_string_on_a_test_run_list_is_bad_input_naming_it(
    api, unchanged, test_runs, name
):
    path, field = HOSTILE_QUERIES[name]
    with unchanged():
        resp = api.get(path.format_map(test_runs))
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input" and set(err["details"]["fields"]) == {field}, err


RUN_LISTS = {
    # lists of two or more rows, read a row at a time
    "the runner's cases": f"{TR}/{{open}}/cases?limit=1",
    "the runner's awaiting cases": f"{TR}/{{open}}/cases?limit=1&awaiting=true",
    "results": f"{TR}/{{done}}/results?limit=1",
    "a comparison": f"{TR}/{{open}}/compare/{{done}}?limit=1",
    "the versions": f"{TS}/versions?projectId={P1}&limit=1",
    "a diff": f"{TS}/versions/v2/diff/v1?projectId={P1}&limit=1",
    "the test runs": f"{TR}?projectId={P1}&limit=1",
}


@one_world
@pytest.mark.parametrize("spoil", SPOILERS)
@pytest.mark.parametrize("listing", RUN_LISTS)
def test_a_spoilt_cursor_on_a_test_run_list_is_invalid_never_a_crash(
    api, unchanged, test_runs, spoil, listing
):
    url = RUN_LISTS[listing].format_map(test_runs)
    cursor = first_cursor(api, url)
    spoilt = quote(SPOILERS[spoil](cursor), safe="", errors="surrogatepass")
    with unchanged():
        resp = api.get(f"{url}&cursor={spoilt}")
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert (err["code"], err["details"]["reason"]) == ("bad-input", "cursor-invalid")


@one_world
@pytest.mark.parametrize(
    ("listing", "elsewhere"),
    [
        ("the runner's cases", f"{TR}/{{done}}/cases?limit=1"),  # another run
        ("the runner's cases", f"{TR}/{{open}}/cases?limit=1&awaiting=true"),  # another filter
        ("results", f"{TR}/{{done}}/results?limit=1&outcome=pass"),
        ("results", f"{TR}/{{done}}/results?limit=1&part=items"),
        ("a comparison", f"{TR}/{{done}}/compare/{{open}}?limit=1"),  # the runs swapped
        ("a comparison", f"{TR}/{{open}}/compare/{{done}}?limit=1&change=errored"),
        ("a diff", f"{TS}/versions/v1/diff/v2?projectId={P1}&limit=1"),
        ("a diff", f"{TS}/versions/v2/diff/v1?projectId={P1}&limit=1&change=added"),
        ("the runner's cases", f"{TR}/{{open}}/results?limit=1"),  # another list
        ("the versions", f"{TR}?projectId={P1}&limit=1"),
    ],
)
def test_a_cursor_of_another_test_run_list_is_a_mismatch(api, unchanged, test_runs, listing,
                                                         elsewhere):  # fmt: skip
    cursor = first_cursor(api, RUN_LISTS[listing].format_map(test_runs))
    with unchanged():
        resp = api.get(f"{elsewhere.format_map(test_runs)}&cursor={quote(cursor)}")
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert (err["code"], err["details"]["reason"]) == ("bad-input", "cursor-mismatch"), err


PAST_A_DOUBLE = {
    # (path, JSON text with a number no double holds, the field it is in)
    "a result's output": (
        RESULTS, '{"results": [{"caseId": "case-2", "output": {"n": 1e400}, "calls": []}]}',
        "results.0.output"),
    "a result's ranked keys": (
        RESULTS, '{"results": [{"caseId": "case-2", "output": {}, "calls": [], '
        '"ranked": [-1e400]}]}', "results.0.ranked"),
    "a result's call args": (
        RESULTS, '{"results": [{"caseId": "cor-1", "output": {}, '
        '"calls": [{"tool": "lookup", "args": {"n": 1e400}}]}]}', "results.0.calls"),
    "a recorded run's output": (
        f"/v1/agents/{AGENT}/runs",
        f'{{"projectId": "{P1}", "version": "1", "status": "finished", "output": [1e999]}}',
        "output"),
}  # fmt: skip


@one_world
@pytest.mark.parametrize("name", PAST_A_DOUBLE)
def test_a_number_past_a_double_in_free_json_is_bad_input_never_kept_as_null_or_a_500(
    api, unchanged, test_runs, name
):
    """A number no double can hold is refused, as metadata refuses it, rather than kept as
    something else than was sent (null) or failing the write."""
    path, raw, field = PAST_A_DOUBLE[name]
    with unchanged():
        resp = send_as_admin(api, path, raw, test_runs)
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input", err
    assert any(f.startswith(field) for f in err["details"]["fields"]), err


NOT_IN_XML = {
    # (where, text XML 1.0 can't carry: control characters but tab and newlines, U+FFFE, U+FFFF)
    "a candidate with an escape sequence": ("candidate", "2.0 \x1b[31mred"),
    "an error with a backspace": ("error", "crashed\x08"),
    "an error with a form feed": ("error", "page\x0cbreak"),
    "an error with U+FFFF": ("error", "not a character \uffff"),
}


@pytest.mark.parametrize("name", NOT_IN_XML)
def test_text_xml_cannot_carry_is_refused_or_the_junit_report_stays_well_formed(api, name):
    where, text = NOT_IN_XML[name]
    started = api.post(TR, json=start_body(**({"candidate": text} if where == "candidate" else {})))
    if started.status_code == 400:
        return  # refused as it came in: fine
    assert started.status_code == 201, started.get_json()
    run = started.get_json()["id"]
    if where == "error":
        sent = api.post(f"{TR}/{run}/results", json=results({"caseId": "case-2", "error": text}))
        if sent.status_code == 400:
            return
        assert sent.status_code == 200, sent.get_json()
    report = api.get(f"{TR}/{run}/report.xml")
    assert report.status_code == 200 and report.mimetype == "application/xml"
    suite = ElementTree.fromstring(report.get_data())
    assert len(suite.findall("testcase")) == 2  # case-2 and cor-1


# ---------------------------------------------------------------- NUL in every query parameter


CURSORS = {"cursor", "versionsCursor"}  # unsealed, never compared in SQL: a spoilt one is
# `cursor-invalid` (tested above), not a field's 400
NUL_TEXT = "a\x00b"


def query_parameters(api) -> list[tuple[str, str]]:
    """Every GET route's path and each of its query parameters but cursors, as the OpenAPI
    document says them: a list or a filter added later is covered too."""
    paths = api.get("/v1/openapi.json", as_=None).get_json()["paths"]
    return [
        (path, param["name"])
        for path, operations in paths.items()
        for param in operations.get("get", {}).get("parameters", [])
        if param["in"] == "query" and param["name"] not in CURSORS
    ]


def fields_named(resp) -> dict[str, list[str]]:
    return ((resp.get_json() or {}).get("error", {}).get("details") or {}).get("fields", {})


@one_world
def test_a_nul_in_any_query_parameter_of_the_api_is_bad_input_naming_it(api, unchanged, test_runs):
    """Every parameter, whatever name its schema gives it inside (`addedBy` is `added_by`):
    PostgreSQL can't even compare a NUL, and SQLite would look for it."""
    ids = {"agentId": AGENT, "runId": test_runs["open"], "otherId": test_runs["done"],
           "caseId": "case-2", "version": "v2", "other": "v1"}  # fmt: skip
    checked, wrong = query_parameters(api), {}
    assert ("/v1/agents/{agentId}/test-set/cases", "addedBy") in checked
    with unchanged():
        for path, name in checked:
            resp = api.get(f"{path.format_map(ids)}?{urlencode({'projectId': P1, name: NUL_TEXT})}")
            if resp.status_code != 400 or name not in fields_named(resp):
                wrong[f"{path} {name}"] = (resp.status_code, resp.get_data(as_text=True)[:200])
    assert not wrong, wrong


PAGE_QUERIES = {
    # (page, the query string it is asked with, the schema that checks it)
    "the cases": (f"/agents/{AGENT}/test-set/cases", {"projectId": P1},
                  case_schemas.CasesQuery),
    "the export": (f"/agents/{AGENT}/test-set/export", {"projectId": P1},
                   case_schemas.ExportQuery),
    "the new case": (f"/agents/{AGENT}/test-set/cases/new", {"projectId": P1},
                     common_schemas.TestSetQuery),
    "the test set's runs": (f"/agents/{AGENT}/test-set/runs", {"projectId": P1},
                            run_schemas.TestSetRunsQuery),
    "a run": (f"/agents/{AGENT}/test-runs/{{done}}", {}, run_schemas.ResultsQuery),
    "a comparison": (f"/agents/{AGENT}/test-runs/{{open}}/compare", {},
                     run_schemas.ComparePageQuery),
    "the tokens": ("/tokens", {}, common_schemas.Paging),
}  # fmt: skip


@one_world
def test_a_nul_in_any_query_parameter_of_a_page_is_a_400_page_naming_it(app, test_runs):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    before, wrong = snapshot_db(app), {}
    for page, (path, given, schema) in PAGE_QUERIES.items():
        for name, field in schema().load_fields.items():
            key = field.data_key or name
            if key in CURSORS:
                continue
            query = urlencode({**given, key: NUL_TEXT})
            resp = client.get(f"{path.format_map(test_runs)}?{query}")
            if resp.status_code != 400 or f"<code>{key}</code>" not in resp.text:
                wrong[f"{page} {key}"] = (resp.status_code, resp.text[:200])
    assert not wrong, wrong
    assert snapshot_db(app) == before


# ---------------------------------------------------------------- times at the calendar's ends


PAST_THE_CALENDAR = {
    # (the parameter, an RFC 3339 time whose UTC lies outside the years 1 to 9999)
    "addedAfter an hour before the year 1": ("addedAfter", "0001-01-01T00:00:00+01:00"),
    "addedBefore a day past the year 9999": ("addedBefore", "9999-12-31T23:59:59-23:59"),
}


@pytest.mark.parametrize("name", PAST_THE_CALENDAR)
def test_a_time_past_the_calendars_ends_is_bad_input_naming_it_on_the_list_and_its_page(
    app, api, unchanged, name
):
    field, value = PAST_THE_CALENDAR[name]
    with unchanged():
        resp = api.get(cases_url(**{field: value}))
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input" and set(err["details"]["fields"]) == {field}, err
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    query = urlencode({"projectId": P1, field: value})
    page = client.get(f"/agents/{AGENT}/test-set/cases?{query}")
    assert page.status_code == 400 and f"<code>{field}</code>" in page.text, page.text[:300]


@pytest.mark.parametrize("expires", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-23:59"])
def test_a_token_expiring_past_the_calendars_ends_is_bad_input_and_changes_nothing(
    api, unchanged, expires
):
    with unchanged():
        resp = api.post("/v1/tokens", json={"name": "far", "expiresAt": expires})
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input" and set(err["details"]["fields"]) == {"expiresAt"}, err


CASE_LINK = re.compile(r'href="[^"]*/test-set/cases/((?:case|cor)-[\w-]+)"')


def test_the_calendars_own_ends_are_bounds_that_keep_every_case_on_the_list_and_its_page(app, api):
    """The first and last times there are, and on the page the date control's first and last
    days (`addedBefore` a day, meaning before the next one, which no calendar has)."""

    def listed(**params: str) -> list[str]:
        resp = api.get(cases_url(limit=100, **params))
        assert resp.status_code == 200, resp.get_json()
        return [case["id"] for case in resp.get_json()["data"]]

    every = listed()
    assert len(every) > 1
    assert listed(addedAfter="0001-01-01T00:00:00Z") == every
    assert listed(addedBefore="9999-12-31T23:59:59.999Z") == every
    assert listed(addedAfter="0001-01-01T00:00:00Z", addedBefore="9999-12-31T23:59:59Z") == every
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")

    def shown(**params: str) -> list[str]:
        query = urlencode({"projectId": P1, "limit": 100, **params})
        page = client.get(f"/agents/{AGENT}/test-set/cases?{query}")
        assert page.status_code == 200, page.text[:300]
        return CASE_LINK.findall(page.text)

    assert shown() == every
    assert shown(addedAfter="0001-01-01") == every
    assert shown(addedBefore="9999-12-31") == every
    assert shown(addedAfter="0001-01-01", addedBefore="9999-12-31") == every


def test_a_world_file_time_past_the_calendars_ends_is_a_world_error_naming_it(app):
    run = {**WORLD["runs"][0], "id": "run-far", "at": "9999-12-31T23:59:59-23:59"}
    with app.app_context(), pytest.raises(world.WorldError, match=r"runs\[0\].*9999"):
        world.load({"runs": [run]})


# ---------------------------------------------------------------- bodies nested past the limit


MAX_DEPTH = 100  # arrays and objects, the body itself the first (docs/errors.md)


def nested(depth: int) -> str:
    """JSON text: arrays `depth` deep around a 0 (written out: json.dumps itself recurses)."""
    return "[" * depth + "0" + "]" * depth


DEEP_BODIES = {
    # (path, the body's JSON text around a value, how deep that value sits in the body)
    "a run's output": (f"/v1/agents/{AGENT}/runs",
                       f'{{"projectId": "{P1}", "version": "1", "status": "finished", '
                       '"output": %s}', 1),
    "a result's output": (RESULTS,
                          '{"results": [{"caseId": "case-2", "output": %s, "calls": []}]}', 3),
    "a correction's call args": (f"{CASES}",
                                 '{"runId": "run-1", "decisions": "wrong", '
                                 '"shouldCall": [{"tool": "t", "args": {"x": %s}}]}', 4),
}  # fmt: skip


@one_world
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 975, 5000])
@pytest.mark.parametrize("name", DEEP_BODIES)
def test_a_body_nested_past_the_limit_is_bad_input_naming_the_limit_and_changes_nothing(
    api, unchanged, test_runs, name, depth
):
    """Past the limit, at the depth that overflowed the body's check (975) and past the JSON
    parser's own (5000): the same 400, which names the limit."""
    path, around, sits = DEEP_BODIES[name]
    with unchanged():
        resp = send_as_admin(api, path, around % nested(depth - sits), test_runs)
    assert resp.status_code == 400, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "bad-input" and err["details"]["maxDepth"] == MAX_DEPTH, err
    assert str(MAX_DEPTH) in err["details"]["fields"]["_body"][0], err


@pytest.mark.parametrize("name", DEEP_BODIES)
def test_a_body_nested_to_the_limit_is_taken_and_answered(api, test_runs, name):
    path, around, sits = DEEP_BODIES[name]
    resp = send_as_admin(api, path, around % nested(MAX_DEPTH - sits), test_runs)
    assert resp.status_code in (200, 201), resp.get_data(as_text=True)[:300]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 975, 5000])
def test_a_form_with_call_args_nested_past_the_limit_is_a_400_page_naming_it(app, depth):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    form = {"runId": "run-1", "decisions": "wrong", "shouldCall-0-tool": "t",
            "shouldCall-0-args": nested(depth - 3), "csrf_token": csrf_of(client)}  # fmt: skip
    before = snapshot_db(app)
    resp = client.post(f"/agents/{AGENT}/test-set/cases/new?projectId={P1}", data=form)
    assert resp.status_code == 400, resp.text[:300]
    assert f"more than {MAX_DEPTH}" in resp.text, resp.text[:300]
    assert snapshot_db(app) == before


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
    # on `test_runs`' runs (§9.2)
    "start a test run": ("POST", TR, start_body()),
    "send results": ("POST", RESULTS, results(result(), result("cor-1", error="x"))),
    "finish a test run": ("POST", FINISH, {}),
    "cancel a test run": ("POST", CANCEL, {}),
}  # fmt: skip


def write_of(request, name: str) -> tuple[str, str, Any]:
    """WRITES[name], its path naming `test_runs`' runs where it names one."""
    method, path, body = WRITES[name]
    if "{" in path:
        path = path.format_map(request.getfixturevalue("test_runs"))
    return method, path, body


@contextmanager
def writes_locked(url: str) -> Iterator[None]:
    """`write_lock`, with the test runs' tables locked too on PostgreSQL (its list of tables
    predates them; on SQLite the lock is the whole database's)."""
    with write_lock(url):
        if ENGINE == "sqlite":
            yield
            return
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo) as pg:
            pg.execute("LOCK TABLE test_set_changes, test_set_versions, version_members, "
                       "test_runs, test_run_cases IN EXCLUSIVE MODE")  # fmt: skip
            try:
                yield
            finally:
                pg.rollback()


@pytest.mark.parametrize("write", WRITES)
def test_a_write_lock_held_past_the_busy_timeout_is_503_busy_then_the_retry_succeeds(
    app, other_app, request, write
):
    client = other_app(DB_BUSY_TIMEOUT_MS=300).test_client()
    method, path, body = write_of(request, write)
    headers = {**ADMIN, "Idempotency-Key": f"k-busy-{write}"}
    before = snapshot_db(app)
    with writes_locked(app.config["SQLALCHEMY_DATABASE_URI"]):
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
    "starting a test run, at its cases' insert": ("start a test run",
                                                  "INSERT INTO TEST_RUN_CASES"),
    "starting a test run, at its commit": ("start a test run", "COMMIT"),
    "sending results, at the results' update": ("send results", "UPDATE TEST_RUN_CASES"),
    "sending results, at the run's row lock": ("send results", "SELECT TEST_RUNS"),
    "finishing a test run, at the run's update": ("finish a test run", "UPDATE TEST_RUNS"),
    "cancelling a test run, at its commit": ("cancel a test run", "COMMIT"),
}  # fmt: skip


@pytest.mark.parametrize("death", DEATHS)
def test_the_database_going_away_mid_request_is_an_envelope_with_no_partial_write(
    app, request, death
):
    write, when = DEATHS[death]
    method, path, body = write_of(request, write)
    client = app.test_client()
    headers = {**ADMIN, "Idempotency-Key": f"k-gone-{write}"}
    before = snapshot_db(app)
    with dies_at(app, when) as fired:
        resp = client.open(path, method=method, json=body, headers=headers)
    assert fired, f"nothing ran {when}"
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]  # a retry will do
    assert resp.mimetype == "application/json"
    err = error_of(resp)
    assert err["code"] == "database-busy" and resp.headers["Retry-After"].isdigit()
    assert "Traceback" not in resp.get_data(as_text=True)
    assert snapshot_db(app) == before  # no partial write, and the key's claim released
    again = client.open(path, method=method, json=body, headers=headers)
    assert again.status_code in (200, 201), again.get_data(as_text=True)[:300]
    assert "Idempotent-Replayed" not in again.headers
    assert client.get(f"{CASES}?projectId={P1}", headers=ADMIN).status_code == 200


def test_the_connection_dying_as_a_refusal_is_rolled_back_leaves_the_refusal(app):
    """The connection ends between a write's last statement and the ROLLBACK of its refusal (the
    chaos test found it on PostgreSQL: the ROLLBACK read that the server had ended it, and the
    error handler's own cleanup failed, a 500 in place of the 409): the refusal is answered,
    nothing changed, and the next request is served."""
    client = app.test_client()
    engine, killed = None, []
    with app.app_context():
        engine = db.engine

    def on_rollback(conn):
        if not killed:
            killed.append(True)
            kill(conn)

    before = snapshot_db(app)
    event.listen(engine, "rollback", on_rollback)
    try:
        resp = client.post(f"{CASES}/case-2/restore", json={}, headers=ADMIN)
    finally:
        event.remove(engine, "rollback", on_rollback)
    assert killed, "the refusal was never rolled back"
    assert resp.status_code == 409, resp.get_data(as_text=True)[:300]
    assert error_of(resp)["code"] == "case-active"
    assert snapshot_db(app) == before
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
