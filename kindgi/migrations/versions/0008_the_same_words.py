"""The same words on both engines: a case's words are cut by the app (`kindgi.words`), and each
database's index takes them as they are.

0006 indexed a case's text as each database cut it: SQLite's FTS5 `unicode61` tokenizer, and
PostgreSQL's text search parser, which keeps `wombat@acme.test`, URLs and paths whole and drops
`<refund>` as a tag; so the two found different cases. Now `cases.search_text` holds the case's
words (its expectation's, then its run's, each part's once, separated by a space) and the new
`cases.retired_words` its retire reason's; SQLite indexes them in an FTS5 table whose `ascii`
tokenizer splits only at ASCII spaces and punctuation (a word has none), and PostgreSQL in a
generated `tsvector` of the words themselves (`array_to_tsvector`), with a GIN index. Every
case's words are written here.

Down, 0006's index comes back, over the words (the texts 0006 wrote are not kept).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 04:00:00

"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BATCH = 5000
INDEX_BUILD_MEMORY = "256MB"


def _document_sql(row: str, reason: str) -> str:
    """What the index holds of a case: its words, then its retire reason (or that's words)."""
    return f"coalesce({row}.search_text, '') || ' ' || coalesce({row}.{reason}, '')"


def _sqlite(tokenizer: str, reason: str) -> list[str]:
    """The FTS5 table, filled, and the triggers that keep it in step with `cases`."""
    doc = _document_sql("new", reason)
    return [
        "CREATE VIRTUAL TABLE case_search USING fts5("
        f"doc, content='', columnsize=0, tokenize='{tokenizer}')",
        f"INSERT INTO case_search (rowid, doc) SELECT rowid, {_document_sql('cases', reason)} "
        "FROM cases",
        "INSERT INTO case_search (case_search) VALUES ('optimize')",
        "CREATE TRIGGER cases_search_insert AFTER INSERT ON cases BEGIN "
        f"INSERT INTO case_search (rowid, doc) VALUES (new.rowid, {doc}); END",
        "CREATE TRIGGER cases_search_delete AFTER DELETE ON cases BEGIN "
        "INSERT INTO case_search (case_search, rowid, doc) "
        f"VALUES ('delete', old.rowid, {_document_sql('old', reason)}); END",
        f"CREATE TRIGGER cases_search_update AFTER UPDATE OF search_text, {reason} ON cases "
        f"WHEN old.search_text IS NOT new.search_text OR old.{reason} IS NOT new.{reason} BEGIN "
        "INSERT INTO case_search (case_search, rowid, doc) "
        f"VALUES ('delete', old.rowid, {_document_sql('old', reason)}); "
        f"INSERT INTO case_search (rowid, doc) VALUES (new.rowid, {doc}); END",
    ]


SQLITE_DROP = [
    *(f"DROP TRIGGER cases_search_{trigger}" for trigger in ("insert", "delete", "update")),
    "DROP TABLE case_search",
]
POSTGRESQL_DROP = ["DROP INDEX ix_cases_search", "ALTER TABLE cases DROP COLUMN search"]
POSTGRESQL_INDEX = [
    f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'",
    "CREATE INDEX ix_cases_search ON cases USING gin (search)",
]
# PostgreSQL's index of the words: the words themselves, no parser (`array_remove`: the space
# between the two parts leaves an empty string where a part is, which no lexeme may be)
POSTGRESQL_WORDS = (
    "ALTER TABLE cases ADD COLUMN search tsvector GENERATED ALWAYS AS (array_to_tsvector("
    f"array_remove(string_to_array({_document_sql('cases', 'retired_words')}, ' '), ''))) STORED"
)
# 0006's: the text as the `simple` configuration cuts it, through an immutable wrapper of
# `unaccent`
UNACCENT = (
    "CREATE OR REPLACE FUNCTION kindgi_unaccent(text) RETURNS text "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT "
    "AS $$ SELECT public.unaccent('public.unaccent'::regdictionary, $1) $$"
)
POSTGRESQL_0006 = (
    "ALTER TABLE cases ADD COLUMN search tsvector GENERATED ALWAYS AS (to_tsvector("
    f"'simple'::regconfig, kindgi_unaccent({_document_sql('cases', 'retired_reason')}))) STORED"
)


def _write_words(conn: sa.Connection) -> None:
    """Each stored case's words, from its expectation and its run's snapshot, and its retire
    reason's."""
    from kindgi.service import search

    def loaded(value):
        return json.loads(value) if isinstance(value, str) else value

    read = sa.text(
        "SELECT cases.id, cases.expect, snapshots.input, snapshots.output, cases.retired_reason "
        "FROM cases LEFT JOIN snapshots ON snapshots.run_id = cases.run_id "
        "WHERE cases.id > :last ORDER BY cases.id LIMIT :batch"
    )
    update = sa.text("UPDATE cases SET search_text = :said, retired_words = :reason WHERE id = :id")
    last = ""
    while rows := conn.execute(read, {"last": last, "batch": BATCH}).all():
        conn.execute(
            update,
            [
                {
                    "id": case_id,
                    "said": search.document(
                        search.expect_words(loaded(expect)),
                        search.run_words(loaded(input_), loaded(output)),
                    ),
                    "reason": search.reason_words(reason),
                }
                for case_id, expect, input_, output, reason in rows
            ],
        )
        last = rows[-1][0]


def upgrade():
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_DROP if sqlite else POSTGRESQL_DROP:
        op.execute(statement)
    op.add_column("cases", sa.Column("retired_words", sa.Text(), nullable=True))
    _write_words(op.get_bind())
    if sqlite:
        built = _sqlite("ascii", "retired_words")
    else:
        built = [POSTGRESQL_WORDS, *POSTGRESQL_INDEX, "DROP FUNCTION kindgi_unaccent(text)"]
    for statement in built:
        op.execute(statement)


def downgrade():
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_DROP if sqlite else POSTGRESQL_DROP:
        op.execute(statement)
    op.drop_column("cases", "retired_words")
    if sqlite:
        built = _sqlite("unicode61 remove_diacritics 2", "retired_reason")
    else:
        built = [UNACCENT, POSTGRESQL_0006, *POSTGRESQL_INDEX]
    for statement in built:
        op.execute(statement)
