"""The test-set schema: tenants, principals, agents and projects, runs, cases and their tallies.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 22:02:01.333132

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(length=80), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("content_type", sa.String(length=100), nullable=True),
        sa.Column("location", sa.String(length=1000), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("withheld", sa.Boolean(), nullable=False),
        sa.Column("succeeded_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "agents",
        sa.Column("pk", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("pk"),
        sa.UniqueConstraint("tenant_id", "id", name="uq_agents_tenant_id"),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_projects_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "services",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("services", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_services_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "tokens",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("principal_kind", sa.String(length=8), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("secret_hash"),
    )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tokens_principal", ["principal_kind", "principal_id"], unique=False
        )

    op.create_table(
        "users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("password_hash", sa.String(length=200), nullable=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("email"),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_users_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "agent_projects",
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_pk"],
            ["agents.pk"],
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.PrimaryKeyConstraint("agent_pk", "project_id"),
    )
    op.create_table(
        "grants",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("principal_kind", sa.String(length=8), nullable=False),
        sa.Column("principal_id", sa.String(length=64), nullable=False),
        sa.Column("permission", sa.String(length=16), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=True),
        sa.Column("agent_pk", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["agent_pk"],
            ["agents.pk"],
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("grants", schema=None) as batch_op:
        batch_op.create_index(
            "ix_grants_principal", ["principal_kind", "principal_id"], unique=False
        )

    op.create_table(
        "groups",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("restricted", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_pk"],
            ["agents.pk"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("input", sa.JSON(), nullable=True),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("calls", sa.JSON(), nullable=True),
        sa.Column("erased", sa.Boolean(), nullable=False),
        sa.Column("replay_of", sa.String(length=64), nullable=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_pk"],
            ["agents.pk"],
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_list", ["agent_pk", "project_id", "at", "id"], unique=False)

    op.create_table(
        "tallies",
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("week", sa.Date(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("retired", sa.Boolean(), nullable=False),
        sa.Column("expert", sa.Boolean(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_pk"],
            ["agents.pk"],
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.PrimaryKeyConstraint("agent_pk", "project_id", "week", "kind", "retired", "expert"),
    )
    op.create_table(
        "cases",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=True),
        sa.Column("group_id", sa.String(length=64), nullable=True),
        sa.Column("made_on", sa.String(length=100), nullable=False),
        sa.Column("expect", sa.JSON(), nullable=False),
        sa.Column("expert", sa.Boolean(), nullable=False),
        sa.Column("added_by_kind", sa.String(length=8), nullable=False),
        sa.Column("added_by_id", sa.String(length=64), nullable=False),
        sa.Column("added_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("retired_reason", sa.Text(), nullable=True),
        sa.Column("retired_by_kind", sa.String(length=8), nullable=True),
        sa.Column("retired_by_id", sa.String(length=64), nullable=True),
        sa.Column("retired_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["agent_pk"],
            ["agents.pk"],
        ),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.id"],
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.create_index(
            "ix_cases_list", ["agent_pk", "project_id", "added_at", "id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_cases_run_id"), ["run_id"], unique=False)

    op.create_table(
        "snapshots",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("input", sa.JSON(), nullable=True),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("calls", sa.JSON(), nullable=True),
        sa.Column("taken_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id"),
    )


def downgrade():
    op.drop_table("snapshots")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cases_run_id"))
        batch_op.drop_index("ix_cases_list")

    op.drop_table("cases")
    op.drop_table("tallies")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_list")

    op.drop_table("runs")
    op.drop_table("groups")
    with op.batch_alter_table("grants", schema=None) as batch_op:
        batch_op.drop_index("ix_grants_principal")

    op.drop_table("grants")
    op.drop_table("agent_projects")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_users_tenant_id"))

    op.drop_table("users")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_tokens_principal")

    op.drop_table("tokens")
    with op.batch_alter_table("services", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_services_tenant_id"))

    op.drop_table("services")
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_projects_tenant_id"))

    op.drop_table("projects")
    op.drop_table("agents")
    op.drop_table("tenants")
    op.drop_table("idempotency_keys")
