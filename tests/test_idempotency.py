"""Idempotency-Key through HTTP (docs/design.md §5; the header's text in
docs/reference/add-case.md is the contract).

The last test runs a real gunicorn with four worker processes on the test's database.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
import requests
from conftest import AGENT, MULTI, P1, TOKENS, error_of, snapshot_db
from live import gunicorn
from sqlalchemy import text, update

from kindgi import create_app, idempotency, service
from kindgi.database import db
from kindgi.models import IdempotencyRecord

CASES = f"/v1/agents/{AGENT}/test-set/cases"
COUNTS = f"/v1/agents/{AGENT}/test-set?projectId={P1}"
BODY = {"runId": "run-1", "answer": "right"}
RAW = json.dumps(BODY)  # sent as these exact bytes wherever a test computes the fingerprint


# ---------------------------------------------------------------- helpers


def post_case(api, key: str, *, as_: str = "admin", raw: str = RAW, path: str = CASES):
    return api.post(
        path, data=raw, content_type="application/json", as_=as_,
        headers={"Idempotency-Key": key},
    )  # fmt: skip


def active(api) -> int:
    resp = api.get(COUNTS)
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()["cases"]["active"]


def case_ids(api) -> set[str]:
    resp = api.get(f"{CASES}?projectId={P1}&include=retired&limit=100")
    assert resp.status_code == 200, resp.get_json()
    return {case["id"] for case in resp.get_json()["data"]}


def assert_replay(first, again) -> None:
    """`again` is `first` replayed: same status, type, Location and bytes; new request id."""
    assert "Idempotent-Replayed" not in first.headers
    assert again.status_code == first.status_code
    assert again.data == first.data
    assert again.content_type == first.content_type
    assert again.headers.get("Location") == first.headers.get("Location")
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["X-Request-Id"] not in ("", first.headers["X-Request-Id"])


def assert_retry_after(resp) -> None:
    assert resp.headers["Retry-After"].isdigit(), resp.headers


def sql(app, statement: str, **params) -> None:
    with app.app_context(), db.engine.begin() as conn:
        conn.execute(text(statement), params)


def claim(app, key: str, *, as_: str = "admin", raw: str = RAW) -> None:
    """Claim `key` as a first request that is still running (its handler never finished)."""
    with app.test_request_context(CASES, method="POST", data=raw, content_type="application/json"):
        caller = service.authenticate(f"Bearer {TOKENS[as_]}")
        assert idempotency.claim_key(caller.scope, key, idempotency.fingerprint()) is None


# ---------------------------------------------------------------- replay


def test_retries_get_the_first_answer_byte_for_byte_and_make_exactly_one_case(api):
    before_ids, before_active = case_ids(api), active(api)
    first = post_case(api, "k-replay")
    assert first.status_code == 201, first.get_json()
    assert first.headers["Location"].endswith(first.get_json()["id"])
    for _ in range(3):
        assert_replay(first, post_case(api, "k-replay"))
    assert active(api) == before_active + 1
    assert case_ids(api) - before_ids == {first.get_json()["id"]}


@pytest.mark.parametrize(
    ("path", "raw", "method"),
    [
        (CASES, json.dumps({"runId": "run-2", "answer": "right"}), "POST"),  # another body
        (CASES, json.dumps(BODY, indent=1), "POST"),  # same JSON, other bytes
        (f"/v1/agents/{MULTI}/test-set/cases", RAW, "POST"),  # another path
        (f"{CASES}?projectId={P1}", RAW, "POST"),  # another query string
        (f"/v1/agents/{AGENT}/corrections/cor-1", '{"status": "fixed"}', "PATCH"),
    ],
    ids=["body", "body-bytes", "path", "query", "method"],
)
def test_the_same_key_for_a_different_request_is_422_and_changes_nothing(
    api, app, path, raw, method
):
    first = post_case(api, "k-mismatch")
    assert first.status_code == 201
    before = snapshot_db(app)  # the kept answer included: it must not move either
    resp = api.call(
        method, path, data=raw, content_type="application/json",
        headers={"Idempotency-Key": "k-mismatch"},
    )  # fmt: skip
    assert resp.status_code == 422, resp.get_json()
    assert error_of(resp)["code"] == "idempotency-key-mismatch"
    assert snapshot_db(app) == before
    assert_replay(first, post_case(api, "k-mismatch"))


# ---------------------------------------------------------------- whose key it is


@pytest.mark.parametrize("other", ["publisher", "ci"])
def test_another_principal_using_the_same_key_gets_their_own_request(api, other):
    before = active(api)
    mine = post_case(api, "k-shared")
    theirs = post_case(api, "k-shared", as_=other)
    assert (mine.status_code, theirs.status_code) == (201, 201), theirs.get_json()
    assert "Idempotent-Replayed" not in theirs.headers
    assert theirs.get_json()["id"] != mine.get_json()["id"]
    assert theirs.get_json()["addedBy"] != mine.get_json()["addedBy"]
    assert active(api) == before + 2


def test_the_same_user_through_another_of_their_tokens_gets_the_replay(api):
    made = api.post("/v1/tokens", json={"name": "laptop"})
    assert made.status_code == 201, made.get_json()
    before = active(api)
    first = post_case(api, "k-mine")
    assert first.status_code == 201
    assert_replay(first, post_case(api, "k-mine", as_=made.get_json()["secret"]))
    assert active(api) == before + 1


# ---------------------------------------------------------------- which answers are kept


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (json.dumps({"runId": "run-running", "answer": "right"}), 409, "run-not-finished"),
        (json.dumps({"runId": "run-1"}), 400, "bad-input"),
    ],
)
def test_a_refusal_is_kept_and_replayed(api, raw, status, code):
    first = post_case(api, "k-refused", raw=raw)
    assert first.status_code == status
    assert error_of(first)["code"] == code
    again = post_case(api, "k-refused", raw=raw)
    assert_replay(first, again)
    assert again.get_json()["error"]["requestId"] == first.headers["X-Request-Id"]


def test_a_kept_refusal_is_replayed_even_once_its_reason_is_gone(api, app):
    raw = json.dumps({"runId": "run-running", "answer": "right"})
    first = post_case(api, "k-stale", raw=raw)
    assert first.status_code == 409
    sql(app, "UPDATE runs SET status = 'finished', output = '{}' WHERE id = 'run-running'")
    before = active(api)
    assert_replay(first, post_case(api, "k-stale", raw=raw))
    assert active(api) == before
    assert post_case(api, "k-fresh", raw=raw).status_code == 201  # a new key does run


def test_a_401_is_not_kept_so_the_key_stays_free(api, app):
    refused = post_case(api, "k-401", as_="kgi_expired")  # an expired token of u-admin's
    assert refused.status_code == 401
    assert snapshot_db(app)["idempotency_keys"] == []
    resp = post_case(api, "k-401")
    assert resp.status_code == 201, resp.get_json()
    assert "Idempotent-Replayed" not in resp.headers


def test_a_new_tokens_answer_is_withheld_on_retry_and_its_secret_is_stored_nowhere(api, app):
    count = len(api.get("/v1/tokens").get_json()["data"])
    made = api.post("/v1/tokens", json={"name": "ci-bot"}, headers={"Idempotency-Key": "k-tok"})
    assert made.status_code == 201, made.get_json()
    secret, created_at = made.get_json()["secret"], made.get_json()["createdAt"]

    again = api.post("/v1/tokens", json={"name": "ci-bot"}, headers={"Idempotency-Key": "k-tok"})
    assert again.status_code == 409
    err = error_of(again)
    assert err["code"] == "idempotency-key-replay-withheld"
    assert err["details"]["status"] == 201
    succeeded = datetime.fromisoformat(err["details"]["succeededAt"].replace("Z", "+00:00"))
    assert succeeded >= datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    assert secret not in again.get_data(as_text=True)
    assert len(api.get("/v1/tokens").get_json()["data"]) == count + 1

    assert secret not in repr(snapshot_db(app))
    assert secret[len("kgi_") :] not in repr(snapshot_db(app))


# ---------------------------------------------------------------- claims in flight


def test_a_retry_while_the_first_request_runs_is_409_in_flight_with_retry_after(api, app):
    claim(app, "k-busy")
    before = snapshot_db(app)
    resp = post_case(api, "k-busy")
    assert resp.status_code == 409, resp.get_json()
    assert error_of(resp)["code"] == "idempotency-key-in-flight"
    assert_retry_after(resp)
    assert snapshot_db(app) == before  # the 409 is not kept, the claim not touched


@pytest.fixture
def zero_lease_app(app, tmp_path):
    """A second app on the same database whose claims expire at once."""
    config = {"TESTING": True, "SECRET_KEY": "test-secret", "IDEMPOTENCY_LEASE_SECONDS": 0}
    other = create_app({**config, "SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"]})
    yield other
    with other.app_context():
        db.engine.dispose()


@pytest.mark.parametrize("how", ["row-edited", "zero-lease"])
def test_a_claim_whose_lease_ran_out_is_taken_over(api, app, zero_lease_app, how):
    if how == "zero-lease":
        claim(zero_lease_app, "k-dead")
    else:
        claim(app, "k-dead")
        with app.app_context():
            db.session.execute(update(IdempotencyRecord).values(lease_until=datetime(2000, 1, 1)))
            db.session.commit()
    before_ids = case_ids(api)
    taken = post_case(api, "k-dead")
    assert taken.status_code == 201, taken.get_json()
    assert_replay(taken, post_case(api, "k-dead"))
    assert case_ids(api) - before_ids == {taken.get_json()["id"]}


def test_an_unreadable_key_store_is_503_and_nothing_runs(api, app):
    sql(app, "ALTER TABLE idempotency_keys RENAME TO idempotency_keys_away")
    before = snapshot_db(app)
    resp = post_case(api, "k-store")
    assert resp.status_code == 503, resp.get_json()
    assert error_of(resp)["code"] == "idempotency-store-unavailable"
    assert_retry_after(resp)
    assert snapshot_db(app) == before

    sql(app, "ALTER TABLE idempotency_keys_away RENAME TO idempotency_keys")
    before_active = active(api)
    retry = post_case(api, "k-store")
    assert retry.status_code == 201, retry.get_json()
    assert_replay(retry, post_case(api, "k-store"))
    assert active(api) == before_active + 1


# ---------------------------------------------------------------- other methods, bad keys


def test_a_patch_with_a_key_is_replayed_not_run_again(api):
    path, before = f"/v1/agents/{AGENT}/corrections/cor-1", active(api)
    key = {"Idempotency-Key": "k-patch"}
    first = api.patch(path, json={"status": "wont-fix"}, headers=key)
    assert first.status_code == 200, first.get_json()
    assert active(api) == before - 1
    assert api.patch(path, json={"status": "open"}).status_code == 200  # no key: it runs
    assert active(api) == before
    assert_replay(first, api.patch(path, json={"status": "wont-fix"}, headers=key))
    assert active(api) == before  # the replay changed nothing


def test_a_delete_with_a_key_is_replayed(api):
    token_id = api.post("/v1/tokens", json={"name": "old"}).get_json()["id"]
    key = {"Idempotency-Key": "k-delete"}
    first = api.delete(f"/v1/tokens/{token_id}", headers=key)
    assert first.status_code == 204
    assert_replay(first, api.delete(f"/v1/tokens/{token_id}", headers=key))


@pytest.mark.parametrize("key", ["", "k" * 256], ids=["empty", "256-chars"])
def test_a_key_that_is_empty_or_over_255_characters_is_400(api, app, key):
    before = snapshot_db(app)
    resp = post_case(api, key)
    assert resp.status_code == 400, resp.get_json()
    err = error_of(resp)
    assert err["code"] == "bad-input"
    assert "Idempotency-Key" in err["details"]["fields"]
    assert snapshot_db(app) == before


def test_a_key_of_255_characters_is_accepted(api):
    first = post_case(api, "k" * 255)
    assert first.status_code == 201, first.get_json()
    assert_replay(first, post_case(api, "k" * 255))


# ---------------------------------------------------------------- at the same time


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


def summary(status: int, headers, body: bytes) -> dict:
    return {
        "status": status,
        "replayed": headers.get("Idempotent-Replayed") == "true",
        "body": body,
        "location": headers.get("Location"),
        "retry_after": headers.get("Retry-After"),
        "request_id": headers.get("X-Request-Id"),
    }


def check_simultaneous(answers: list[dict], new_ids: set[str]) -> None:
    """Exactly one request ran and made the one new case; every other one is its replay or
    a 409 in flight; every answer has its own request id."""
    ran = [a for a in answers if a["status"] == 201 and not a["replayed"]]
    assert len(ran) == 1, [(a["status"], a["body"][:200]) for a in answers]
    assert new_ids == {json.loads(ran[0]["body"])["id"]}
    for a in answers:
        if a["status"] == 201 and a is not ran[0]:
            assert a["replayed"], a
            assert (a["body"], a["location"]) == (ran[0]["body"], ran[0]["location"])
        elif a["status"] != 201:
            assert a["status"] == 409, a
            assert json.loads(a["body"])["error"]["code"] == "idempotency-key-in-flight"
            assert (a["retry_after"] or "").isdigit(), a
    assert len({a["request_id"] for a in answers}) == len(answers)


def test_simultaneous_requests_with_one_key_in_threads_make_exactly_one_case(app, api):
    before, n = case_ids(api), 12
    barrier = threading.Barrier(n)

    def send(_):
        client = app.test_client()
        barrier.wait(timeout=10)
        headers = {**auth("admin"), "Idempotency-Key": "k-threads"}
        resp = client.post(CASES, data=RAW, content_type="application/json", headers=headers)
        return summary(resp.status_code, resp.headers, resp.data)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(send, range(n), timeout=60))
    check_simultaneous(answers, case_ids(api) - before)


@pytest.fixture
def server(app, tmp_path):
    """gunicorn, 4 worker processes, on the test's database (loaded by `app`); always killed."""
    with gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], tmp_path / "gunicorn.log") as base:
        yield base


