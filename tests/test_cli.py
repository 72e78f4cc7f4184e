"""`flask kindgi load` and `flask kindgi demo`, run through Flask's CLI runner on real databases."""

from __future__ import annotations

import json
import re

import pytest
from conftest import WORLD, app_on, snapshot_db

from kindgi.database import db


@pytest.fixture
def empty_app(databases):
    """An app on a database with nothing in it, not even a schema."""
    with app_on(databases, databases.empty()) as app:
        yield app


def test_load_creates_the_schema_and_loads_a_world(empty_app, tmp_path):
    path = tmp_path / "world.json"
    path.write_text(json.dumps(WORLD))
    result = empty_app.test_cli_runner().invoke(args=["kindgi", "load", str(path)])
    assert result.exit_code == 0, result.output
    assert "loaded" in result.output and "cases" in result.output
    resp = empty_app.test_client().get(
        "/v1/agents/acme.drafting/test-set?projectId=2489e9ad-2ee2-8e00-8ec9-32d5f69181c0",
        headers={"Authorization": "Bearer kgi_admin"},
    )
    assert resp.get_json()["cases"] == {"active": 2, "retired": 1}


def test_a_world_with_a_bad_entry_loads_nothing_and_names_the_entry(app, tmp_path):
    before = snapshot_db(app)
    bad = {
        "tenants": [{"id": "initech"}],
        "projects": [{"id": "11111111-2222-4333-8444-555555555555", "tenant": "initech"}],
        "agents": [
            {
                "id": "initech.bot",
                "tenant": "initech",
                "versions": ["1"],
                "projects": ["11111111-2222-4333-8444-555555555555"],
            }
        ],
        "runs": [
            {
                "id": "run-x",
                "agent": "initech.bot",
                "version": "1",
                "at": "2026-01-01T00:00:00Z",
                "project": "11111111-2222-4333-8444-555555555555",
            },
            {
                "id": "run-y",
                "agent": "initech.nope",
                "version": "1",
                "at": "2026-01-01T00:00:00Z",
                "project": "11111111-2222-4333-8444-555555555555",
            },
        ],
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    result = app.test_cli_runner().invoke(args=["kindgi", "load", str(path)])
    assert result.exit_code != 0
    assert "runs[1] (run-y)" in result.output and "initech.nope" in result.output
    assert "nothing was loaded" in result.output
    assert snapshot_db(app) == before


@pytest.mark.parametrize(
    "entry,message",
    [
        (
            {
                "cases": [
                    {
                        "id": "not-a-case-id",
                        "run": "run-1",
                        "by": "u-admin",
                        "at": "2026-01-01T00:00:00Z",
                        "body": {"answer": "right"},
                    }
                ]
            },
            "case-",
        ),
        (
            {
                "cases": [
                    {
                        "id": "case-x",
                        "run": "run-1",
                        "by": "u-admin",
                        "at": "yesterday",
                        "body": {"answer": "right"},
                    }
                ]
            },
            "RFC 3339",
        ),
        (
            {
                "corrections": [
                    {
                        "id": "cor-x",
                        "run": "run-1",
                        "by": "u-admin",
                        "at": "2026-01-01T00:00:00Z",
                        "body": {"answer": "wrong"},
                    }
                ]
            },
            "shouldSay",
        ),
        ({"tokens": [{"id": "tok-x", "principal": "u-admin", "secret": "plain"}]}, "kgi_"),
        ({"grants": [{"principal": "u-admin", "permission": "own", "project": "x"}]}, "permission"),
    ],
)
def test_each_bad_entry_is_refused_with_a_clear_message(app, tmp_path, entry, message):
    before = snapshot_db(app)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(entry))
    result = app.test_cli_runner().invoke(args=["kindgi", "load", str(path)])
    assert result.exit_code != 0 and message in result.output, result.output
    assert snapshot_db(app) == before


