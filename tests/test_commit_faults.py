"""What a write answers when something fails as its change is committed, or after: never a 500
that says nothing was changed when something was (docs/reliability.md, issue 27's defect 8).

- The connection lost as the answer is kept with its Idempotency-Key (the statement just before
  the COMMIT): 503 `database-busy`, and nothing was changed (it was a 500).
- The COMMIT's answer lost on the way back (PostgreSQL; a proxy cuts the connection at the exact
  point): the change committed, so the first answer is the one the retry replays; without a key
  nobody can tell, and the answer says so (503 `outcome-unknown`). SQLite answers in process: a
  COMMIT's answer can't be lost there.
- Work after the commit failing (a callback queued for after it, a hook that runs after it, as
  the metrics' does): the change stands and so does its answer (it was a 500 "nothing was
  changed", with the change made and the retry replaying a 201).

The apps here answer errors as under gunicorn (`PROPAGATE_EXCEPTIONS` off), not by raising them
into the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import AGENT, TOKENS, error_of, make_app, snapshot_db
from databases import ENGINE
from sqlalchemy import text
from test_hostile import dies_at
from wire import wire_to

from kindgi.database import after_commit, db

ADMIN = {"Authorization": f"Bearer {TOKENS['admin']}"}
CORRECTIONS = f"/v1/agents/{AGENT}/runs/run-1/corrections"
WRITES = {
    # (method, path, body, status): writes whose answer is kept with their key
    "add a case": ("POST", f"/v1/agents/{AGENT}/test-set/cases",
                   {"runId": "run-1", "answer": "right", "why": "marker-add"}, 201),
    "record a correction": ("POST", CORRECTIONS, {"answer": "wrong", "why": "marker-cor"}, 201),
    "change a correction": ("PATCH", f"/v1/agents/{AGENT}/corrections/cor-1",
                            {"status": "fixed"}, 200),
}  # fmt: skip


@pytest.fixture
def served(app):
    """`served(url=None)`: an app on the test's database (or through `url`), answering errors as
    under gunicorn; disposed afterwards."""
    made = []

    def make(url: str | None = None, **config: Any):
        url = url or app.config["SQLALCHEMY_DATABASE_URI"]
        made.append(make_app(url, PROPAGATE_EXCEPTIONS=False, **config))
        return made[-1]

    yield make
    for other in made:
        with other.app_context():
            db.engine.dispose()


def made_with(app, marker: str) -> int:
    """How many cases carry `marker` in what they expect, read past every proxy."""
    with app.app_context(), db.engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM cases WHERE CAST(expect AS TEXT) LIKE :m"),
            {"m": f"%{marker}%"},
        ).scalar_one()


def assert_replays(first, again) -> None:
    """The retry got the first answer byte for byte, as a replay."""
    assert again.headers.get("Idempotent-Replayed") == "true", again.get_data(as_text=True)
    assert (again.status_code, again.get_data()) == (first.status_code, first.get_data())


# ---------------------------------------------------------------- before the commit


@pytest.mark.parametrize("write", WRITES)
def test_the_connection_lost_as_the_answer_is_kept_is_503_busy_and_changes_nothing(
    app, served, write
):
    method, path, body, status = WRITES[write]
    client = served().test_client()
    headers = {**ADMIN, "Idempotency-Key": f"k-settle-{write}"}
    before = snapshot_db(app)
    with dies_at(client.application, "UPDATE IDEMPOTENCY_KEYS") as fired:
        resp = client.open(path, method=method, json=body, headers=headers)
    assert fired, "the answer was never kept"
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]
    assert error_of(resp)["code"] == "database-busy"
    assert resp.headers["Retry-After"].isdigit()
    assert snapshot_db(app) == before  # nothing was changed, and the key is free again
    again = client.open(path, method=method, json=body, headers=headers)
    assert again.status_code == status, again.get_data(as_text=True)[:300]
    assert "Idempotent-Replayed" not in again.headers  # done now, once
    assert_replays(again, client.open(path, method=method, json=body, headers=headers))


# ---------------------------------------------------------------- the COMMIT's answer lost

on_postgresql = pytest.mark.skipif(
    ENGINE != "postgresql", reason="SQLite answers in process: a COMMIT's answer can't be lost"
)


@pytest.fixture
def wired(app, served):
    """An app whose connections to PostgreSQL go through a proxy that can cut them (`wire`)."""
    with wire_to(app.config["SQLALCHEMY_DATABASE_URI"]) as (wire, url):
        yield served(url), wire


@on_postgresql
def test_a_commit_whose_answer_is_lost_answers_what_it_committed_and_the_retry_replays_it(
    app, wired
):
    through, wire = wired
    client = through.test_client()
    headers = {**ADMIN, "Idempotency-Key": "k-lost-answer"}
    body = {"answer": "wrong", "why": "marker-lost-answer"}
    wire.cut_commit_after("INSERT INTO cases")
    first = client.post(CORRECTIONS, json=body, headers=headers)
    assert wire.cuts == ["after the server committed"]
    assert first.status_code == 201, first.get_data(as_text=True)[:300]
    assert made_with(app, "marker-lost-answer") == 1
    assert_replays(first, client.post(CORRECTIONS, json=body, headers=headers))
    assert made_with(app, "marker-lost-answer") == 1


@on_postgresql
def test_a_commit_whose_answer_is_lost_without_a_key_says_the_outcome_is_unknown(app, wired):
    through, wire = wired
    wire.cut_commit_after("INSERT INTO cases")
    resp = through.test_client().post(
        CORRECTIONS, json={"answer": "wrong", "why": "marker-unknown"}, headers=ADMIN
    )
    assert wire.cuts == ["after the server committed"]
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]
    err = error_of(resp)
    assert err["code"] == "outcome-unknown"
    assert "nothing was changed" not in err["message"].lower()
    assert resp.headers["Retry-After"].isdigit()
    assert made_with(app, "marker-unknown") == 1  # it was made: the answer did not say it wasn't


@on_postgresql
def test_a_commit_that_never_reached_the_server_is_503_busy_and_changes_nothing(app, wired):
    through, wire = wired
    client = through.test_client()
    headers = {**ADMIN, "Idempotency-Key": "k-never-sent"}
    body = {"answer": "wrong", "why": "marker-never-sent"}
    before = snapshot_db(app)
    wire.cut_commit_after("INSERT INTO cases", answered=False)
    resp = client.post(CORRECTIONS, json=body, headers=headers)
    assert wire.cuts == ["before the COMMIT reached the server"]
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]
    assert error_of(resp)["code"] == "database-busy"
    assert snapshot_db(app) == before  # nothing was changed, and the key is free again
    again = client.post(CORRECTIONS, json=body, headers=headers)
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    assert made_with(app, "marker-never-sent") == 1


# ---------------------------------------------------------------- after the commit


def _fail() -> None:
    raise OSError(28, "No space left on device")


def assert_the_answer_stands(app, through, name: str) -> None:
    """A correction recorded through `through` is answered 201, made once, and replayed."""
    client = through.test_client()
    headers = {**ADMIN, "Idempotency-Key": f"k-{name}"}
    body = {"answer": "wrong", "why": f"marker-{name}"}
    first = client.post(CORRECTIONS, json=body, headers=headers)
    assert first.status_code == 201, first.get_data(as_text=True)[:300]
    assert made_with(app, f"marker-{name}") == 1
    assert_replays(first, client.post(CORRECTIONS, json=body, headers=headers))


def test_work_queued_for_after_the_commit_failing_leaves_the_answer_as_committed(app, served):
    """A callback that runs once the change has committed (as queueing the judge's questions
    does) fails: the change stands, so its answer does."""
    through = served()
    view = through.view_functions["api.record_correction"]

    def and_work_after(*args: Any, **kwargs: Any):
        after_commit(_fail)
        return view(*args, **kwargs)

    through.view_functions["api.record_correction"] = and_work_after
    assert_the_answer_stands(app, through, "work-after")


def test_a_hook_after_the_commit_failing_leaves_the_answer_as_committed(app, served):
    """A hook that runs after the commit (where the metrics and the request's log line are
    written) fails, as the metrics' would if their files could not grow: the answer stands."""
    through = served()
    through.after_request_funcs.setdefault(None, []).insert(0, lambda _response: _fail())
    assert_the_answer_stands(app, through, "hook-after")
