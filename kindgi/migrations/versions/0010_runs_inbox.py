"""The runs inbox and retention: whether a case was made from a run (`runs.has_case`), the tools
each run called (`run_tools`), and the indexes the inbox's filters walk newest first.

`has_case` is set for the runs that cases (and corrections) already name; `run_tools` is filled
from each run's calls, one row per tool it called.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 09:00:00

"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Each run's tools, from its calls (`[{tool, args}]`), once per tool
TOOLS_OF_RUNS = {
    "sqlite": "SELECT DISTINCT runs.id, json_extract(call.value, '$.tool'), runs.agent_pk, "
    "runs.project_id, runs.at FROM runs, json_each(runs.calls) AS call "
    "WHERE json_type(runs.calls) = 'array' AND json_type(call.value, '$.tool') = 'text'",
    "postgresql": "SELECT DISTINCT runs.id, call.value ->> 'tool', runs.agent_pk, "
    "runs.project_id, runs.at FROM runs, json_array_elements(CASE WHEN "
    "json_typeof(runs.calls) = 'array' THEN runs.calls ELSE '[]'::json END) AS call "
    "WHERE json_typeof(call.value -> 'tool') = 'string'",
}


def upgrade():
    # in place, not in a batch: on SQLite a batch would copy `runs`, which cases' keys name
    op.add_column(
        "runs", sa.Column("has_case", sa.Boolean(), server_default=sa.false(), nullable=False)
    )
    op.execute(
        "UPDATE runs SET has_case = true "
        "WHERE EXISTS (SELECT 1 FROM cases WHERE cases.run_id = runs.id)"
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_version", ["agent_pk", "project_id", "version", "at", "id"], unique=False
        )
        batch_op.create_index(
            "ix_runs_cased",
            ["agent_pk", "project_id", "at", "id"],
            unique=False,
            sqlite_where=sa.text("has_case = 1"),
            postgresql_where=sa.text("has_case"),
        )
    op.create_table(
        "run_tools",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("agent_pk", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "tool"),
    )
    op.execute(
        "INSERT INTO run_tools (run_id, tool, agent_pk, project_id, at) "
        + TOOLS_OF_RUNS[op.get_bind().dialect.name]
    )
    with op.batch_alter_table("run_tools", schema=None) as batch_op:
        batch_op.create_index(
            "ix_run_tools_list", ["agent_pk", "project_id", "tool", "at", "run_id"], unique=False
        )


def downgrade():
    with op.batch_alter_table("run_tools", schema=None) as batch_op:
        batch_op.drop_index("ix_run_tools_list")
    op.drop_table("run_tools")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_cased")
        batch_op.drop_index("ix_runs_version")
    op.drop_column("runs", "has_case")  # in place, as it was added (SQLite 3.35+)
