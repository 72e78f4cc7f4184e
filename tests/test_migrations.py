"""The migrations are the schema: they build exactly what the models describe, on either engine."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from conftest import P1, app_on
from flask_migrate import downgrade, upgrade
from sqlalchemy import inspect, text

from kindgi.database import db
from kindgi.models import modelled


def test_the_migrations_build_exactly_the_models_schema(databases):
    with app_on(databases, databases.empty()) as app, app.app_context():
        upgrade()
        with db.engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "include_object": modelled}
            )
            assert compare_metadata(context, db.metadata) == []


def test_the_migrations_go_down_and_up_again(databases):
    with app_on(databases, databases.empty()) as app, app.app_context():
        upgrade()
        downgrade(revision="base")
        assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
        upgrade()
        assert "cases" in inspect(db.engine).get_table_names()


def test_migration_0010_marks_the_runs_cases_were_made_from_and_keeps_their_tools(databases):
    """Upgrading a store of runs and cases to 0010 writes what the service keeps from then on
    (docs/design.md §4.2): each run's has-case mark and its tools, as the loader made them."""
    with app_on(databases, databases.clone()) as app, app.app_context():
        read = (
            "SELECT id, has_case FROM runs ORDER BY id",
            "SELECT run_id, tool, agent_pk, project_id, at FROM run_tools ORDER BY run_id, tool",
        )
        before = [db.session.execute(text(sql)).all() for sql in read]
        db.session.remove()
        downgrade(revision="0007")
        assert "run_tools" not in inspect(db.engine).get_table_names()
        upgrade()
        assert [db.session.execute(text(sql)).all() for sql in read] == before
        assert ("run-1", True) in before[0] and ("run-running", False) in before[0]
        assert [row[:2] for row in before[1]] == [("run-1", "search")]


def test_migration_0011_writes_the_words_of_the_runs_stored_and_indexes_them(databases):
    """Upgrading a store of runs to 0011 writes each run's words (docs/design.md §4.2), which the
    inbox's `q` then finds; down and up again, the same."""
    with app_on(databases, databases.clone()) as app, app.app_context():
        db.session.remove()
        downgrade(revision="0010")
        assert "search_text" not in {c["name"] for c in inspect(db.engine).get_columns("runs")}
        upgrade()
        db.session.remove()
        check = app.test_cli_runner().invoke(args=["kindgi", "check"])
        assert check.exit_code == 0 and "run words: ok" in check.output, check.output
        url = f"/v1/agents/acme.drafting/runs?projectId={P1}&q="
        with app.test_client() as client:
            for q, found in (("LEASE clause", ["run-replay", "run-1"]), ("going", ["run-running"]),
                             ("answer", [])):  # fmt: skip
                resp = client.get(url + q, headers={"Authorization": "Bearer kgi_admin"})
                assert resp.status_code == 200, resp.get_json()
                assert [r["id"] for r in resp.get_json()["data"]] == found, q
