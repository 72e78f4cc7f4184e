"""Runs from OpenTelemetry traces: a run's trace id and error, and the spans runs are made of.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-10 08:00:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("trace_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))
    op.create_table(
        "trace_spans",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("parent_id", sa.String(16), nullable=True),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("facts", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "span_id"),
    )
    op.create_index("ix_trace_spans_received", "trace_spans", ["received_at"])


def downgrade():
    op.drop_index("ix_trace_spans_received", table_name="trace_spans")
    op.drop_table("trace_spans")
    # ALTER TABLE … DROP COLUMN on both engines (SQLite 3.35+): a batch would copy `runs`,
    # which snapshots and cases reference, and SQLite refuses to drop it
    op.drop_column("runs", "error")
    op.drop_column("runs", "trace_id")
