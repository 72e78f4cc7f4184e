"""SQLite's word indexes (`case_search`, `run_search`) merge their segments a step at a time:
FTS5's `crisismerge` goes from 16 to 64 (bench/findings.md, 2026-12-06, session 14).

Every write transaction leaves a new small segment; FTS5 merges them as it goes, a bounded
amount of work a transaction. But once a level holds `crisismerge` segments it merges that
whole level at once, and the level that holds a bulk load's one big segment got there again
and again: a prune batch of 250 runs that should take 5 ms of CPU took 120 to 170, rewriting
the million runs' 18 MB of words. At 64 the gradual merges keep every level well below it
(18 small segments at most over a million-run prune), and no transaction pays for the whole
index. PostgreSQL's GIN index has no such merges.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 17:00:00

"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

INDEXES = ("case_search", "run_search")


def _crisis_merge(segments: int) -> None:
    if op.get_bind().dialect.name == "sqlite":
        for fts in INDEXES:
            op.execute(f"INSERT INTO {fts} ({fts}, rank) VALUES ('crisismerge', {segments})")


def upgrade():
    _crisis_merge(64)


def downgrade():
    _crisis_merge(16)
