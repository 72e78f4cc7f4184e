"""Case records over HTTP (docs/design.md §9.10): each case's outcomes in its set's last 50 done
full runs, rewritten as runs end and read as one row.

The set is acme.drafting in P1: the world's two active cases, cor-1 and case-2, and hand cases
on run-1 that expect a call to `search`.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from conftest import AGENT, P1, ok, refused, sign_in
from databases import ENGINE
from flask import request
from sqlalchemy import select, text
from test_quick_runs import answer, cases_of

from kindgi import models
from kindgi.database import db
from kindgi.service import records

V = f"/v1/agents/{AGENT}"
RUNS = f"{V}/test-runs"
CASES = 300  # hand cases added for the first full run's test


def full_run(api, candidate: str, outcome: dict[str, str], **more: Any) -> dict[str, Any]:
    """A run of `candidate` that passes, fails or errs each case as `outcome` says (every case
    not named passes): the run, done."""
    run = ok(api.post(RUNS, {"projectId": P1, "candidate": candidate, **more}), 201)
    ids = [row["caseId"] for row in ok(api.get(f"{RUNS}/{run['id']}/cases?limit=500"))["data"]]
    results = [
        {"caseId": c, "error": "crashed"}
        if outcome.get(c) == "error"
        else answer(c, outcome.get(c, "pass") == "pass")
        for c in ids
    ]
    return ok(api.post(f"{RUNS}/{run['id']}/results", {"results": results}))["run"]


def record(api, case_id: str, **kw: Any) -> dict[str, Any]:
    return ok(api.get(f"{V}/test-set/cases/{case_id}/record", **kw))


def stored(app) -> list[tuple]:
    with app.app_context():
        rows = db.session.execute(select(models.CaseRecord.__table__)).all()
        return sorted(tuple(row) for row in rows)


def test_a_record_counts_outcomes_failers_flakiness_and_separation(app, api):
    ids = {"x": "cor-1", "y": "case-2"}
    first = full_run(api, "1.0", {})
    assert record(api, "cor-1") == {
        "caseId": "cor-1",
        "runs": 1,
        "outcomes": {"pass": 1, "fail": 0, "error": 0},
        "failedBy": [],
        "flaky": False,
        "separation": None,
    }
    full_run(api, "2.0", {ids["x"]: "fail", ids["y"]: "fail"})
    last = full_run(api, "1.0", {ids["x"]: "error"})
    got = record(api, "cor-1")
    assert got["runs"] == 3 and got["outcomes"] == {"pass": 1, "fail": 1, "error": 1}
    assert got["failedBy"] == ["1.0", "2.0"]
    assert got["flaky"] is True  # 1.0 passed it, then erred
    assert got["lastFailed"] == last["finishedAt"] and got["lastFailed"] >= first["finishedAt"]
    # case-2 failed only in the run that failed most: it separates candidates
    other = record(api, "case-2")
    assert other["flaky"] is False and other["failedBy"] == ["2.0"]
    assert other["separation"] > 0.9
    # kept as runs ended, the records are what the runs say from scratch
    kept = stored(app)
    with app.app_context():
        records.rebuild_all(db.session.connection())
        db.session.commit()
    assert stored(app) == kept


def test_a_case_no_run_had_has_an_empty_record_and_quick_runs_do_not_count(api):
    made = ok(api.post(f"{V}/test-set/cases", {"runId": "run-1", "decisions": "right"}), 201)
    assert record(api, made["id"])["runs"] == 0
    quick = ok(api.post(RUNS, {"projectId": P1, "candidate": "q", "sample": {"size": 2}}), 201)
    ids = [row["caseId"] for row in ok(api.get(f"{RUNS}/{quick['id']}/cases"))["data"]]
    ok(api.post(f"{RUNS}/{quick['id']}/results", {"results": [answer(c, False) for c in ids]}))
    assert all(record(api, c)["runs"] == 0 for c in ids)


def test_the_record_keeps_to_the_last_50_done_full_runs(app, api):
    full_run(api, "0.1", {"cor-1": "fail"})
    for n in range(records.WINDOW - 1):
        full_run(api, f"1.{n}", {})
    assert record(api, "cor-1")["outcomes"] == {"pass": 49, "fail": 1, "error": 0}
    full_run(api, "2.0", {})  # the first run falls out of the window
    got = record(api, "cor-1")
    assert got["runs"] == 50 and got["outcomes"]["fail"] == 0 and got["failedBy"] == []
    assert "lastFailed" not in got


def test_another_tenants_or_an_unknown_case_has_no_record(api):
    refused(api.get(f"{V}/test-set/cases/case-nope/record"), 404, "case-not-found")
    refused(api.get(f"{V}/test-set/cases/cor-1/record", as_="globex"), 404, "case-not-found")


def test_the_case_page_shows_the_record(api, client):
    page = f"/agents/{AGENT}/test-set/cases/cor-1"
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    assert "None of the test set's last 50 done full runs graded it." in client.get(page).get_data(
        as_text=True
    )
    full_run(api, "1.0<b>", {"cor-1": "fail"})
    full_run(api, "2.0", {})
    shown = client.get(page).get_data(as_text=True)
    assert "Over the test set's last 50 done full runs: 2 graded it" in shown
    assert "1 pass, 1 fail, 0 error" in shown
    assert "1.0&lt;b&gt;" in shown and "1.0<b>" not in shown  # escaped
    assert "Separation</th><td>1.00</td>" in shown


def test_each_run_end_leaves_the_records_the_window_makes(app, api):
    """A run's end counts the records on in SQL from their old rows (records.run_done); after
    every end they are what counting the window's runs afresh makes them (records.computed, the
    definition `kindgi check` holds them to): over more runs than the window holds, candidates
    whose names JSON escapes, one candidate's two outcomes (flaky), a case no run passes (its
    streak as long as the window), a run that grades nothing (all errors: no pass rate), cases
    added (entering the window) and retired (leaving it)."""
    rng = random.Random(12)
    candidates = ["1.0", "2.0", "ré-3", 'say "4"', "back\\slash"]
    cases = ["cor-1", "case-2"]
    enter, leave, retired = {3: 2, 20: 1, 44: 1, 55: 1}, {6: "case-2", 30: None}, []
    for n in range(records.WINDOW + 10):
        for _ in range(enter.get(n, 0)):
            body = {"runId": "run-1", "decisions": "right"}
            made = ok(api.post(f"{V}/test-set/cases", body), 201)
            cases.append(made["id"])
        if n in leave:
            gone = leave[n] or cases[2]
            ok(api.post(f"{V}/test-set/cases/{gone}/retire", {"reason": "superseded"}))
            cases.remove(gone)
            retired.append(gone)
        crash = n == 17  # every case errs: the run has no pass rate
        outcome = {c: "error" if crash else rng.choice(["pass", "pass", "fail", "error"])
                   for c in cases}  # fmt: skip
        outcome["cor-1"] = rng.choice(["fail", "error"])  # never passed: its streak is its runs
        full_run(api, rng.choice(candidates), outcome)
        with app.app_context():
            assert records.breaches() == [], f"after run {n}"
    with app.app_context():
        kept = db.session.scalars(select(models.CaseRecord)).all()
    # case-2, retired before run 6, has left the window; the case retired at run 30 has not
    assert {r.case_id for r in kept} == {*cases, retired[1]}
    assert any(r.flaky for r in kept) and any(r.separation is not None for r in kept)
    assert any(r.moments[4] >= 2**63 for r in kept)  # Σx² past 64 bits, kept exact
    assert {c for r in kept for c in r.failed_by} >= {'say "4"', "ré-3", "back\\slash"}


def test_two_runs_ending_at_once_each_count_in_the_records(app, api):
    """The second run's end begins before the first's has committed (held just before the
    request boundary commits it): the second waits its turn and counts the first's outcomes,
    on both engines. Without turns, on PostgreSQL each added its outcomes to the records as
    they were before both, and one run's were lost (or its rewrite collided with the other's)."""
    hold, held = threading.Event(), threading.Event()

    @app.after_request  # runs before the boundary's commit: hooks run last registered first
    def _hold_the_commit(response):
        if request.headers.get("X-Hold-Commit"):
            held.set()
            hold.wait(10)
        return response

    runs = [ok(api.post(RUNS, {"projectId": P1, "candidate": c}), 201) for c in ("1.0", "2.0")]
    bodies = [
        {"results": [answer(c, passes) for c in cases_of(api, run["id"])]}
        for run, passes in zip(runs, (True, False), strict=True)
    ]
    answers: dict[int, Any] = {}

    def finish(i: int, headers: dict[str, str]) -> None:
        answers[i] = api.post(f"{RUNS}/{runs[i]['id']}/results", bodies[i], headers=headers)

    first = threading.Thread(target=finish, args=(0, {"X-Hold-Commit": "1"}))
    first.start()
    assert held.wait(10)
    second = threading.Thread(target=finish, args=(1, {}))
    second.start()
    time.sleep(0.5)  # the second's end reaches the records meanwhile, unless it waits its turn
    hold.set()
    first.join(20)
    second.join(20)
    assert [ok(answers[i])["run"]["status"] for i in (0, 1)] == ["done", "done"]
    with app.app_context():
        assert records.breaches() == []
    assert record(api, "cor-1")["outcomes"] == {"pass": 1, "fail": 1, "error": 0}


@pytest.mark.skipif(ENGINE != "postgresql", reason="PostgreSQL's planner statistics")
def test_a_first_full_run_inserts_its_records_without_reading_the_table_again_and_again(app, api):
    """The records' table analyzed while empty (as autovacuum, or a fresh database's VACUUM
    ANALYZE, leaves it before any run ends), a set's first full run inserts a record for each
    case. Its insert read the table it was growing once for each row it inserted (an anti-join,
    the planner told the table was empty): a first run of 313,711 cases ran past gunicorn's
    minute. Counted in the end's own transaction, the table's pages read stay within a few a
    case, not growing with the square of the cases."""
    read: dict[str, int] = {}

    @app.after_request  # before the request's commit: its transaction's own counts
    def _count_reads(response):
        if request.path.endswith("/results"):
            read["pages"] = db.session.execute(
                text("SELECT pg_stat_get_xact_blocks_fetched('case_records'::regclass)")
            ).scalar_one()
        return response

    for _ in range(CASES):
        ok(api.post(f"{V}/test-set/cases", {"runId": "run-1", "decisions": "right"}), 201)
    with app.app_context():
        db.session.execute(text("ANALYZE case_records"))  # empty: no run has ended
        db.session.commit()
    run = full_run(api, "1.0", {})
    assert run["status"] == "done" and run["cases"]["total"] > CASES
    assert read["pages"] <= 3 * run["cases"]["total"], read  # 1,619 for 302 cases before
    with app.app_context():
        assert records.breaches() == []
