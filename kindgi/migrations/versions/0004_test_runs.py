"""Test runs: a test set's change counter, its frozen versions, runs and their cases.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 01:20:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "test_set_changes",
        sa.Column("agent_pk", sa.Integer(), sa.ForeignKey("agents.pk"), primary_key=True),
        sa.Column("project_id", sa.String(36), sa.ForeignKey("projects.id"), primary_key=True),
        sa.Column("changes", sa.Integer(), nullable=False),
    )
    op.create_table(
        "test_set_versions",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("agent_pk", sa.Integer(), sa.ForeignKey("agents.pk"), nullable=False),
        sa.Column("project_id", sa.String(36), sa.ForeignKey("projects.id"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("at_change", sa.Integer(), nullable=False),
        sa.Column("frozen_at", sa.DateTime(), nullable=False),
        sa.Column("frozen_by_kind", sa.String(8), nullable=False),
        sa.Column("frozen_by_id", sa.String(64), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("expert", sa.Integer(), nullable=False),
        sa.UniqueConstraint("agent_pk", "project_id", "number", name="uq_test_set_versions_number"),
    )
    op.create_table(
        "version_members",
        sa.Column(
            "version_pk", sa.Integer(), sa.ForeignKey("test_set_versions.pk"), primary_key=True
        ),
        sa.Column("case_id", sa.String(64), primary_key=True),
        sa.Column("expert", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "test_runs",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant_id", sa.String(64), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("agent_pk", sa.Integer(), sa.ForeignKey("agents.pk"), nullable=False),
        sa.Column("project_id", sa.String(36), sa.ForeignKey("projects.id"), nullable=False),
        sa.Column(
            "version_pk", sa.Integer(), sa.ForeignKey("test_set_versions.pk"), nullable=False
        ),
        sa.Column("version", sa.String(16), nullable=False),
        sa.Column("candidate", sa.String(100), nullable=False),
        sa.Column("weighting", sa.String(16), nullable=False),
        sa.Column("baseline_pk", sa.Integer(), sa.ForeignKey("test_runs.pk"), nullable=True),
        sa.Column("baseline_id", sa.String(64), nullable=True),
        sa.Column("rerun_of_id", sa.String(64), nullable=True),
        sa.Column("only", sa.String(32), nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("meta", sa.JSON(), nullable=True),
        sa.Column("items_threshold", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("created_by_kind", sa.String(8), nullable=False),
        sa.Column("created_by_id", sa.String(64), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("tallies", sa.JSON(), nullable=False),
    )
    op.create_index(
        "ix_test_runs_list", "test_runs", ["agent_pk", "project_id", "created_at", "id"]
    )
    op.create_table(
        "test_run_cases",
        sa.Column("run_pk", sa.Integer(), sa.ForeignKey("test_runs.pk"), primary_key=True),
        sa.Column("case_id", sa.String(64), primary_key=True),
        sa.Column("outcome", sa.String(10), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decisions", sa.String(10), nullable=True),
        sa.Column("answer", sa.String(10), nullable=True),
        sa.Column("items", sa.String(10), nullable=True),
        sa.Column("items_score", sa.Float(), nullable=True),
        sa.Column("parts", sa.JSON(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("result_digest", sa.String(64), nullable=True),
    )


def downgrade():
    op.drop_table("test_run_cases")
    op.drop_index("ix_test_runs_list", table_name="test_runs")
    op.drop_table("test_runs")
    op.drop_table("version_members")
    op.drop_table("test_set_versions")
    op.drop_table("test_set_changes")