def same_key_rounds(server: str, rounds: int, n: int, tag: str) -> list[dict[str, Any]]:
    """`rounds` rounds of `n` simultaneous POSTs of one case with one fresh key each, from
    threads across the server's workers; each round checked as `check_simultaneous` says.
    The answer of the request that ran, for each round."""
    listing = f"{server}{CASES}?projectId={P1}&include=retired&limit=100"

    def ids() -> set[str]:
        resp = requests.get(listing, headers=auth("admin"), timeout=30)
        assert resp.status_code == 200, resp.text
        return {case["id"] for case in resp.json()["data"]}

    ran = []
    for round_ in range(rounds):
        key = f"k-{tag}-{round_}-{uuid.uuid4().hex}"
        headers = {**auth("admin"), "Idempotency-Key": key, "Content-Type": "application/json"}
        barrier = threading.Barrier(n)

        def send(_, headers=headers, barrier=barrier):
            barrier.wait(timeout=30)
            resp = requests.post(server + CASES, data=RAW, headers=headers, timeout=60)
            return summary(resp.status_code, resp.headers, resp.content)

        before = ids()
        with ThreadPoolExecutor(n) as pool:
            answers = list(pool.map(send, range(n), timeout=120))
        check_simultaneous(answers, ids() - before)
        ran.append({**next(a for a in answers if a["status"] == 201 and not a["replayed"]),
                    "headers": headers})  # fmt: skip
    return ran


