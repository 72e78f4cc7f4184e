"""Case revisions and tags: a case's expectation can be revised (`cases.revision`, 1 at first),
every revision kept in `case_revisions` once a case is first revised, and a frozen version pins
the revision each of its cases had (`version_members.revision`). A case has tags (`cases.tags`
to show, `case_tags` to filter by), and a test run may be started on the cases with some
(`test_runs.tags`).

Every case stored is at revision 1, and every version froze it so; no case has a tag.

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
    op.add_column("cases", sa.Column("tags", sa.Text(), nullable=True))
    op.add_column("test_runs", sa.Column("tags", sa.JSON(), nullable=True))
    op.create_table(
        "case_tags",
        sa.Column("case_id", sa.String(length=64), nullable=False),
        sa.Column("tag", sa.String(length=40), nullable=False),
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("added_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"]),
        sa.PrimaryKeyConstraint("case_id", "tag"),
    )
    with op.batch_alter_table("case_tags", schema=None) as batch_op:
        batch_op.create_index(
            "ix_case_tags_list", ["agent_pk", "project_id", "tag", "added_at", "case_id"]
        )


def downgrade():
    with op.batch_alter_table("case_tags", schema=None) as batch_op:
        batch_op.drop_index("ix_case_tags_list")
    op.drop_table("case_tags")
    op.drop_column("test_runs", "tags")
    op.drop_column("cases", "tags")
    op.drop_table("case_revisions")
    op.drop_column("version_members", "revision")  # in place, as they were added
    op.drop_column("cases", "revision")
