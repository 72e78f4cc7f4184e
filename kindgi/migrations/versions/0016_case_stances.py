"""Case stances (docs/design.md §9.9, §9.11): what each case's expectation says of its run, as
small columns written with it (`cases.parts`, `rights`, `input_key`, `wants`, `forbids`), and the
parts each version member was frozen with (`version_members.parts`), so a quick run's draw and
the set's health read no JSON. Written here for the cases and versions already stored.

Revision ID: 0016
Revises: 0014
Create Date: 2026-12-06 06:40:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade():
    # in place, not in a batch: on SQLite a batch would copy `cases`, which triggers name
    for table in ("cases", "version_members"):
        op.add_column(
            table,
            sa.Column("parts", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        )
    op.add_column(
        "cases",
        sa.Column("rights", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("cases", sa.Column("input_key", sa.String(length=16), nullable=True))
    op.add_column("cases", sa.Column("wants", sa.JSON(), nullable=True))
    op.add_column("cases", sa.Column("forbids", sa.JSON(), nullable=True))
    from kindgi.service import stances

    stances.backfill(op.get_bind())


def downgrade():
    for column in ("forbids", "wants", "input_key", "rights", "parts"):
        op.drop_column("cases", column)  # in place, as they were added
    op.drop_column("version_members", "parts")
