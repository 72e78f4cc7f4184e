"""Case revisions: a case's expectation can be revised (`cases.revision`, 1 at first), every
revision kept in `case_revisions` once a case is first revised, and a frozen version pins the
revision each of its cases had (`version_members.revision`).

Every case stored is at revision 1, and every version froze it so.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 03:00:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade():
    # in place, not in a batch: on SQLite a batch would copy `cases`, which triggers name
    op.add_column(
        "cases", sa.Column("revision", sa.Integer(), server_default=sa.text("1"), nullable=False)
    )
    op.add_column(
        "version_members",
        sa.Column("revision", sa.Integer(), server_default=sa.text("1"), nullable=False),
    )
    op.create_table(
        "case_revisions",
        sa.Column("case_id", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("expect", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("by_kind", sa.String(length=8), nullable=False),
        sa.Column("by_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"]),
        sa.PrimaryKeyConstraint("case_id", "revision"),
    )


def downgrade():
    op.drop_table("case_revisions")
    op.drop_column("version_members", "revision")  # in place, as they were added
    op.drop_column("cases", "revision")
