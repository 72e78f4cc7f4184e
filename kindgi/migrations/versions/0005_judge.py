"""The judge: its kept verdicts and the questions test runs put to it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 01:55:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "judge_verdicts",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("prompt", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "judge_questions",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_pk", sa.Integer(), sa.ForeignKey("test_runs.pk"), nullable=False),
        sa.Column("case_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("question", sa.JSON(), nullable=False),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("outcome", sa.String(8), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.UniqueConstraint("run_pk", "case_id", "kind", name="uq_judge_questions_case"),
    )
    op.create_index("ix_judge_questions_open", "judge_questions", ["outcome", "lease_until"])


def downgrade():
    op.drop_index("ix_judge_questions_open", table_name="judge_questions")
    op.drop_table("judge_questions")
    op.drop_table("judge_verdicts")
