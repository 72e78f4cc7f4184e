"""The migrations are the schema: they build exactly what the models describe, on either engine."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from conftest import app_on
from flask_migrate import downgrade, upgrade
from sqlalchemy import inspect

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
