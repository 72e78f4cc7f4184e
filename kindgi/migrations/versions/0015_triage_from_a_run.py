"""Triage from a test run (docs/design.md §9.12): a revision made from a run's page names the
run (`case_revisions.from_test_run`), and so does a retirement (`cases.retired_from_test_run`),
so the run can say what its experts did from it. Each has a partial index: the run page counts
its few rows, whatever the set's size.

Nothing stored was made from a run; both stay empty.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 06:45:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

NAMED = {"sqlite_where": "{} IS NOT NULL", "postgresql_where": "{} IS NOT NULL"}


def _partial(column: str) -> dict[str, sa.TextClause]:
    return {name: sa.text(where.format(column)) for name, where in NAMED.items()}


def upgrade():
    # in place, not in a batch: on SQLite a batch would copy `cases`, which triggers name
    op.add_column("case_revisions", sa.Column("from_test_run", sa.String(length=64), nullable=True))
    op.add_column("cases", sa.Column("retired_from_test_run", sa.String(length=64), nullable=True))
    op.create_index(
        "ix_case_revisions_from_test_run",
        "case_revisions",
        ["from_test_run"],
        **_partial("from_test_run"),
    )
    op.create_index(
        "ix_cases_retired_from_test_run",
        "cases",
        ["retired_from_test_run"],
        **_partial("retired_from_test_run"),
    )


def downgrade():
    op.drop_index("ix_cases_retired_from_test_run", table_name="cases")
    op.drop_index("ix_case_revisions_from_test_run", table_name="case_revisions")
    op.drop_column("cases", "retired_from_test_run")  # in place, as they were added
    op.drop_column("case_revisions", "from_test_run")
