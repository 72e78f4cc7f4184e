"""A database that cannot be reached (its server down, restarting, or its connections ended)
is 503 `database-busy` with `Retry-After` on every path, the API's envelope or the page: a
client that retries on 503 comes back, and nothing was changed. Never a 500."""

from __future__ import annotations

import psycopg
import pytest
from conftest import AGENT, P1, TOKENS, csrf_of, make_app, sign_in
from live import free_port
from sqlalchemy import event
from sqlalchemy.engine import make_url

from kindgi.database import db

ADMIN = {"Authorization": f"Bearer {TOKENS['admin']}"}
CASES = f"/v1/agents/{AGENT}/test-set/cases"


@pytest.fixture
def unreachable(app, tmp_path):
    """An app like `app` whose database is nowhere to be found: on PostgreSQL a port where no
    server listens (connection refused), on SQLite a file in a folder that does not exist."""
    url = make_url(app.config["SQLALCHEMY_DATABASE_URI"])
    if url.get_backend_name() == "sqlite":
        gone = f"sqlite:///{tmp_path}/no-such-folder/kindgi.sqlite"
    else:
        gone = url.set(host="127.0.0.1", port=free_port()).render_as_string(hide_password=False)
    dead = make_app(gone)
    yield dead
    with dead.app_context():
        db.engine.dispose()


def assert_unavailable(resp, mimetype: str = "application/json") -> None:
    assert resp.status_code == 503, resp.get_data(as_text=True)[:300]
    assert resp.mimetype == mimetype
    assert resp.headers["Retry-After"].isdigit()
    assert "database-busy" in resp.get_data(as_text=True)
    assert "Traceback" not in resp.get_data(as_text=True)


def test_an_api_read_and_a_keyed_write_are_503_when_the_database_is_unreachable(unreachable):
    client = unreachable.test_client()
    assert_unavailable(client.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}", headers=ADMIN))
    body = {"runId": "run-2", "answer": "right"}
    assert_unavailable(client.post(CASES, json=body, headers={**ADMIN, "Idempotency-Key": "k"}))


def test_a_signed_in_page_and_a_sign_in_are_503_pages_when_the_database_is_unreachable(
    app, unreachable
):
    live = app.test_client()
    sign_in(live, "expert@acme.test", "expert-pass-1")
    client = unreachable.test_client()
    client.set_cookie("session", live.get_cookie("session").value)
    assert_unavailable(client.get("/"), "text/html")  # loading the signed-in user fails too
    fresh = unreachable.test_client()
    form = {"email": "expert@acme.test", "password": "expert-pass-1", "csrf_token": csrf_of(fresh)}
    assert_unavailable(fresh.post("/login", data=form), "text/html")  # the login throttle


def test_a_connection_ended_between_requests_is_503_once_then_the_pool_reconnects(app, api):
    """As a restarted server leaves the pool: every connection it holds is dead (PostgreSQL: its
    backends terminated; SQLite: its handles closed)."""
    pooled = []
    with app.app_context():
        engine = db.engine

    def keep(dbapi_connection, _record) -> None:
        pooled.append(dbapi_connection)

    event.listen(engine, "checkin", keep)
    try:
        assert api.get(f"{CASES}?projectId={P1}").status_code == 200
    finally:
        event.remove(engine, "checkin", keep)
    assert pooled
    for dbapi_connection in pooled:
        end(engine, dbapi_connection)
    answers = [api.get(f"{CASES}?projectId={P1}").status_code for _ in range(3)]
    assert set(answers) <= {200, 503} and answers[-1] == 200, answers


def end(engine, dbapi_connection) -> None:
    """End a pooled connection from outside."""
    if engine.dialect.name == "sqlite":
        dbapi_connection.close()
        return
    admin = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s, 5000)", (dbapi_connection.info.backend_pid,))
