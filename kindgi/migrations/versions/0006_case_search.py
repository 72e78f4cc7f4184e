"""Finding cases by what they say: each case's searched text, and its full-text index.

SQLite: the FTS5 table `case_search` (contentless, keyed by the case's rowid), kept in step by
triggers on `cases`. PostgreSQL: the generated `tsvector` column `cases.search` (through
`kindgi_unaccent`, an immutable wrapper of the `unaccent` extension) with a GIN index. Both index
`search_text` (written when a case is made) followed by the retire reason. The text of the cases
already stored is written here, from their expectation and their run's snapshot; and the tools
each test set's cases name (`test_set_tools`, the cases page's choice of tools).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 04:10:00

"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BATCH = 5000


def _document_sql(row: str) -> str:
    """What the index holds of a case: its text, then its retire reason."""
    return f"coalesce({row}.search_text, '') || ' ' || coalesce({row}.retired_reason, '')"


SQLITE = [
    "CREATE VIRTUAL TABLE case_search USING fts5("
    "doc, content='', columnsize=0, tokenize='unicode61 remove_diacritics 2')",
    f"INSERT INTO case_search (rowid, doc) SELECT rowid, {_document_sql('cases')} FROM cases",
    "CREATE TRIGGER cases_search_insert AFTER INSERT ON cases BEGIN "
    f"INSERT INTO case_search (rowid, doc) VALUES (new.rowid, {_document_sql('new')}); END",
    "CREATE TRIGGER cases_search_delete AFTER DELETE ON cases BEGIN "
    "INSERT INTO case_search (case_search, rowid, doc) "
    f"VALUES ('delete', old.rowid, {_document_sql('old')}); END",
    "CREATE TRIGGER cases_search_update AFTER UPDATE OF search_text, retired_reason ON cases "
    "WHEN old.search_text IS NOT new.search_text "
    "OR old.retired_reason IS NOT new.retired_reason BEGIN "
    "INSERT INTO case_search (case_search, rowid, doc) "
    f"VALUES ('delete', old.rowid, {_document_sql('old')}); "
    f"INSERT INTO case_search (rowid, doc) VALUES (new.rowid, {_document_sql('new')}); END",
]

POSTGRESQL = [
    "CREATE EXTENSION IF NOT EXISTS unaccent",
    # unaccent() is only STABLE (its dictionary could change); a generated column and an index
    # need an IMMUTABLE function, so the dictionary is named outright.
    "CREATE OR REPLACE FUNCTION kindgi_unaccent(text) RETURNS text "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT "
    "AS $$ SELECT public.unaccent('public.unaccent'::regdictionary, $1) $$",
    "ALTER TABLE cases ADD COLUMN search tsvector GENERATED ALWAYS AS "
    f"(to_tsvector('simple'::regconfig, kindgi_unaccent({_document_sql('cases')}))) STORED",
    "CREATE INDEX ix_cases_search ON cases USING gin (search)",
]


def _write_texts(conn: sa.Connection) -> None:
    """Each stored case's text, from its expectation and its run's snapshot."""
    from kindgi.service import search

    def loaded(value):
        return json.loads(value) if isinstance(value, str) else value

    read = sa.text(
        "SELECT cases.id, cases.expect, snapshots.input, snapshots.output, cases.agent_pk, "
        "cases.project_id FROM cases "
        "LEFT JOIN snapshots ON snapshots.run_id = cases.run_id "
        "WHERE cases.id > :last ORDER BY cases.id LIMIT :batch"
    )
    update = sa.text("UPDATE cases SET search_text = :text WHERE id = :id")
    tools = set()
    last = ""
    while rows := conn.execute(read, {"last": last, "batch": BATCH}).all():
        texts = []
        for case_id, expect, input_, output, agent_pk, project_id in rows:
            expect = loaded(expect)
            said = search.expect_words(expect)
            texts.append(
                {
                    "id": case_id,
                    "text": search.document(said, search.run_words(loaded(input_), loaded(output))),
                }
            )
            tools.update((agent_pk, project_id, tool) for tool in search.tools_of(expect))
        conn.execute(update, texts)
        last = rows[-1][0]
    if tools:
        conn.execute(
            sa.text("INSERT INTO test_set_tools VALUES (:agent_pk, :project_id, :tool)"),
            [{"agent_pk": a, "project_id": p, "tool": t} for a, p, t in sorted(tools)],
        )


def upgrade():
    op.add_column("cases", sa.Column("search_text", sa.Text(), nullable=True))
    op.create_table(
        "test_set_tools",
        sa.Column("agent_pk", sa.Integer(), sa.ForeignKey("agents.pk"), primary_key=True),
        sa.Column("project_id", sa.String(36), sa.ForeignKey("projects.id"), primary_key=True),
        sa.Column("tool", sa.String(200), primary_key=True),
    )
    conn = op.get_bind()
    _write_texts(conn)
    for statement in SQLITE if conn.dialect.name == "sqlite" else POSTGRESQL:
        op.execute(statement)


def downgrade():
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER cases_search_{trigger}")
        op.execute("DROP TABLE case_search")
    else:
        op.execute("DROP INDEX ix_cases_search")
        op.execute("ALTER TABLE cases DROP COLUMN search")
        op.execute("DROP FUNCTION kindgi_unaccent(text)")
    op.drop_table("test_set_tools")
    op.drop_column("cases", "search_text")
