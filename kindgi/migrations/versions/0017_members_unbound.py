"""A version's members without a foreign key to their version (docs/design.md §9.1): PostgreSQL
checked it row by row, a query a member, about half of a large set's freeze (bench/findings.md,
2026-12-06). Members are written only by a freeze, in the transaction that inserts their
version, and no version is ever deleted; `kindgi check` ("version members") holds what the key
held, as it already held each member's case (which never had a key, for the same reason).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 07:45:00

"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# The name SQLite's unnamed key goes by in a batch (PostgreSQL named it when it made it)
NAMES = {"fk": "%(table_name)s_%(column_0_name)s_fkey"}
KEY = "version_members_version_pk_fkey"


def upgrade():
    with op.batch_alter_table("version_members", naming_convention=NAMES) as batch_op:
        batch_op.drop_constraint(KEY, type_="foreignkey")


def downgrade():
    with op.batch_alter_table("version_members", naming_convention=NAMES) as batch_op:
        batch_op.create_foreign_key(KEY, "test_set_versions", ["version_pk"], ["pk"])