def test_simultaneous_requests_across_worker_processes_make_exactly_one_case(server):
    for ran in same_key_rounds(server, rounds=5, n=20, tag="round"):
        later = requests.post(server + CASES, data=RAW, headers=ran["headers"], timeout=30)
        assert (later.status_code, later.content) == (201, ran["body"])
        assert later.headers["Idempotent-Replayed"] == "true"


# ---------------------------------------------------------------- under real load and faults


def test_twenty_rounds_of_fifty_simultaneous_same_key_posts_across_workers_make_one_case_each(
    server,
):
    assert len(same_key_rounds(server, rounds=20, n=50, tag="fifty")) == 20


STALL_CONFIG = '''
import os, time

def post_worker_init(worker):
    """Requests carrying X-Test-Stall hang after their key is claimed, until killed."""
    app = worker.wsgi
    original = app.view_functions["api.add_case"]

    def stalling(*args, **kwargs):
        from flask import request
        if request.headers.get("X-Test-Stall"):
            with open(os.environ["KINDGI_TEST_STALL_FILE"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
        return original(*args, **kwargs)

    app.view_functions["api.add_case"] = stalling
'''


def test_a_claim_left_by_a_killed_worker_is_taken_over_once_its_lease_runs_out(app, tmp_path):
    config, stall_file = tmp_path / "stall.py", tmp_path / "stalled.pid"
    config.write_text(STALL_CONFIG)
    lease = 3
    env = {
        "GUNICORN_CMD_ARGS": f"--config {config}",
        "KINDGI_TEST_STALL_FILE": str(stall_file),
        "KINDGI_IDEMPOTENCY_LEASE_SECONDS": str(lease),
    }
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    with gunicorn(url, tmp_path / "gunicorn.log", **env) as base:
        headers = {
            **auth("admin"),
            "Idempotency-Key": "k-killed",
            "Content-Type": "application/json",
        }
        before = {
            c["id"]
            for c in requests.get(
                f"{base}{CASES}?projectId={P1}&limit=100", headers=auth("admin"), timeout=10
            ).json()["data"]
        }

        def first() -> None:
            with contextlib.suppress(requests.RequestException):  # its worker dies under it
                requests.post(base + CASES, data=RAW, headers={**headers, "X-Test-Stall": "1"},
                              timeout=60)  # fmt: skip

        thread = threading.Thread(target=first)
        thread.start()
        deadline = time.monotonic() + 30
        while not stall_file.exists() or not stall_file.read_text():
            assert time.monotonic() < deadline, "the first request never started"
            time.sleep(0.05)
        claimed = time.monotonic()
        busy = requests.post(base + CASES, data=RAW, headers=headers, timeout=30)
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "idempotency-key-in-flight"
        assert busy.headers["Retry-After"].isdigit()

        os.kill(int(stall_file.read_text()), signal.SIGKILL)
        thread.join(30)
        if time.monotonic() - claimed < lease - 0.5:  # the dead claim still holds its lease
            held = requests.post(base + CASES, data=RAW, headers=headers, timeout=30)
            assert held.status_code == 409, held.text

        time.sleep(max(0.0, lease + 0.5 - (time.monotonic() - claimed)))
        taken = requests.post(base + CASES, data=RAW, headers=headers, timeout=30)
        assert taken.status_code == 201, taken.text
        assert "Idempotent-Replayed" not in taken.headers
        again = requests.post(base + CASES, data=RAW, headers=headers, timeout=30)
        assert (again.status_code, again.content) == (201, taken.content)
        assert again.headers["Idempotent-Replayed"] == "true"
        after = {
            c["id"]
            for c in requests.get(
                f"{base}{CASES}?projectId={P1}&limit=100", headers=auth("admin"), timeout=10
            ).json()["data"]
        }
        assert after - before == {taken.json()["id"]}  # the killed request left nothing behind


