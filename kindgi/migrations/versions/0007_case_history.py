"""A case's history: its results found by case, newest run first, without scanning the runs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 08:00:00

"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("ix_test_run_cases_case", "test_run_cases", ["case_id", "run_pk"])


def downgrade():
    op.drop_index("ix_test_run_cases_case", table_name="test_run_cases")
