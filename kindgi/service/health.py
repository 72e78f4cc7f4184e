"""Whether this process can serve: the probes' checks and the metrics' guard.

Readiness asks what a request would need: the database answering, its schema at the newest
migration, and (with a judge configured) the judge's queue reachable. Each check says `ok` or
what is wrong, in words that name no host, password or path.
"""

from __future__ import annotations

import hmac
import logging
from functools import cache

from alembic.script import ScriptDirectory
from flask import current_app
from sqlalchemy import func, select, text
from sqlalchemy.exc import SQLAlchemyError

from ..database import abandon, db
from ..errors import Unauthenticated
from ..models import JudgeQuestion
from .common import judge_settings, task_queue

log = logging.getLogger("kindgi")


@cache
def newest_migration(directory: str) -> str:
    """The migrations' head revision (read once a process)."""
    head = ScriptDirectory(directory).get_current_head()
    assert head is not None
    return head


def readiness() -> dict[str, str]:
    """Each check's verdict: `ok`, or what is wrong."""
    checks: dict[str, str] = {}
    newest = newest_migration(current_app.extensions["migrate"].directory)
    try:
        db.session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        abandon()
        log.warning("the database is unreachable: %s", type(exc).__name__)
        return {"database": "unreachable", "schema": "unknown"}
    checks["database"] = "ok"
    try:
        at = db.session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except SQLAlchemyError:
        abandon()
        at = None
    checks["schema"] = "ok" if at == newest else f"at {at or 'no migration'}, needs {newest}"
    if judge_settings() is not None:
        checks["queue"] = _queue_check()
    return checks


def _queue_check() -> str:
    try:
        task_queue().size()
    except Exception as exc:  # any client library's failure means the same: not reachable
        log.warning("the judge's queue is unreachable: %s", type(exc).__name__)
        return "unreachable"
    return "ok"


def questions_waiting() -> int:
    """Questions put to the judge and not yet answered: the judge's queue depth."""
    return (
        db.session.scalar(
            select(func.count()).select_from(JudgeQuestion).where(JudgeQuestion.outcome.is_(None))
        )
        or 0
    )


def require_metrics_token(authorization: str | None) -> None:
    """With `KINDGI_METRICS_TOKEN` set, /metrics needs `Authorization: Bearer` with it."""
    wanted = current_app.config["METRICS_TOKEN"]
    if not wanted:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), str(wanted).encode()):
        raise Unauthenticated("/metrics needs the metrics token as a bearer token.")