def test_a_handler_that_raises_releases_its_key_and_changes_nothing(app, api):
    original = app.view_functions["api.add_case"]

    def raising(*args, **kwargs):
        original(*args, **kwargs)  # the case is made, then the handler fails
        raise RuntimeError("the handler broke after its change")

    app.view_functions["api.add_case"] = raising
    before = snapshot_db(app)
    resp = post_case(api, "k-raises")
    assert resp.status_code == 500, resp.get_data(as_text=True)[:300]
    assert error_of(resp)["code"] == "internal"
    assert "RuntimeError" not in resp.get_data(as_text=True)
    assert snapshot_db(app) == before  # no case, no count, and no claim left on the key

    app.view_functions["api.add_case"] = original
    retry = post_case(api, "k-raises")
    assert retry.status_code == 201, retry.get_json()
    assert "Idempotent-Replayed" not in retry.headers
    assert_replay(retry, post_case(api, "k-raises"))


def test_simultaneous_token_posts_with_one_key_make_one_token_whose_secret_is_kept_nowhere(
    app, tmp_path
):
    log = tmp_path / "gunicorn.log"
    env = {"GUNICORN_CMD_ARGS": "--access-logfile - --log-level debug"}
    with gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], log, **env) as base:
        tokens_before = len(requests.get(base + "/v1/tokens", headers=auth("admin"),
                                         timeout=10).json()["data"])  # fmt: skip
        n = 20
        barrier = threading.Barrier(n)
        headers = {**auth("admin"), "Idempotency-Key": "k-token-race"}

        def send(_):
            barrier.wait(timeout=30)
            resp = requests.post(base + "/v1/tokens", json={"name": "race"}, headers=headers,
                                 timeout=60)  # fmt: skip
            return resp.status_code, resp.json()

        with ThreadPoolExecutor(n) as pool:
            answers = list(pool.map(send, range(n), timeout=120))
        made = [body for status, body in answers if status == 201]
        assert len(made) == 1, answers
        for status, body in answers:
            if status != 201:
                assert status == 409, body
                assert body["error"]["code"] in (
                    "idempotency-key-in-flight",
                    "idempotency-key-replay-withheld",
                )
                assert "kgi_" not in json.dumps(body)
        later = requests.post(base + "/v1/tokens", json={"name": "race"}, headers=headers,
                              timeout=30)  # fmt: skip
        assert later.status_code == 409
        assert later.json()["error"]["code"] == "idempotency-key-replay-withheld"
        assert later.json()["error"]["details"]["status"] == 201
        listed = requests.get(base + "/v1/tokens", headers=auth("admin"), timeout=10).json()
        assert len(listed["data"]) == tokens_before + 1

    secret = made[0]["secret"]
    assert "POST /v1/tokens" in log.read_text()  # the access log was on
    for where in (repr(snapshot_db(app)), log.read_text()):
        assert secret not in where
        assert secret[len("kgi_") :] not in where
