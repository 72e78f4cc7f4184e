"""Retention (docs/design.md §4.3): a run no case or correction was made from is deleted once it
is older than `KINDGI_RUN_RETENTION_DAYS`, in batches, by `flask --app app kindgi prune` and the
worker's daily task; every other run stays, and no case notices, on the engine the suite runs on.

In the test world every run is of 2026-04-15; run-1, run-2, run-multi and run-globex have cases
or corrections, run-running, run-erased and run-replay have none.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from conftest import AGENT, MULTI, P1, P2, P3, app_on, ok, sign_in
from databases import ENGINE
from sqlalchemy import select, text

from kindgi import queue
from kindgi.cli import ensure_schema
from kindgi.database import db, set_writing
from kindgi.models import Run, RunTool
from kindgi.service import retention

NOW = datetime(2026, 6, 1, 12, 0)  # the world's runs are 47 days old
KEPT = {"run-1", "run-2", "run-multi", "run-globex"}  # cases were made from them
UNREFERENCED = {"run-running", "run-erased", "run-replay"}
RUNS = f"/v1/agents/{AGENT}/runs"


def stored_runs(app) -> set[str]:
    with app.app_context():
        return set(db.session.scalars(select(Run.id)))


def prune(app, *args: str):
    return app.test_cli_runner().invoke(args=["kindgi", "prune", *args])


@pytest.fixture
def young(api, set_clock) -> list[str]:
    """Runs recorded 29 days before NOW (one calls two tools), none made a case."""
    set_clock(NOW - timedelta(days=29))
    made = []
    for calls in ([{"tool": "search"}, {"tool": "lookup"}], []):
        body = {"projectId": P1, "version": "1.1.0", "status": "finished", "calls": calls}
        made.append(ok(api.post(RUNS, body, as_="writer"), 201)["id"])
    set_clock(NOW)
    return made


def test_old_runs_no_case_was_made_from_go_the_rest_stay(app, client, young):
    before = stored_runs(app)
    result = prune(app)
    assert result.exit_code == 0, result.output
    assert stored_runs(app) == before - UNREFERENCED
    assert KEPT | set(young) <= stored_runs(app)
    said = re.fullmatch(
        r"pruned 3 runs older than 2026-05-02T12:00:00Z that no case was made from, and 0 trace "
        r"spans no run was made of, in (\d+) batches; the longest batch held the write lock "
        r"(\d+\.\d) ms \(99 % of them (\d+\.\d) ms at most\)\n",
        result.output,
    )
    assert said, result.output
    with app.app_context():  # their tools went with them, the young runs' stayed
        kept = set(db.session.scalars(select(RunTool.run_id)))
    assert kept == {"run-1", young[0]}
    check = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert check.exit_code == 0, check.output
    assert "runs made cases: ok" in check.output and "run tools: ok" in check.output


def test_a_case_never_needs_its_run_still_there(app, client, api, young):
    """Cases keep their snapshot, pages and export; the runs list and the inbox just lose the
    pruned runs."""
    case_before = ok(api.get(f"/v1/agents/{AGENT}/test-set/cases/case-2"))
    assert prune(app).exit_code == 0
    assert ok(api.get(f"/v1/agents/{AGENT}/test-set/cases/case-2")) == case_before
    export = api.get(f"/v1/agents/{AGENT}/test-set/export?projectId={P1}")
    assert export.status_code == 200 and b"case-2" in export.data
    listed = {r["id"] for r in ok(api.get(f"{RUNS}?projectId={P1}&limit=100"))["data"]}
    assert listed == {"run-1", "run-2", *young}
    sign_in(client, "reader@acme.test", "reader-pass-1")
    assert client.get(f"/agents/{AGENT}/runs/run-running").status_code == 404
    assert client.get(f"/agents/{AGENT}/test-set/cases/case-2").status_code == 200


def test_pruned_runs_leave_no_words_in_the_search_index(app, api, young):
    """The inbox's `q` (docs/design.md §4.2) never finds a pruned run, and the index keeps
    words of the runs that stay only: on SQLite its FTS5 table holds exactly their rowids (a
    trigger takes a deleted run's words out), on PostgreSQL they are the runs' own column."""
    searched = f"{RUNS}?projectId={P1}&q=still+going"
    assert [r["id"] for r in ok(api.get(searched))["data"]] == ["run-running"]
    assert prune(app).exit_code == 0
    assert ok(api.get(searched))["data"] == []
    assert [r["id"] for r in ok(api.get(f"{RUNS}?projectId={P1}&q=lease"))["data"]] == ["run-1"]
    with app.app_context():
        if db.engine.dialect.name == "sqlite":
            db.session.execute(
                text("CREATE VIRTUAL TABLE temp.held USING fts5vocab(main, run_search, instance)")
            )
            held = set(db.session.scalars(text("SELECT DISTINCT doc FROM temp.held")))
            said = "SELECT rowid FROM runs WHERE search_text != ''"
            assert held == set(db.session.scalars(text(said)))
    check = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert check.exit_code == 0 and "run words: ok" in check.output, check.output


def test_running_it_again_deletes_nothing(app, young):
    assert prune(app).exit_code == 0
    after = stored_runs(app)
    again = prune(app)
    assert again.exit_code == 0 and again.output.startswith("pruned 0 runs")
    assert stored_runs(app) == after


def test_it_deletes_in_batches_each_its_own_transaction(app, set_clock, young):
    set_clock(NOW + timedelta(days=60))  # the young runs are old now too
    with app.app_context():
        pruned = retention.prune_runs(batch=2)
    assert pruned.runs == 5
    # acme.drafting in P1 has 5 to go (2 + 2 + 1); no other set of runs has any
    assert pruned.batches == 3
    assert pruned.longest_ms == max(pruned.held_ms) > 0
    assert pruned.p99_ms == pruned.longest_ms  # 99 % of 3 batches are all of them
    assert stored_runs(app) == KEPT


def test_the_runs_go_in_the_order_they_came_whatever_their_project(
    app, api, set_clock, monkeypatch
):
    """The pairs of agent and project take turns by time, the one furthest behind first: runs
    stored together are deleted together, so a page of them is written once (a third of
    PostgreSQL's WAL at a million runs), not once for each pair whose runs share it."""
    made = []
    turns = [(RUNS, P1, "1.1.0"), (f"/v1/agents/{MULTI}/runs", P2, "2.0.0")]
    turns.append((turns[1][0], P3, "2.0.0"))
    for day in range(9):  # one run a day, of each pair in turn
        set_clock(NOW - timedelta(days=60 - day))
        url, project, version = turns[day % 3]
        body = {"projectId": project, "version": version, "status": "finished"}
        made.append(ok(api.post(url, body, as_="admin"), 201)["id"])
    set_clock(NOW)
    went: list[str] = []
    delete = retention._delete

    def noted(ids: list[str], before: datetime) -> tuple[int, float]:
        went.extend(ids)
        return delete(ids, before)

    monkeypatch.setattr(retention, "_delete", noted)
    with app.app_context():
        retention.prune_runs(batch=1)
    assert [run for run in went if run in made] == made


def test_days_can_be_told_and_a_bad_retention_deletes_nothing(app, young, unchanged):
    with unchanged():
        for args in (["--days", "0"], ["--days", "-3"], ["--days", "x"]):
            result = prune(app, *args)
            assert result.exit_code != 0, result.output
        app.config["RUN_RETENTION_DAYS"] = "thirty"
        result = prune(app)
        assert result.exit_code == 1
        assert "KINDGI_RUN_RETENTION_DAYS must be a whole number of days" in result.output
        app.config["RUN_RETENTION_DAYS"] = 50  # keeps the 47-day-old runs
        assert prune(app).output.startswith("pruned 0 runs")
    assert prune(app, "--days", "28").output.startswith("pruned 5 runs")


def test_a_run_made_a_case_since_is_kept(app, api, young):
    """The first case made from a run marks it so, in the case's transaction: retention
    deletes only unmarked runs, and checks again for a case in its own delete."""
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", {"runId": young[1], "answer": "right"}),
       201)  # fmt: skip
    with app.app_context():  # even a run whose mark were lost keeps it while a case names it
        db.session.execute(text("UPDATE runs SET has_case = false WHERE id = 'run-2'"))
        db.session.commit()
    assert prune(app, "--days", "1").exit_code == 0
    assert stored_runs(app) == KEPT | {young[1]}


def test_the_worker_prunes_once_a_day(app, young):
    with app.app_context():
        huey = queue.make(app)
    minutes = [datetime(2026, 6, d, h, m) for d in (1, 2) for h in range(24) for m in range(60)]
    due = [when for when in minutes if "prune" in {t.name for t in huey.read_periodic(when)}]
    assert due == [datetime(2026, 6, 1, 3, 30), datetime(2026, 6, 2, 3, 30)]
    task = next(t for t in huey.read_periodic(due[0]) if t.name == "prune")
    task.execute()  # as the worker runs it
    assert stored_runs(app) == KEPT | set(young)


WAITING_DELETE = text(
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
    "AND query LIKE 'DELETE FROM runs%'"
)


def test_a_run_being_made_a_case_while_it_is_pruned_is_spared(app):
    """PostgreSQL: the first case's transaction marks the run (locking its row) before anything
    else; a prune that read the run as one to go waits on that lock at its delete, checks the
    mark again once the case commits, and spares it. (SQLite's writers take turns.)"""
    if not app.config["SQLALCHEMY_DATABASE_URI"].startswith("postgresql"):
        pytest.skip("SQLite's writers never overlap")
    with app.app_context():
        engine = db.engine
    set_writing(True)  # a transaction, not autocommit: its row lock held until it commits
    making = engine.connect()
    set_writing(False)
    making.execute(text("UPDATE runs SET has_case = true WHERE id = 'run-running'"))
    pruned: list[Any] = []

    def prune_it() -> None:
        with app.app_context():
            pruned.append(retention.prune_runs(days=1))

    pruning = threading.Thread(target=prune_it)
    pruning.start()
    with engine.connect() as watching:
        for _ in range(600):  # until the prune's delete waits on the marked row's lock
            waiting = watching.execute(WAITING_DELETE).scalar_one()
            if waiting:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the prune never waited on the run being made a case")
    making.commit()
    making.close()
    pruning.join(timeout=60)
    assert pruned and pruned[0].runs == 2  # run-erased and run-replay
    assert "run-running" in stored_runs(app)


def test_no_batch_rewrites_the_whole_word_index(databases, monkeypatch):
    """SQLite: a prune's batches each merge a share of FTS5's segments, never the whole index
    a bulk load left in one segment (migration 0018). With FTS5's crisis merge at its default,
    every few dozen batches wrote it all again, holding the write lock for that long."""
    if ENGINE != "sqlite":
        pytest.skip("PostgreSQL's GIN index is never merged by a delete")
    with app_on(databases, databases.empty()) as app:
        with app.app_context():
            # the index's pages of 100 bytes, not 4,050: 10,000 runs' words then fill nearly
            # as many pages as a million runs' (4,468), each step of a merge as small a share
            set_writing(True)
            ensure_schema()
            db.session.execute(text(PAGES_OF_100_BYTES))
            db.session.commit()
            set_writing(False)
        made = app.test_cli_runner().invoke(args=["kindgi", "demo", "--cases", "30",
                                                  "--runs", "10000"])  # fmt: skip
        assert made.exit_code == 0, made.output
        written: list[int] = []  # the index's pages each batch wrote
        own_transaction = retention._in_own_transaction

        def pages() -> dict[int, bytes]:
            return dict(db.session.execute(text("SELECT id, block FROM run_search_data")).all())

        def counted(delete_some):
            before = pages()
            result = own_transaction(delete_some)
            written.append(sum(before.get(page) != block for page, block in pages().items()))
            return result

        with app.app_context():
            index = len(pages())
            monkeypatch.setattr(retention, "_in_own_transaction", counted)
            pruned = retention.prune_runs(days=1, batch=10)
    assert pruned.runs > 9_000 and len(written) > pruned.batches - 10
    # 41 % of it at most, in one batch; 94 % with crisis merges at FTS5's default
    assert index > 1_500 and max(written) < index / 2, (max(written), index)


PAGES_OF_100_BYTES = "INSERT INTO run_search (run_search, rank) VALUES ('pgsz', 100)"
