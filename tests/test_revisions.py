"""Revising a case's expectation over HTTP (docs/design.md §4.4): the revision itself, its
refusals (each shown to change nothing), the revisions list, and what a frozen version keeps:
runs grade with the expectation their version froze, the next freeze sees the change, and a
comparison across the two says so.

The set is acme.drafting in P1 (the world's cor-1 and case-2) plus a hand case on run-1, whose
snapshot called `search`: `{"decisions": "right"}` passes a candidate calling `search`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from conftest import AGENT, P1, csrf_of, ok, refused, sign_in

V = f"/v1/agents/{AGENT}"
CASES = f"{V}/test-set/cases"
RUNS = f"{V}/test-runs"
RIGHT = {"decisions": "right"}
LOOKUP = {"decisions": "wrong", "shouldCall": [{"tool": "lookup"}]}
# the same as a case expects them
EXPECT_RIGHT = {"decisions": {"verdict": "right"}}
EXPECT_LOOKUP = {"decisions": {"verdict": "wrong", "shouldCall": [{"tool": "lookup", "args": {}}]}}
SEARCHING = [{"tool": "search", "args": {"q": "x"}}]


def add(api, **expect: Any) -> dict[str, Any]:
    return ok(api.post(CASES, {"runId": "run-1", **(expect or RIGHT)}), 201)


def revise(api, case_id: str, etag: str | None = '"r1"', as_: str = "admin", **body: Any):
    headers = {} if etag is None else {"If-Match": etag}
    return api.post(f"{CASES}/{case_id}/revise", body, headers=headers, as_=as_)


def start(api) -> dict[str, Any]:
    return ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)


def graded(api, run: dict[str, Any], case_id: str) -> str:
    """The outcome of a candidate calling `search` for the case, the run then finished."""
    sent = [{"caseId": case_id, "output": None, "calls": SEARCHING}]
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": sent}))
    ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    return ok(api.get(f"{RUNS}/{run['id']}/results/{case_id}"))["outcome"]


def test_a_revision_keeps_the_case_and_moves_its_revision_etag_and_updated_at(api, set_clock):
    case = add(api)
    assert case["revision"] == 1
    read = api.get(f"{CASES}/{case['id']}")
    assert read.headers["ETag"] == '"r1"' and read.get_json()["revision"] == 1
    set_clock(datetime(2026, 12, 6, 3, 0))
    resp = revise(api, case["id"], note="The product now looks it up.", **LOOKUP)
    revised = ok(resp)
    assert resp.headers["ETag"] == '"r2"'
    assert revised["id"] == case["id"] and revised["runId"] == "run-1"
    assert revised["revision"] == 2 and revised["expect"] == EXPECT_LOOKUP
    assert revised["updatedAt"] == "2026-12-06T03:00:00Z" != case["updatedAt"]
    assert revised["addedAt"] == case["addedAt"]
    assert ok(api.get(f"{CASES}/{case['id']}"))["expect"] == EXPECT_LOOKUP
    history = ok(api.get(f"{CASES}/{case['id']}/revisions"))["data"]
    assert history == [
        {
            "revision": 2,
            "expect": EXPECT_LOOKUP,
            "note": "The product now looks it up.",
            "by": {"kind": "user", "id": "u-admin"},
            "at": "2026-12-06T03:00:00Z",
        },
        {"revision": 1, "expect": EXPECT_RIGHT, "by": case["addedBy"], "at": case["addedAt"]},
    ]
    again = ok(revise(api, case["id"], '"r2"', note="Back.", **RIGHT))
    assert again["revision"] == 3
    listed = ok(api.get(f"{CASES}/{case['id']}/revisions"))["data"]
    assert [r["revision"] for r in listed] == [3, 2, 1]


def test_a_case_never_revised_lists_its_first_revision_from_the_case(api):
    case = ok(api.get(f"{CASES}/case-2"))
    history = ok(api.get(f"{CASES}/case-2/revisions"))["data"]
    assert history == [
        {"revision": 1, "expect": case["expect"], "by": case["addedBy"], "at": case["addedAt"]}
    ]


def test_a_correction_is_revised_like_a_hand_case(api):
    revised = ok(revise(api, "cor-1", note="Either is fine.", **RIGHT))
    assert revised["kind"] == "correction" and revised["expect"] == EXPECT_RIGHT
    assert ok(api.get(f"{V}/test-set/cases/cor-1"))["revision"] == 2


@pytest.mark.parametrize(
    ("why", "case_id", "etag", "as_", "body", "status", "code"),
    [
        ("no If-Match", "case-2", None, "admin", {"note": "n", **RIGHT}, 428, "if-match-required"),
        ("a stale ETag", "case-2", '"r7"', "admin", {"note": "n", **RIGHT}, 412, "case-changed"),
        ("the same expectation", "case-2", '"r1"', "admin",
         {"note": "n", "items": [{"key": "k1", "verdict": "right"}]}, 409, "no-change"),
        ("a retired case", "case-1", '"r1"', "admin", {"note": "n", **LOOKUP}, 409, "case-retired"),
        ("no note", "case-2", '"r1"', "admin", dict(RIGHT), 400, "bad-input"),
        ("an empty note", "case-2", '"r1"', "admin", {"note": "", **RIGHT}, 400, "bad-input"),
        ("a runId", "case-2", '"r1"', "admin", {"note": "n", "runId": "run-1", **RIGHT}, 400,
         "bad-input"),
        ("no part", "case-2", '"r1"', "admin", {"note": "n"}, 400, "bad-input"),
        ("a pointer into nothing", "case-2", '"r1"', "admin",
         {"note": "n", "items": [{"key": "k", "pointer": "/nope", "verdict": "right"}]}, 400,
         "item-not-found"),
        ("a reader", "case-2", '"r1"', "reader", {"note": "n", **RIGHT}, 403, "forbidden"),
        ("another tenant's case", "cor-g", '"r1"', "admin", {"note": "n", **RIGHT}, 404,
         "case-not-found"),
        ("another tenant asking", "case-2", '"r1"', "globex", {"note": "n", **RIGHT}, 404,
         "case-not-found"),
        ("a case that does not exist", "case-nope", '"r1"', "admin", {"note": "n", **RIGHT}, 404,
         "case-not-found"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)  # fmt: skip
def test_a_refused_revision_changes_nothing(
    api, unchanged, why, case_id, etag, as_, body, status, code
):
    with unchanged():
        err = refused(revise(api, case_id, etag, as_=as_, **body), status, code)
    if code == "case-changed":
        assert err["details"] == {"revision": 1}
    if code == "bad-input":
        assert err["details"]["fields"]


def test_another_tenant_never_sees_a_cases_revisions(api):
    refused(api.get(f"{CASES}/case-2/revisions", as_="globex"), 404, "case-not-found")
    refused(api.get(f"{CASES}/cor-g/revisions"), 404, "case-not-found")
    refused(api.get(f"{CASES}/case-2/revisions", as_="nobody"), 403, "forbidden")


def test_a_retried_revision_with_its_key_answers_the_first_answer(api):
    headers = {"If-Match": '"r1"', "Idempotency-Key": "revise-once"}
    body = {"note": "n", **LOOKUP}
    first = api.post(f"{CASES}/case-2/revise", body, headers=headers)
    again = api.post(f"{CASES}/case-2/revise", body, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_data() == first.get_data()
    assert ok(api.get(f"{CASES}/case-2"))["revision"] == 2


def test_a_revision_changes_what_the_case_is_found_by_but_not_the_counts(api):
    counts = ok(api.get(f"{V}/test-set?projectId={P1}"))
    ok(revise(api, "case-2", note="n", **LOOKUP))
    assert ok(api.get(f"{V}/test-set?projectId={P1}")) == counts
    found = ok(api.get(f"{CASES}?projectId={P1}&tool=lookup"))["data"]
    assert "case-2" in [c["id"] for c in found]
    assert ok(api.get(f"{CASES}?projectId={P1}&q=k1"))["data"] == []


def test_a_frozen_version_keeps_grading_with_the_expectation_it_froze(api):
    case = add(api)
    first = start(api)  # v1 freezes the case at revision 1: calling `search` passes
    ok(revise(api, case["id"], note="It must look it up now.", **LOOKUP))
    second = start(api)
    assert (first["version"], second["version"]) == ("v1", "v2")
    assert graded(api, first, case["id"]) == "pass"
    assert graded(api, second, case["id"]) == "fail"
    result = ok(api.get(f"{RUNS}/{first['id']}/results/{case['id']}"))
    assert result["expect"] == EXPECT_RIGHT
    second_result = ok(api.get(f"{RUNS}/{second['id']}/results/{case['id']}"))
    assert second_result["expect"] == EXPECT_LOOKUP
    diff = ok(api.get(f"{V}/test-set/versions/v2/diff/v1?projectId={P1}"))
    assert diff["counts"] == {"added": 0, "removed": 0, "changed": 1}
    assert diff["data"] == [
        {"caseId": case["id"], "change": "changed", "kind": "hand", "expert": True}
    ]
    only = ok(api.get(f"{V}/test-set/versions/v2/diff/v1?projectId={P1}&change=added"))
    assert only["data"] == [] and only["counts"]["changed"] == 1
    pairs = ok(api.get(f"{RUNS}/{second['id']}/compare/{first['id']}?limit=100"))["data"]
    changed = {pair["caseId"]: pair.get("caseChanged") for pair in pairs}
    assert changed == {case["id"]: True, "cor-1": None, "case-2": None}
    frozen = exported(api, "&version=v1")[case["id"]]
    assert (frozen["revision"], frozen["expect"]) == (1, EXPECT_RIGHT)
    assert exported(api)[case["id"]]["revision"] == 2


def exported(api, more: str = "") -> dict[str, Any]:
    """The set's export as JSON lines, each case by id."""
    text = api.get(f"{V}/test-set/export?projectId={P1}{more}").get_data(as_text=True)
    return {case["id"]: case for case in map(json.loads, text.splitlines())}


