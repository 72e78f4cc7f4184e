"""The judge through the task queue (docs/design.md §9.4), with real parts: the app's requests
through the Flask client, real `flask kindgi worker` processes taking the questions from the
queue (beside the database, SQLite or PostgreSQL, and Redis), and a real HTTP server speaking
OpenAI's chat completions standing in for the model.

The set: the world's cor-1 and case-2, and two answer cases on run-1 added here: RIGHT (the
corrected answer was right) and WRONG (it was wrong: it should cite clause 9). The stand-in
passes an answer that mentions clause 9 and fails any other, so the calibration question (the
corrected answer itself, "Use clause 7.") is a fail: the judge agrees with the experts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import redis
import requests
from conftest import AGENT, P1, Api, app_on, metric, ok
from databases import ENGINE, write_lock
from fake_judge import Reply, fake_judge
from live import ROOT, free_port

RUNS = f"/v1/agents/{AGENT}/test-runs"
CASES = f"/v1/agents/{AGENT}/test-set/cases"
REDIS = "redis://127.0.0.1:6379/0"


def verdicts(body: dict) -> Reply:
    """Pass what cites clause 9, fail the rest."""
    said = body["messages"][1]["content"].split("The candidate's answer:")[-1].lower()
    return Reply(verdict="pass" if "clause 9" in said else "fail", reason="checked clause 9")


def redis_answers() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@pytest.fixture(params=["database", "redis"])
def judged(request, databases, tmp_path):
    """An app with a judge (the stand-in) and a queue (beside the database, or Redis); its API
    client, its config, and a way to start workers. Without a Redis server at 6379 the Redis
    cases are skipped, except in CI (.ci/run starts one), where they fail."""
    if request.param == "redis" and not os.environ.get("CI") and not redis_answers():
        pytest.skip("no Redis server at 127.0.0.1:6379 (CI starts one)")
    with fake_judge(verdicts) as fake:
        config = {
            "JUDGE_URL": fake.url,
            "JUDGE_MODEL": "judge-1",
            "JUDGE_TIMEOUT": 2,
            "JUDGE_TRIES": 1,
            "QUEUE_NAME": f"test-{uuid.uuid4().hex[:12]}",
        }
        if request.param == "redis":
            config["QUEUE_URL"] = REDIS
        with app_on(databases, databases.clone(), **config) as app:
            api = Api(app.test_client())
            ids = {
                "RIGHT": ok(api.post(CASES, {"runId": "run-1", "answer": "right"}), 201)["id"],
                "WRONG": ok(api.post(CASES, {"runId": "run-1", "answer": "wrong",
                                             "shouldSay": "Cite clause 9."}), 201)["id"],
            }  # fmt: skip
            yield api, app, fake, ids, lambda **kw: worker(app, tmp_path, **kw)
        if request.param == "redis":
            client = redis.Redis.from_url(REDIS)
            for key in client.scan_iter(f"*{config['QUEUE_NAME']}*"):
                client.delete(key)


@contextmanager
def worker(
    app, tmp_path, metrics_port: int | None = None, **more: str
) -> Iterator[subprocess.Popen]:
    """A `flask --app app kindgi worker` process on the app's database and queue (serving its
    metrics on `metrics_port` when one is given; `more` environment besides); its output is in
    the file `proc.log_path`."""
    env = {**os.environ, "KINDGI_SECRET_KEY": "test-secret", **more}
    for name in ("SQLALCHEMY_DATABASE_URI", "JUDGE_URL", "JUDGE_MODEL", "JUDGE_TIMEOUT",
                 "JUDGE_TRIES", "QUEUE_URL", "QUEUE_NAME"):  # fmt: skip
        if app.config.get(name) is not None:
            env[f"KINDGI_{name}"] = str(app.config[name])
    log_path = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log"
    log = log_path.open("w")
    metrics = ["--metrics-port", str(metrics_port)] if metrics_port else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "app", "kindgi", "worker", "--threads", "4",
         *metrics],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    proc.log_path = log_path  # what the worker wrote, stdout and stderr
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def results(ids: dict[str, str], right: str, wrong: str) -> list[dict]:
    return [
        {"caseId": ids["RIGHT"], "output": {"answer": right}, "calls": []},
        {"caseId": ids["WRONG"], "output": {"answer": wrong}, "calls": []},
        {"caseId": "cor-1", "output": None, "calls": [{"tool": "lookup"}]},
        {"caseId": "case-2", "output": None, "calls": [], "ranked": ["k1"]},
    ]


def until_done(api, run_id: str, seconds: float = 40) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = ok(api.get(f"{RUNS}/{run_id}"))
        if run["status"] != "grading":
            return run
        time.sleep(0.2)
    raise AssertionError(f"still grading after {seconds} s: {json.dumps(run)}")


def test_answers_wait_for_the_judge_and_the_run_is_done_when_the_last_verdict_lands(judged):
    api, _, fake, ids, start_worker = judged
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    body = {"results": results(ids, "Clause 9 applies.", "Use clause 7.")}
    sent = ok(api.post(f"{RUNS}/{run['id']}/results", body))["run"]
    assert sent["status"] == "grading" and sent["cases"]["pending"] == 2
    assert sent["judge"] == {"model": "judge-1", "promptVersion": "answer-1",
                             "agreement": {"asked": 0, "agreed": 0}}  # fmt: skip
    assert fake.asked == []  # nothing is asked in the request
    with start_worker():
        done = until_done(api, run["id"])
    assert done["status"] == "done" and done["finishedAt"]
    rows = {r["caseId"]: r for r in ok(api.get(f"{RUNS}/{run['id']}/results"))["data"]}
    assert rows[ids["RIGHT"]]["outcome"] == "pass"
    assert rows[ids["WRONG"]]["outcome"] == "fail"
    assert rows[ids["WRONG"]]["parts"]["answer"] == {
        "outcome": "fail",
        "reason": "checked clause 9",
    }
    assert done["parts"]["answer"] == {
        "pass": 1,
        "fail": 1,
        "error": 0,
        "pending": 0,
        "ungraded": 0,
    }
    assert done["judge"]["agreement"] == {"asked": 1, "agreed": 1}  # the calibration question
    assert len(fake.asked) == 3  # two answers and one calibration


def test_the_same_question_is_never_asked_twice_across_runs(judged):
    api, _, fake, ids, start_worker = judged
    first = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    body = {"results": results(ids, "Clause 9 applies.", "Use clause 9 now.")}
    ok(api.post(f"{RUNS}/{first['id']}/results", body))
    with start_worker():
        until_done(api, first["id"])
    asked = len(fake.asked)
    second = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.1"}), 201)
    again = ok(api.post(f"{RUNS}/{second['id']}/results", body))["run"]
    assert again["status"] == "done"  # every answer known already: no worker needed
    assert len(fake.asked) == asked
    assert again["parts"]["answer"]["pass"] == 2 and again["judge"]["agreement"]["asked"] == 1


def test_metrics_count_results_the_queue_the_judges_calls_and_its_cache_hits(judged):
    api, _, fake, ids, start_worker = judged

    def web(name: str, **labels: str) -> float:
        return metric(api.client.get("/metrics").get_data(as_text=True), name, **labels)

    received = web("kindgi_test_run_results_total")
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    body = {"results": results(ids, "Clause 9 applies.", "Use clause 7.")}
    ok(api.post(f"{RUNS}/{run['id']}/results", body))
    assert web("kindgi_test_run_results_total") == received + 4
    assert web("kindgi_judge_questions_waiting") == 3  # two answers and a calibration
    port = free_port()
    with start_worker(metrics_port=port, KINDGI_METRICS_TOKEN="w-secret"):
        until_done(api, run["id"])
        url = f"http://127.0.0.1:{port}/metrics"
        assert requests.get(url, timeout=10).status_code == 401
        wrong = requests.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401
        scraped = requests.get(url, headers={"Authorization": "Bearer w-secret"}, timeout=10).text
    by_outcome = {o: metric(scraped, "kindgi_judge_calls_total", outcome=o) for o in
                  ("pass", "fail", "error")}  # fmt: skip
    assert sum(by_outcome.values()) == len(fake.asked) == 3 and by_outcome["error"] == 0
    assert metric(scraped, "kindgi_judge_call_duration_seconds_count") == 3
    assert web("kindgi_judge_questions_waiting") == 0
    hits = web("kindgi_judge_cache_hits_total")
    second = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.1"}), 201)
    ok(api.post(f"{RUNS}/{second['id']}/results", body))
    assert web("kindgi_judge_cache_hits_total") == hits + 3 and len(fake.asked) == 3


def test_a_judge_that_fails_leaves_errors_with_reasons_never_fails(judged):
    api, _, fake, ids, start_worker = judged
    fake.script = lambda body: Reply(status=500)
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": results(ids, "x", "y")}))
    with start_worker():
        done = until_done(api, run["id"])
    assert done["parts"]["answer"] == {"pass": 0, "fail": 0, "error": 2, "pending": 0,
                                       "ungraded": 0}  # fmt: skip
    assert done["judge"]["agreement"] == {"asked": 0, "agreed": 0}  # faults are not counted
    rows = {r["caseId"]: r for r in ok(api.get(f"{RUNS}/{run['id']}/results"))["data"]}
    assert "500 from the judge" in rows[ids["RIGHT"]]["reason"]
    assert done["cases"]["fail"] == 0 or rows[ids["WRONG"]]["outcome"] != "fail"


# What a candidate can steer a judge into answering (its output is quoted to the judge): each
# reply, and the outcome and reason its case must get. NULs and lone surrogates, which no
# database stores, become U+FFFD; a reason is cut at 1000 characters.
HOSTILE = {
    "nul": (Reply(verdict="fail", reason="it said \x00 there"), "fail", "it said \ufffd there"),
    "surrogate": (
        Reply(content='{"verdict": "pass", "reason": "half \\ud83d a parrot"}'),
        "pass",
        "half \ufffd a parrot",
    ),
    "huge": (Reply(verdict="fail", reason="\x00" * 200_000), "fail", "\ufffd" * 1000),
    "reason-object": (
        Reply(content='{"verdict": "fail", "reason": {"why": "\\u0000"}}'),
        "fail",
        "{'why': '\\x00'}",
    ),
    "score-out-of-range": (
        Reply(content='{"verdict": "pass", "reason": "fine", "score": 1e999}'),
        "pass",
        "fine",
    ),
    "not-json": (Reply(content="pass \x00 \ud83d"), "error", "the judge's reply is not JSON"),
    "verdict-list": (
        Reply(content='{"verdict": ["pass"], "reason": "x"}'),
        "error",
        "the judge's reply has no pass/fail verdict",
    ),
    "content-number": (Reply(content=5), "error", "the judge's reply is not text"),
    "nested-deep": (Reply(content="[" * 100_000), "error", "the judge's reply is not JSON"),
    "body-not-json": (Reply(body=b"<html>\x00</html>"), "error", "the judge's reply could not"),
    "body-nested-deep": (Reply(body=b"[" * 100_000), "error", "the judge's reply could not"),
}


@pytest.mark.parametrize("judged", ["database"], indirect=True)
def test_whatever_a_judge_answers_its_case_gets_a_verdict_or_an_error_and_the_run_ends(judged):
    """docs/design.md §9.4: a verdict whatever the judge says, stored or an error, and no log
    line quoting SQL, its parameters or what the judge said (docs/deploy.md)."""
    api, _, fake, _, start_worker = judged
    cases = {
        name: ok(api.post(CASES, {"runId": "run-1", "answer": "right"}), 201)["id"]
        for name in HOSTILE
    }

    def steered(body: dict) -> Reply:
        said = body["messages"][1]["content"]
        return next(HOSTILE[name][0] for name in HOSTILE if f"steer {name}." in said)

    fake.script = steered
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    sent = [{"caseId": case, "output": {"answer": f"steer {name}."}, "calls": []}
            for name, case in cases.items()]  # fmt: skip
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": sent}))
    ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    with start_worker() as proc:
        done = until_done(api, run["id"])
    assert done["status"] == "done" and done["cases"]["pending"] == 0
    for name, case in cases.items():
        shown = ok(api.get(f"{RUNS}/{run['id']}/results/{case}"))["parts"]["answer"]
        _, outcome, reason = HOSTILE[name]
        assert shown["outcome"] == outcome, (name, shown)
        assert shown["reason"].startswith(reason) and len(shown["reason"]) <= 1000, (name, shown)
    logged = proc.log_path.read_text(errors="replace")
    for leak in ("\x00", "\ufffd", "Traceback", "[SQL", "INSERT", "parameters", "it said",
                 "steer", "parrot"):  # fmt: skip
        assert leak not in logged, (leak, logged[-2000:])


@pytest.mark.parametrize("judged", ["database"], indirect=True)
def test_a_task_that_fails_is_logged_by_its_type_and_place_and_asked_again_later(judged):
    """docs/deploy.md: a worker's error says what failed and where, never its message, SQL or
    traceback; the question is asked again (here by the next worker to start)."""
    api, app, _, ids, start_worker = judged
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    answers = [r for r in results(ids, "Clause 9.", "x") if r["caseId"] == ids["RIGHT"]]
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": answers}))
    ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    failed = re.compile(
        r"ERROR \[-\] kindgi: a judge's question failed; asked again later "
        r"\(OperationalError at [\w/]+\.py:\d+ \w+\)"
    )
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    with write_lock(url), start_worker(KINDGI_DB_BUSY_TIMEOUT_MS="200") as locked_out:
        deadline = time.monotonic() + 30
        while not failed.search(locked_out.log_path.read_text()):
            assert time.monotonic() < deadline, locked_out.log_path.read_text()
            time.sleep(0.1)
    logged = locked_out.log_path.read_text()
    for leak in ("Traceback", "[SQL", "SELECT", "judge_questions", "parameters", "Clause 9"):
        assert leak not in logged, (leak, logged)
    with start_worker():
        done = until_done(api, run["id"])
    assert done["parts"]["answer"]["pass"] == 1


@pytest.mark.parametrize("judged", ["database"], indirect=True)
def test_a_verdict_that_finds_the_database_locked_lands_once_it_is_free(judged):
    """A finish marking a large run's cases holds the run past the lock timeout: the verdict in
    hand lands when the lock is let go, not once its question's lease has run out (then asked,
    and paid, again)."""
    api, app, fake, ids, start_worker = judged
    fake.script = lambda body: Reply(verdict="pass", reason="ok", delay=0.5)
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    answers = [r for r in results(ids, "Clause 9.", "x") if r["caseId"] == ids["RIGHT"]]
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": answers}))
    ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    with start_worker(KINDGI_DB_BUSY_TIMEOUT_MS="300") as proc:
        deadline = time.monotonic() + 20
        while fake.in_flight == 0:  # leased, and asking
            assert time.monotonic() < deadline, proc.log_path.read_text()
            time.sleep(0.02)
        with write_lock(app.config["SQLALCHEMY_DATABASE_URI"]):
            while fake.in_flight:
                time.sleep(0.02)
            time.sleep(0.5)  # its first landing waits out the lock timeout and fails
        done = until_done(api, run["id"], seconds=15)
    assert done["parts"]["answer"]["pass"] == 1 and len(fake.asked) == 1
    assert "failed" not in proc.log_path.read_text()


def test_a_worker_killed_mid_call_leaves_exactly_one_verdict_after_another_asks_again(judged):
    api, app, fake, ids, start_worker = judged
    slow = {"first": True}

    def script(body: dict) -> Reply:
        if slow.pop("first", False):
            return Reply(delay=30)  # the call the killed worker never finishes
        return verdicts(body)

    fake.script = script
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    answers = [r for r in results(ids, "Clause 9.", "x") if r["caseId"] == ids["RIGHT"]]
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": answers}))
    ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    with start_worker() as first:
        deadline = time.monotonic() + 20
        while fake.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.in_flight == 1
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    with start_worker():  # queues the question again; it waits out the dead worker's lease
        done = until_done(api, run["id"], seconds=40)
    assert done["parts"]["answer"]["pass"] == 1 and done["cases"]["pending"] == 0
    assert len(fake.asked) == 2  # asked again once, answered once
    with app.app_context():
        from kindgi.database import db
        from kindgi.models import JudgeQuestion, JudgeVerdict

        assert db.session.query(JudgeVerdict).count() == 1
        assert db.session.query(JudgeQuestion).filter(JudgeQuestion.outcome.is_(None)).count() == 0


def test_without_a_judge_answers_are_ungraded_and_say_why(api):
    case = ok(api.post(CASES, {"runId": "run-1", "answer": "right"}), 201)["id"]
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0"}), 201)
    body = {"results": [{"caseId": case, "output": {"answer": "x"}, "calls": []}]}
    after = ok(api.post(f"{RUNS}/{run['id']}/results", body))["run"]
    assert "judge" not in after
    shown = ok(api.get(f"{RUNS}/{run['id']}/results/{case}"))
    assert shown["parts"]["answer"] == {"outcome": "ungraded", "reason": "no judge is configured"}


@pytest.mark.skipif(ENGINE != "postgresql", reason="PostgreSQL's queue: its tables and NOTIFY")
def test_a_requests_questions_are_queued_in_one_transaction_on_postgresql(databases):
    """Each transaction's notification reaches a listener once: one notification for three
    questions is one transaction (it was a commit, a WAL flush, a question)."""
    from kindgi import queue

    with app_on(databases, databases.clone(), QUEUE_NAME=f"test-{uuid.uuid4().hex[:12]}") as app:
        tasks = queue.of(app)
        storage = tasks.huey.storage
        with psycopg.connect(storage.dsn, autocommit=True) as listener:
            listener.execute(f'listen "{storage.channel}"')
            tasks.enqueue([7, 8, 9])  # committed: whatever it notified is on its way
            notified = list(listener.notifies(timeout=10, stop_after=1))  # however loaded
            notified += listener.notifies(timeout=1)  # and any more it sent
        queued = [tasks.huey.deserialize_task(data).args for data in storage.enqueued_items()]
        storage.close()
    assert len(notified) == 1
    assert queued == [(7,), (8,), (9,)]
