"""Quick runs (docs/design.md §9.9): a test run's sample (`test_runs.sample`: its size, seed,
population and strata) and the stratum each of its cases was drawn from
(`test_run_cases.stratum`). Both are empty for a full run, so nothing stored changes.

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-06 03:00:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade():
    # in place, not in a batch: on SQLite a batch would copy the tables, which others' keys name
    op.add_column("test_runs", sa.Column("sample", sa.JSON(), nullable=True))
    op.add_column("test_run_cases", sa.Column("stratum", sa.SmallInteger(), nullable=True))


def downgrade():
    with op.batch_alter_table("test_run_cases", schema=None) as batch_op:
        batch_op.drop_column("stratum")
    with op.batch_alter_table("test_runs", schema=None) as batch_op:
        batch_op.drop_column("sample")