def test_a_run_of_an_unrevised_version_needs_no_new_version(api):
    first = start(api)
    assert start(api)["version"] == first["version"]
    ok(revise(api, "case-2", note="n", **LOOKUP))
    assert start(api)["version"] == "v2"


def test_the_runner_sees_the_parts_its_version_froze(api):
    case = add(api)
    run = start(api)
    ok(revise(api, case["id"], note="n", items=[{"key": "k", "verdict": "right"}]))
    cases = ok(api.get(f"{RUNS}/{run['id']}/cases?limit=100"))["data"]
    assert {c["caseId"]: c["parts"] for c in cases}[case["id"]] == ["decisions"]


# ---------------------------------------------------------------- the revise form


def test_the_revise_form_is_prefilled_shows_the_change_then_saves_it(app, client, api):
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    page = f"/agents/{AGENT}/test-set/cases/case-2/revise"
    assert "Revise the expectation" in client.get(f"/agents/{AGENT}/test-set/cases/case-2").text
    form = client.get(page).text
    assert "&#34;items&#34;" in form or '"items"' in form  # prefilled with what it expects
    token = csrf_of(client, page)
    new = json.dumps({"answer": "wrong", "shouldSay": "Thirty days."})
    data = {"csrf_token": token, "etag": '"r1"', "expect": new, "note": "Typo."}
    shown = client.post(page, data={**data, "action": "preview"})
    assert shown.status_code == 200
    assert '<span class="add">+   &#34;answer&#34;: &#34;wrong&#34;,' in shown.text
    assert '<span class="del">-   &#34;items&#34;: [' in shown.text
    assert "Save the revision" in shown.text
    assert ok(api.get(f"{CASES}/case-2"))["revision"] == 1  # nothing saved yet
    saved = client.post(page, data={**data, "action": "save"})
    assert saved.status_code == 303
    case = ok(api.get(f"{CASES}/case-2"))
    assert case["revision"] == 2 and case["expect"]["answer"]["shouldSay"] == "Thirty days."
    stale = client.post(page, data={**data, "action": "save"})  # the form read at r1
    assert stale.status_code == 412 and "revised since" in stale.text
    bad = client.post(page, data={**data, "expect": "{", "action": "preview"})
    assert bad.status_code == 400 and "Not valid JSON." in bad.text


def test_a_failing_case_of_a_run_offers_to_revise_it_taking_the_candidates_calls(client, api):
    case = add(api, **LOOKUP)
    run = start(api)
    assert graded(api, run, case["id"]) == "fail"  # the candidate called `search`
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    shown = client.get(f"/agents/{AGENT}/test-runs/{run['id']}/results/{case['id']}").text
    taking = f"/agents/{AGENT}/test-set/cases/{case['id']}/revise?takeCallsFrom={run['id']}"
    assert taking in shown.replace("&amp;", "&")
    form = client.get(taking).text
    prefilled = json.loads(form.split('name="expect"')[1].split(">", 1)[1].split("</textarea>")[0]
                           .replace("&#34;", '"').replace("&quot;", '"'))  # fmt: skip
    assert prefilled == {"decisions": "wrong", "shouldCall": SEARCHING}
    client.post("/logout", data={"csrf_token": csrf_of(client, "/")})
    sign_in(client, "reader@acme.test", "reader-pass-1")  # may read the run, not revise
    read = client.get(f"/agents/{AGENT}/test-runs/{run['id']}/results/{case['id']}").text
    assert "Revise" not in read and "Retire the case" not in read
