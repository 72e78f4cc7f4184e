"""Case records (docs/design.md §9.10): each case's record over its set's last 50 done full runs
(`case_records`), kept as runs end. Built here for the runs already stored.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 03:30:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "case_records",
        sa.Column("case_id", sa.String(length=64), nullable=False),
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("errored", sa.Integer(), nullable=False),
        sa.Column("failed_by", sa.JSON(), nullable=False),
        sa.Column("flaky", sa.Boolean(), nullable=False),
        sa.Column("separation", sa.Float(), nullable=True),
        sa.Column("last_failed", sa.DateTime(), nullable=True),
        sa.Column("streak", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("case_id"),
    )
    with op.batch_alter_table("case_records", schema=None) as batch_op:
        batch_op.create_index("ix_case_records_set", ["agent_pk", "project_id"], unique=False)
    from kindgi.service import records

    # the columns made here (0016 adds more)
    columns = ["case_id", "agent_pk", "project_id", "runs", "passed", "failed", "errored",
               "failed_by", "flaky", "separation", "last_failed", "streak"]  # fmt: skip
    records.rebuild_all(op.get_bind(), columns)


def downgrade():
    op.drop_table("case_records")
