"""Tokens are listed a page at a time: their index holds the list's order.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 04:45:00

"""

from alembic import op

# revision identifiers, used by Alembic.
revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tokens_list", ["principal_kind", "principal_id", "created_at", "id"], unique=False
        )
        batch_op.drop_index("ix_tokens_principal")  # its columns lead the new one


def downgrade():
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tokens_principal", ["principal_kind", "principal_id"], unique=False
        )
        batch_op.drop_index("ix_tokens_list")