def test_demo_prints_working_credentials_as_json_and_is_safe_to_run_twice(empty_app):
    runner = empty_app.test_cli_runner()
    first = runner.invoke(args=["kindgi", "demo", "--cases", "300", "--json"])
    assert first.exit_code == 0, first.output
    creds = json.loads(first.stdout)
    assert set(creds) == {"token", "agentId", "projectId", "email", "password"}
    client = empty_app.test_client()
    url = f"/v1/agents/{creds['agentId']}/test-set?projectId={creds['projectId']}"
    counts = client.get(url, headers={"Authorization": f"Bearer {creds['token']}"}).get_json()
    assert counts["cases"]["active"] + counts["cases"]["retired"] > 0

    second = runner.invoke(args=["kindgi", "demo", "--cases", "300", "--json"])
    assert second.exit_code == 0, second.output
    again = json.loads(second.stdout)
    assert again["token"] != creds["token"]
    resp = client.get(url, headers={"Authorization": f"Bearer {again['token']}"})
    assert resp.get_json() == counts  # same data, not loaded twice


def test_demo_prints_how_to_sign_in_and_call_the_api_where_it_is_served(empty_app):
    result = empty_app.test_cli_runner().invoke(
        args=["kindgi", "demo", "--cases", "300", "--url", "http://127.0.0.1:5077"]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Sign in at http://127.0.0.1:5077/login as " in out
    token = re.search(r"export TOKEN=(\S+)", out).group(1)
    urls = re.findall(r"'http://127\.0\.0\.1:5077(/v1/[^']+)'", out)
    assert len(urls) == 2 and "5000" not in out
    client = empty_app.test_client()
    for url in urls:
        assert client.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_demo_makes_a_realistic_mix(empty_app):
    result = empty_app.test_cli_runner().invoke(args=["kindgi", "demo", "--cases", "600", "--json"])
    creds = json.loads(result.stdout)
    client = empty_app.test_client()
    auth = {"Authorization": f"Bearer {creds['token']}"}
    base = f"/v1/agents/{creds['agentId']}/test-set/cases?projectId={creds['projectId']}"
    kinds = {c["kind"] for c in client.get(base + "&limit=100", headers=auth).get_json()["data"]}
    assert kinds == {"correction", "hand"}
    retired = client.get(base + "&include=retired&limit=100", headers=auth).get_json()["data"]
    assert any("retired" in c for c in retired)
    with empty_app.app_context():
        from sqlalchemy import text

        agents = db.session.execute(text("SELECT count(*) FROM agents")).scalar()
        projects = db.session.execute(text("SELECT count(*) FROM projects")).scalar()
        cases = db.session.execute(
            text(
                "SELECT count(*) FROM cases WHERE status IS NULL OR status NOT IN "
                "('wont-fix','removed')"
            )
        ).scalar()
    assert (agents, projects, cases) == (2, 3, 600)


def test_a_load_in_many_batches_writes_every_row_once(empty_app, monkeypatch):
    """A table's batches go through one COPY on PostgreSQL (`world._bulk`), the stored runs a
    world names read before it opens: cut into batches of 7 rows, the demo still holds every
    row once, and `kindgi check` finds its derived state exact."""
    from kindgi import demo, world

    monkeypatch.setattr(world, "BATCH", 7)
    runner = empty_app.test_cli_runner()
    result = runner.invoke(args=["kindgi", "demo", "--cases", "300", "--json"])
    assert result.exit_code == 0, result.output
    with empty_app.app_context():
        from sqlalchemy import text

        held = [
            db.session.execute(text(f"SELECT count(*), count(DISTINCT {key}) FROM {table}")).one()
            for table, key in (("cases", "id"), ("runs", "id"), ("snapshots", "run_id"))
        ]
    assert [tuple(row) for row in held] == [(310, 310), (30 + demo.INBOX_RUNS,) * 2, (29, 29)]
    check = runner.invoke(args=["kindgi", "check"])
    assert check.exit_code == 0, check.output
