"""One case and its life: reading it with its snapshot, retiring and restoring it, and how runs,
corrections and tokens arrive (docs/design.md §1, §2 and §6). Every refused write changes nothing.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from conftest import AGENT, MULTI, P1, P2, P3, PG, WORLD, ok, refused, same_error

NOW = datetime(2026, 12, 1, 9, 30, 15, 250000)
NOW_TEXT = "2026-12-01T09:30:15.250Z"
RUNS = {r["id"]: r for r in WORLD["runs"]}
CONTENT = ("input", "output", "calls")
PUBLISHER = {"kind": "user", "id": "u-publisher"}
RIGHT = {"answer": "right"}
CASES = f"/v1/agents/{AGENT}/test-set/cases"


def case_url(case_id: str, agent: str = AGENT) -> str:
    return f"/v1/agents/{agent}/test-set/cases/{case_id}"


def counts(api, agent: str = AGENT, project: str = P1) -> dict[str, int]:
    return ok(api.get(f"/v1/agents/{agent}/test-set?projectId={project}"))["cases"]


def listed(api, agent: str = AGENT, project: str = P1) -> list[str]:
    url = f"/v1/agents/{agent}/test-set/cases?projectId={project}&include=retired&limit=100"
    return [c["id"] for c in ok(api.get(url))["data"]]


def record_run(api, as_: str = "writer", agent: str = AGENT, **body: Any) -> dict[str, Any]:
    run = {
        "projectId": P1,
        "version": "1.1.0",
        "status": "finished",
        "input": {"q": "Draft a notice"},
        "output": {"answer": "Clause 9.", "matches": [{"id": "m0"}]},
        "calls": [{"tool": "search", "args": {"q": "notice"}}],
        **body,
    }
    return ok(api.post(f"/v1/agents/{agent}/runs", run, as_=as_), 201)


# ---------------------------------------------------------------- one case


def test_a_case_is_shown_as_listed_with_its_runs_snapshot(api):
    in_list = {c["id"]: c for c in ok(api.get(f"{CASES}?projectId={P1}&include=retired"))["data"]}
    for case_id, run in [("cor-1", "run-1"), ("case-2", "run-2"), ("case-1", "run-1")]:
        body = ok(api.get(case_url(case_id), as_="reader"))
        snapshot = body.pop("snapshot")
        assert body == in_list[case_id]
        assert {k: snapshot[k] for k in CONTENT} == {k: RUNS[run][k] for k in CONTENT}


def test_every_case_of_a_run_shares_the_snapshot_its_first_case_took(api):
    new = ok(api.post(CASES, {"runId": "run-1", "answer": "right"}), 201)
    snapshots = [ok(api.get(case_url(c)))["snapshot"] for c in ("cor-1", "case-1", new["id"])]
    assert snapshots[0] == snapshots[1] == snapshots[2]
    assert snapshots[0]["input"] == RUNS["run-1"]["input"]


def test_a_runs_content_comes_back_exactly_even_numbers_past_64_bits_and_any_text(api, client):
    """Answers are written by orjson, which refuses integers past 64 bits: those answers fall
    back to the standard library, so nothing a run reported comes back changed."""
    output = {"big": 2**70, "negative": -(2**65), "small": 7, "half": 0.5, "text": "é✓🦜"}
    run = record_run(api, output=output, input={"ids": [2**64, 2**63 - 1]})
    assert run["output"] == output and run["input"] == {"ids": [2**64, 2**63 - 1]}
    case = ok(api.post(CASES, {"runId": run["id"], "answer": "right"}), 201)
    raw = client.get(case_url(case["id"]), headers={"Authorization": "Bearer kgi_admin"})
    assert b"1180591620717411303424" in raw.data  # 2**70, digit for digit
    assert json.loads(raw.data)["snapshot"]["output"] == output


@pytest.mark.parametrize("case_id", ["cor-2", "cor-nope", "case-nope", "cor-g"])
def test_a_wont_fix_correction_an_unknown_id_and_another_tenants_case_are_alike_not_found(
    api, case_id
):
    unknown = refused(api.get(case_url("case-unknown")), 404, "case-not-found")
    assert same_error(refused(api.get(case_url(case_id)), 404, "case-not-found"), unknown)


def test_a_case_of_acme_is_not_found_by_globex_through_its_own_agent_of_the_same_name(api):
    theirs = refused(api.get(case_url("cor-1"), as_="globex"), 404, "case-not-found")
    assert same_error(
        theirs, refused(api.get(case_url("cor-x"), as_="globex"), 404, "case-not-found")
    )
    assert ok(api.get(case_url("cor-g"), as_="globex"))["projectId"] == PG


def test_a_case_asked_for_through_another_agent_is_not_found(api):
    refused(api.get(case_url("cor-1", MULTI)), 404, "case-not-found")


def test_a_correction_leaving_the_set_takes_its_case_with_it(api):
    ok(api.patch(f"/v1/agents/{AGENT}/corrections/cor-1", {"status": "removed"}, as_="writer"))
    refused(api.get(case_url("cor-1")), 404, "case-not-found")


def test_reading_a_case_needs_read_on_its_project(api):
    err = refused(api.get(case_url("cor-1"), as_="nobody"), 403, "forbidden")
    assert err["details"]["needs"] == [{"permission": "read", "project": P1}]


# ---------------------------------------------------------------- retire and restore


@pytest.mark.parametrize(
    ("as_", "by"),
    [
        ("publisher", PUBLISHER),
        ("admin", {"kind": "user", "id": "u-admin"}),
        ("ci", {"kind": "service", "id": "tok-ci"}),
    ],
)
def test_retiring_records_the_reason_the_caller_and_the_time(api, set_clock, as_, by):
    set_clock(NOW)
    body = ok(api.post(f"{case_url('case-2')}/retire", {"reason": "superseded"}, as_=as_))
    assert body["retired"] == {"reason": "superseded", "by": by, "at": NOW_TEXT}
    assert body["updatedAt"] == NOW_TEXT and body["addedAt"] == "2026-04-16T10:00:00Z"
    shown = ok(api.get(case_url("case-2")))
    shown.pop("snapshot")
    assert shown == body
    assert counts(api) == {"active": 1, "retired": 2}
    assert "case-2" in listed(api)


@pytest.mark.parametrize("reason", ["x", "r" * 1000, "é" * 1000])
def test_a_reason_of_1_to_1000_characters_is_kept_as_given(api, reason):
    body = ok(api.post(f"{case_url('cor-1')}/retire", {"reason": reason}, as_="publisher"))
    assert body["retired"]["reason"] == reason


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "r" * 1001},
        {"reason": "é" * 1001},
        {"reason": None},
        {"reason": 7},
        {"reason": "ok", "note": "x"},
        ["ok"],
    ],
)
def test_a_missing_empty_or_too_long_reason_is_bad_input_and_changes_nothing(api, unchanged, body):
    with unchanged():
        resp = api.post(f"{case_url('case-2')}/retire", body, as_="publisher")
    assert "fields" in refused(resp, 400, "bad-input")["details"]


def test_retiring_a_retired_case_is_a_conflict_and_changes_nothing(api, unchanged):
    with unchanged():
        resp = api.post(f"{case_url('case-1')}/retire", {"reason": "again"}, as_="publisher")
    refused(resp, 409, "case-retired")


def test_restoring_makes_the_case_active_again_updated_at_the_restore(api, set_clock):
    set_clock(NOW)
    body = ok(api.post(f"{case_url('case-1')}/restore", {}, as_="publisher"))
    assert "retired" not in body
    assert body["updatedAt"] == NOW_TEXT and body["addedAt"] == "2026-04-16T09:00:00Z"
    assert counts(api) == {"active": 3, "retired": 0}
    active = ok(api.get(f"{CASES}?projectId={P1}"))["data"]
    assert [c["id"] for c in active] == ["case-2", "case-1", "cor-1"]


@pytest.mark.parametrize("body", [{}, None])
def test_restoring_an_active_case_is_a_conflict_and_changes_nothing(api, unchanged, body):
    with unchanged():
        resp = api.post(f"{case_url('case-2')}/restore", body, as_="publisher")
    refused(resp, 409, "case-active")


def test_a_restore_with_something_to_say_is_bad_input(api, unchanged):
    with unchanged():
        resp = api.post(f"{case_url('case-1')}/restore", {"reason": "x"}, as_="publisher")
    refused(resp, 400, "bad-input")


def _publish(agent: str) -> dict[str, str]:
    return {"permission": "publish", "agent": agent}


@pytest.mark.parametrize("action", ["retire", "restore"])
@pytest.mark.parametrize(
    ("agent", "case_id", "as_", "needs"),
    [
        (AGENT, "case-2", "publisher", None),
        (AGENT, "case-2", "ci", None),
        (AGENT, "case-2", "reader", [_publish(AGENT)]),
        (AGENT, "case-2", "writer", [_publish(AGENT)]),
        (AGENT, "case-2", "nobody", [_publish(AGENT), {"permission": "read", "project": P1}]),
        (MULTI, "cor-3", "expert", None),
        (MULTI, "cor-3", "publisher", [{"permission": "write", "project": P2}]),
        (MULTI, "cor-3", "reader", [_publish(MULTI), {"permission": "write", "project": P2}]),
    ],
)
def test_retire_and_restore_need_publish_and_write_where_several_projects_serve(
    api, unchanged, action, agent, case_id, as_, needs
):
    if action == "restore":
        ok(api.post(f"{case_url(case_id, agent)}/retire", {"reason": "first"}))
    path, body = f"{case_url(case_id, agent)}/{action}", {"reason": "because"}
    if needs is None:
        assert ok(api.post(path, body if action == "retire" else {}, as_=as_))["id"] == case_id
        return
    with unchanged():
        resp = api.post(path, body if action == "retire" else {}, as_=as_)
    assert refused(resp, 403, "forbidden")["details"]["needs"] == needs


def test_publish_on_the_agent_is_not_enough_for_a_case_in_a_project_the_caller_cannot_write(
    api, unchanged
):
    run = record_run(api, "admin", MULTI, projectId=P3, version="2.0.0")
    cor = ok(api.post(f"/v1/agents/{MULTI}/runs/{run['id']}/corrections", RIGHT), 201)
    with unchanged():
        resp = api.post(f"{case_url(cor['id'], MULTI)}/retire", {"reason": "x"}, as_="expert")
    needs = [{"permission": "read", "project": P3}, {"permission": "write", "project": P3}]
    assert refused(resp, 403, "forbidden")["details"]["needs"] == needs


@pytest.mark.parametrize("action", ["retire", "restore"])
@pytest.mark.parametrize(
    ("agent", "case_id"),
    [(AGENT, "cor-2"), (AGENT, "cor-g"), (AGENT, "case-zzz"), (MULTI, "case-1")],
)
def test_retiring_or_restoring_what_is_no_case_here_is_not_found(
    api, unchanged, action, agent, case_id
):
    with unchanged():
        body = {"reason": "x"} if action == "retire" else {}
        resp = api.post(f"{case_url(case_id, agent)}/{action}", body)
    refused(resp, 404, "case-not-found")


# ---------------------------------------------------------------- runs and corrections


def test_recording_a_run_needs_write_and_answers_with_the_run(api, set_clock):
    set_clock(NOW)
    run = record_run(api, projectId=P1.upper())
    assert run["id"].startswith("run-")
    assert run == {
        "id": run["id"], "projectId": P1, "version": "1.1.0", "status": "finished",
        "input": {"q": "Draft a notice"}, "calls": [{"tool": "search", "args": {"q": "notice"}}],
        "output": {"answer": "Clause 9.", "matches": [{"id": "m0"}]}, "erased": False,
        "at": NOW_TEXT, "hasCase": False,
    }  # fmt: skip
    first = ok(api.get(f"/v1/agents/{AGENT}/runs?projectId={P1}&limit=1"))["data"]
    assert first == [run]


@pytest.mark.parametrize(
    ("as_", "body", "status", "code"),
    [
        ("reader", {}, 403, "forbidden"),
        ("publisher", {}, 403, "forbidden"),
        ("writer", {"projectId": P2}, 404, "project-not-found"),
        ("writer", {"status": "done"}, 400, "bad-input"),
        ("writer", {"id": "run-mine"}, 400, "bad-input"),  # ids are the server's to make
    ],
)
def test_a_run_refused_changes_nothing(api, unchanged, as_, body, status, code):
    with unchanged():
        resp = api.post(
            f"/v1/agents/{AGENT}/runs",
            {"projectId": P1, "version": "1.1.0", "status": "finished", **body},
            as_=as_,
        )
    refused(resp, status, code)


def test_a_correction_on_a_recorded_run_becomes_a_case_with_the_runs_snapshot(api, set_clock):
    run = record_run(api)
    set_clock(NOW)
    body = {"decisions": "wrong", "shouldCall": [{"tool": "lookup", "args": {"id": 7}}]}
    cor = ok(api.post(f"/v1/agents/{AGENT}/runs/{run['id']}/corrections", body, as_="writer"), 201)
    expect = {
        "decisions": {"verdict": "wrong", "shouldCall": [{"tool": "lookup", "args": {"id": 7}}]}
    }
    assert cor["id"].startswith("cor-") and cor == {
        "id": cor["id"], "runId": run["id"], "projectId": P1, "status": "open",
        "restricted": False, "expect": expect, "by": {"kind": "user", "id": "u-writer"},
        "at": NOW_TEXT,
    }  # fmt: skip
    case = ok(api.get(case_url(cor["id"])))
    assert case["kind"] == "correction" and case["expect"] == expect and "expert" not in case
    assert case["addedAt"] == case["updatedAt"] == NOW_TEXT and case["madeOn"] == "1.1.0"
    assert {k: case["snapshot"][k] for k in CONTENT} == {k: run[k] for k in CONTENT}
    assert counts(api) == {"active": 3, "retired": 1}
    assert listed(api)[0] == cor["id"]


@pytest.mark.parametrize(("group", "expert"), [("grp-restricted", True), ("grp-open", False)])
def test_a_correction_in_a_restricted_group_makes_an_experts_case(api, group, expert):
    url = f"/v1/agents/{MULTI}/runs/run-multi/corrections"
    cor = ok(api.post(url, {"answer": "right", "group": group}, as_="expert"), 201)
    assert cor["restricted"] is expert and cor["group"] == group
    assert ok(api.get(case_url(cor["id"], MULTI))).get("expert", False) is expert
    assert counts(api, MULTI, P2) == {"active": 2, "retired": 0}


@pytest.mark.parametrize(
    ("agent", "run", "as_", "body", "status", "code"),
    [
        (AGENT, "run-running", "writer", RIGHT, 409, "run-not-finished"),
        (AGENT, "run-erased", "writer", RIGHT, 410, "run-erased"),
        (AGENT, "run-replay", "writer", RIGHT, 400, "run-is-replay"),
        (AGENT, "run-globex", "admin", RIGHT, 404, "run-not-found"),
        (AGENT, "run-nope", "admin", RIGHT, 404, "run-not-found"),
        (AGENT, "run-multi", "admin", RIGHT, 400, "run-not-of-agent"),
        (AGENT, "run-1", "reader", RIGHT, 403, "forbidden"),
        (MULTI, "run-multi", "publisher", RIGHT, 403, "forbidden"),
        (AGENT, "run-1", "writer", {"answer": "maybe"}, 400, "bad-input"),
        (AGENT, "run-1", "writer", {**RIGHT, "group": "grp-restricted"}, 400, "bad-input"),
    ],
)
def test_a_correction_refused_changes_nothing(api, unchanged, agent, run, as_, body, status, code):
    with unchanged():
        resp = api.post(f"/v1/agents/{agent}/runs/{run}/corrections", body, as_=as_)
    refused(resp, status, code)


def test_changing_a_corrections_status_answers_with_the_correction(api):
    patch = {"status": "with-the-owner"}
    body = ok(api.patch(f"/v1/agents/{AGENT}/corrections/cor-1", patch, as_="writer"))
    assert body["id"] == "cor-1" and body["status"] == "with-the-owner"


@pytest.mark.parametrize(
    ("correction", "as_", "body", "status", "code"),
    [
        ("cor-1", "writer", {"status": "closed"}, 400, "bad-input"),
        ("cor-1", "writer", {"status": "Open"}, 400, "bad-input"),
        ("cor-1", "writer", {}, 400, "bad-input"),
        ("cor-1", "writer", {"status": None}, 400, "bad-input"),
        ("cor-1", "writer", {"status": "fixed", "note": "x"}, 400, "bad-input"),
        ("cor-1", "reader", {"status": "fixed"}, 403, "forbidden"),
        ("cor-1", "publisher", {"status": "fixed"}, 403, "forbidden"),
        ("case-2", "writer", {"status": "fixed"}, 404, "correction-not-found"),
        ("cor-g", "admin", {"status": "fixed"}, 404, "correction-not-found"),
    ],
)
def test_a_status_change_refused_changes_nothing(
    api, unchanged, correction, as_, body, status, code
):
    with unchanged():
        resp = api.patch(f"/v1/agents/{AGENT}/corrections/{correction}", body, as_=as_)
    err = refused(resp, status, code)
    if status == 403:
        assert err["details"]["needs"] == [{"permission": "write", "project": P1}]


# ---------------------------------------------------------------- tokens


def test_a_new_token_shows_its_secret_once_and_works(api, set_clock):
    set_clock(NOW)
    token = ok(api.post("/v1/tokens", {"name": "laptop"}, as_="reader"), 201)
    assert set(token) == {"id", "name", "secret", "createdAt", "expiresAt"}
    assert token["name"] == "laptop" and token["createdAt"] == NOW_TEXT
    assert token["expiresAt"] is None and token["secret"].startswith("kgi_")
    resp = api.get("/v1/tokens", as_=token["secret"])
    listing = ok(resp)["data"]
    assert token["id"] in [t["id"] for t in listing] and "tok-reader" in [t["id"] for t in listing]
    assert all("secret" not in t for t in listing) and token["secret"] not in resp.text
    ok(api.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}", as_=token["secret"]))


def test_a_new_tokens_answer_is_not_replayed_with_its_secret(api):
    headers = {"Idempotency-Key": "new-token-1"}
    first = ok(api.post("/v1/tokens", {"name": "ci"}, as_="reader", headers=headers), 201)
    again = api.post("/v1/tokens", {"name": "ci"}, as_="reader", headers=headers)
    refused(again, 409, "idempotency-key-replay-withheld")
    assert first["secret"] not in again.text


def test_a_revoked_token_is_unauthenticated(api):
    token = ok(api.post("/v1/tokens", {"name": "old"}, as_="writer"), 201)
    assert api.delete(f"/v1/tokens/{token['id']}", as_="writer").status_code == 204
    resp = api.get("/v1/tokens", as_=token["secret"])
    refused(resp, 401, "unauthenticated")
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    shown = {t["id"]: t for t in ok(api.get("/v1/tokens", as_="writer"))["data"]}
    assert "revokedAt" in shown[token["id"]] and "revokedAt" not in shown["tok-writer"]


def test_deleting_someone_elses_token_is_not_found_like_an_unknown_one(api, unchanged):
    with unchanged():
        theirs = refused(api.delete("/v1/tokens/tok-admin", as_="reader"), 404, "not-found")
        unknown = refused(api.delete("/v1/tokens/tok-nope", as_="reader"), 404, "not-found")
    assert same_error(theirs, unknown)
    ok(api.get("/v1/tokens", as_="admin"))


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "expiresAt": "2020-01-01T00:00:00Z"},
        {"name": "x", "expiresAt": "2031-01-01"},
        {"name": "x", "expiresAt": "2031-01-01T00:00:00"},
        {"name": ""},
        {},
    ],
)
def test_a_token_expiring_in_the_past_or_unnamed_is_bad_input(api, unchanged, body):
    with unchanged():
        resp = api.post("/v1/tokens", body, as_="reader")
    refused(resp, 400, "bad-input")


def test_a_token_with_an_expiry_stops_working_then(api, set_clock):
    set_clock(NOW)
    expires = "2026-12-01T10:30:15.250Z"
    token = ok(api.post("/v1/tokens", {"name": "brief", "expiresAt": expires}, as_="reader"), 201)
    assert token["expiresAt"] == expires
    set_clock(NOW + timedelta(hours=1) - timedelta(milliseconds=1))
    ok(api.get("/v1/tokens", as_=token["secret"]))
    set_clock(NOW + timedelta(hours=1))
    refused(api.get("/v1/tokens", as_=token["secret"]), 401, "unauthenticated")
