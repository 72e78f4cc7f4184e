"""Case stances (docs/design.md §9.9, §9.11): what each case's expectation says of its run, as
small columns written with it (`cases.parts`, `rights`, `input_key`, `wants`, `forbids`), and the
parts each version member was frozen with (`version_members.parts`), so a quick run's draw and
the set's health read no JSON. Written here for the cases and versions already stored.

Case records (§9.10) keep what they are counted from (`case_records.by_candidate`, `moments`),
so a run's end changes them without reading the window's rows: rebuilt here from the runs.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 06:40:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
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
    from kindgi.service import records, stances

    stances.backfill(op.get_bind())
    op.execute("DELETE FROM case_records")  # rebuilt below; NOT NULL columns need no default then
    with op.batch_alter_table("case_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("by_candidate", sa.JSON(), nullable=False))
        batch_op.add_column(sa.Column("moments", sa.JSON(), nullable=False))
    records.rebuild_all(op.get_bind())


def downgrade():
    with op.batch_alter_table("case_records", schema=None) as batch_op:
        batch_op.drop_column("moments")
        batch_op.drop_column("by_candidate")
    for column in ("forbids", "wants", "input_key", "rights", "parts"):
        op.drop_column("cases", column)  # in place, as they were added
    op.drop_column("version_members", "parts")
