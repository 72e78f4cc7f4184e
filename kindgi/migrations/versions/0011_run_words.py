"""The runs inbox's `q` on the words (docs/design.md §4.2): each run's words, the text in its input
and output as `kindgi.words` cuts it (`runs.search_text`, `service.search.run_document`),
indexed as the cases' are (0008): on SQLite the FTS5 table `run_search` (contentless, keyed by
the run's rowid, its `ascii` tokenizer, no positions) kept in step by triggers on `runs`; on
PostgreSQL the generated `tsvector` column `runs.search` of the words as they are, with a GIN
index. Every stored run's words are written here.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 14:00:00

"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BATCH = 5000
INDEX_BUILD_MEMORY = "256MB"

SQLITE = [
    # no positions (`detail=none`): a search is every word, never a phrase, and a million runs
    # were indexed in half the time (3.6 s, not 7.1) into a third of the space (18 MB, not 54)
    "CREATE VIRTUAL TABLE run_search USING fts5("
    "doc, content='', columnsize=0, detail=none, tokenize='ascii')",
    "INSERT INTO run_search (rowid, doc) SELECT rowid, coalesce(search_text, '') FROM runs",
    "INSERT INTO run_search (run_search) VALUES ('optimize')",
    "CREATE TRIGGER runs_search_insert AFTER INSERT ON runs BEGIN "
    "INSERT INTO run_search (rowid, doc) VALUES (new.rowid, coalesce(new.search_text, '')); END",
    "CREATE TRIGGER runs_search_delete AFTER DELETE ON runs BEGIN "
    "INSERT INTO run_search (run_search, rowid, doc) "
    "VALUES ('delete', old.rowid, coalesce(old.search_text, '')); END",
    "CREATE TRIGGER runs_search_update AFTER UPDATE OF search_text ON runs "
    "WHEN old.search_text IS NOT new.search_text BEGIN "
    "INSERT INTO run_search (run_search, rowid, doc) "
    "VALUES ('delete', old.rowid, coalesce(old.search_text, '')); "
    "INSERT INTO run_search (rowid, doc) VALUES (new.rowid, coalesce(new.search_text, '')); END",
]
SQLITE_DROP = [
    *(f"DROP TRIGGER runs_search_{trigger}" for trigger in ("insert", "delete", "update")),
    "DROP TABLE run_search",
]
# the words themselves, no parser (`array_remove`: a run without words has an empty string)
POSTGRESQL = [
    "ALTER TABLE runs ADD COLUMN search tsvector GENERATED ALWAYS AS (array_to_tsvector("
    "array_remove(string_to_array(coalesce(search_text, ''), ' '), ''))) STORED",
    f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'",
    "CREATE INDEX ix_runs_search ON runs USING gin (search)",
]
POSTGRESQL_DROP = ["DROP INDEX ix_runs_search", "ALTER TABLE runs DROP COLUMN search"]


def _write_words(conn: sa.Connection) -> None:
    """Each stored run's words, from its input and output, a batch of runs at a time by id."""
    from kindgi.service import search

    def loaded(value):
        return json.loads(value) if isinstance(value, str) else value

    read = sa.text("SELECT id, input, output FROM runs WHERE id > :last ORDER BY id LIMIT :batch")
    update = sa.text("UPDATE runs SET search_text = :said WHERE id = :id")
    last = ""
    while rows := conn.execute(read, {"last": last, "batch": BATCH}).all():
        conn.execute(
            update,
            [
                {"id": run_id, "said": search.run_document(loaded(input_), loaded(output))}
                for run_id, input_, output in rows
            ],
        )
        last = rows[-1][0]


def upgrade():
    # in place, not in a batch: on SQLite a batch would copy `runs`, which cases' keys name
    op.add_column("runs", sa.Column("search_text", sa.Text(), nullable=True))
    _write_words(op.get_bind())
    for statement in SQLITE if op.get_bind().dialect.name == "sqlite" else POSTGRESQL:
        op.execute(statement)


def downgrade():
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_DROP if sqlite else POSTGRESQL_DROP:
        op.execute(statement)
    op.drop_column("runs", "search_text")  # in place, as it was added (SQLite 3.35+)
