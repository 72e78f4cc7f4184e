"""Idempotency-Key, at the request boundary: a write retried with its key gets the first answer.

Before a write runs its key is claimed (committed at once, so every process sees it); the answer
is kept with the key in the transaction of the change it reports (`settle`), or the claim is
released when the request changed nothing (401, 5xx). So the record also tells whether a commit
whose answer was lost happened (`kept`). A key is scoped to its caller and remembered for 24
hours; a claim whose request died is taken over once its lease runs out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from flask import Response, current_app, g, request
from sqlalchemy import and_, bindparam, select, update
from sqlalchemy.exc import SQLAlchemyError

from .database import abandon, db, failed, is_busy, on_its_own
from .errors import (
    RETRY_AFTER,
    DatabaseBusy,
    DomainError,
    Internal,
    KeyInFlight,
    KeyMismatch,
    ReplayWithheld,
    StoreUnavailable,
    bad_input,
)
from .models import IdempotencyRecord
from .schemas.common import rfc3339
from .service.common import clock, dialect, insert_for, sql

HEADER = "Idempotency-Key"
TTL = timedelta(hours=24)


@dataclass(frozen=True)
class StoredAnswer:
    status: int
    content_type: str | None
    location: str | None
    body: bytes


def fingerprint() -> str:
    """What makes two requests the same request: method, path with query, and body bytes."""
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.full_path.encode(), request.get_data()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def claim_or_replay(scope: str) -> Response | None:
    """Before a write runs: claim its key (None: go ahead), or the first request's answer."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not 1 <= len(key) <= 255 or not key.isprintable():
        raise bad_input({HEADER: ["1 to 255 printable characters."]})
    stored = claim_key(scope, key, fingerprint())
    if stored is None:
        g.idempotency_key = key
        return None
    replay = Response(stored.body, status=stored.status, content_type=stored.content_type)
    if stored.location:
        replay.headers["Location"] = stored.location
    replay.headers["Idempotent-Replayed"] = "true"
    g.replayed = True
    return replay


@cache
def _claim(dialect_name: str) -> Any:
    """A new claim of a key, or nothing where the caller has one already: built once."""
    columns = ("scope", "key", "fingerprint", "created_at", "lease_until")
    return (
        insert_for(dialect_name, IdempotencyRecord.__table__)
        .values({name: bindparam(name) for name in columns})
        .on_conflict_do_nothing()
        .returning(IdempotencyRecord.key)  # a row only if it was claimed now
    )


def claim_key(scope: str, key: str, fingerprint: str) -> StoredAnswer | None:
    """Claim `key` (None: go ahead), or the first request's stored answer.

    A second request with the key gets 409 in-flight until the first settles or its lease runs
    out. A new key costs one INSERT; only a key seen before is read.
    """
    lease = timedelta(seconds=current_app.config["IDEMPOTENCY_LEASE_SECONDS"])
    claim = {"scope": scope, "key": key, "fingerprint": fingerprint}
    try:
        for _attempt in range(2):
            now = clock()
            claim.update(created_at=now, lease_until=now + lease)
            with on_its_own():
                if sql().execute(_claim(dialect()), claim).first() is not None:
                    return None
                rec = db.session.get(IdempotencyRecord, (scope, key), with_for_update=True)
                if rec is None:  # released since: claim it again
                    continue
                if rec.created_at <= now - TTL:  # forgotten: a new claim in its place
                    rec.fingerprint, rec.created_at, rec.lease_until = fingerprint, now, now + lease
                    rec.status = rec.content_type = rec.location = rec.body = None
                    rec.withheld, rec.succeeded_at = False, None
                    return None
                return _answer_for(rec, fingerprint, now, lease)
        raise KeyInFlight(headers=RETRY_AFTER)
    except Internal as exc:  # the claim could not commit
        raise StoreUnavailable() from exc
    except SQLAlchemyError as exc:
        abandon()
        if is_busy(exc):  # another writer holds the lock: the database is busy, not the store
            raise DatabaseBusy() from exc
        raise StoreUnavailable() from exc


def _answer_for(
    rec: IdempotencyRecord, fingerprint: str, now: datetime, lease: timedelta
) -> StoredAnswer | None:
    if rec.fingerprint != fingerprint:
        raise KeyMismatch()
    if rec.status is None:  # in flight
        if rec.lease_until is not None and rec.lease_until > now:
            raise KeyInFlight(headers=RETRY_AFTER)
        rec.lease_until = now + lease  # the first request died: take its claim over
        return None
    if rec.withheld:
        raise ReplayWithheld(
            details={"status": rec.status, "succeededAt": rfc3339(rec.succeeded_at)}
        )
    return StoredAnswer(rec.status, rec.content_type, rec.location, rec.body or b"")


# The columns to set come from the parameters' names (SQLAlchemy makes the SET clause).
_SETTLE = update(IdempotencyRecord.__table__).where(
    IdempotencyRecord.scope == bindparam("the_scope"),
    IdempotencyRecord.key == bindparam("the_key"),
)


def settle(scope: str, response: Response) -> None:
    """Keep a decided answer (2xx, 4xx but 401) with the key, in the transaction of the change
    it reports; release the key otherwise. An answer with a secret is kept without its body."""
    key = g.get("idempotency_key")
    if key is None:
        return
    status = response.status_code
    if status >= 500 or status == 401:
        release(scope)
        return
    withhold = bool(g.get("withhold_answer"))
    values = {
        "the_scope": scope,
        "the_key": key,
        "status": status,
        "content_type": response.content_type,
        "location": response.headers.get("Location"),
        "body": None if withhold else response.get_data(),
        "withheld": withhold,
        "lease_until": None,
        "succeeded_at": clock() if status < 300 else None,
    }
    try:
        sql().execute(_SETTLE, values)
    except SQLAlchemyError as exc:  # the change is rolled back with it: 503 or 500
        raise failed(exc) from exc


def kept(scope: str) -> bool | None:
    """After a commit whose answer was lost: whether it happened, as this request's key tells
    (its answer commits with the change, or neither does). None without a key, or if the record
    can't be read; on PostgreSQL the read waits (up to the lock timeout) for the lost
    transaction to end, if its server process still holds the row."""
    key = g.get("idempotency_key")
    if key is None:
        return None
    try:
        with on_its_own():
            status = db.session.execute(
                select(IdempotencyRecord.status)
                .where(IdempotencyRecord.scope == scope, IdempotencyRecord.key == key)
                .with_for_update()
            ).scalar_one_or_none()
    except (SQLAlchemyError, DomainError):
        abandon()
        return None
    return status is not None


def release(scope: str) -> None:
    """Drop this request's claim, whose request changed nothing: the key may be used again.

    Best effort: if the database can't take even this, the claim's lease runs out instead.
    """
    key = g.get("idempotency_key")
    if key is None:
        return
    abandon()
    try:
        with on_its_own():
            db.session.execute(
                IdempotencyRecord.__table__.delete().where(
                    and_(
                        IdempotencyRecord.scope == scope,
                        IdempotencyRecord.key == key,
                        IdempotencyRecord.status.is_(None),
                    )
                )
            )
    except (SQLAlchemyError, DomainError):  # best effort, as said
        abandon()
