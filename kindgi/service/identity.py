"""Who calls: principals, bearer tokens, sign-in with its throttle, and a caller's own tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Select, and_, bindparam, delete, func, select

from .. import telemetry
from ..database import db, on_its_own
from ..errors import AgentNotFound, NotFound, TooManyAttempts, Unauthenticated, bad_input
from ..models import Agent, LoginFailure, Service, Token, User
from .common import clock, new_id, sql, take_turns
from .paging import Page, keyset_page, newest_first

TOKEN_PREFIX = "kgi_"
LOGIN_WINDOW = timedelta(minutes=15)
LOGIN_MAX_FAILURES = 10
# argon2id at OWASP's recommended minimum (19 MiB, 2 passes, 1 lane): argon2-cffi's default
# (64 MiB a hash) was most of a worker's peak memory. Hashes made with other parameters still
# verify, and are made anew at the next sign-in.
_hasher = PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)
_DUMMY_HASH = _hasher.hash("not a password anyone has")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: a user (session or personal token) or a service's token."""

    kind: str  # user | service
    id: str  # the user's or the service's id
    tenant_id: str
    admin: bool = False
    token_id: str | None = None
    name: str = ""

    @property
    def scope(self) -> str:
        """Whose Idempotency-Keys and cursors these are: the principal, whichever token."""
        return f"{self.kind}:{self.id}"

    @property
    def actor(self) -> dict[str, str]:
        """Who did it, as recorded: a user's id, or for a service the token's public id."""
        if self.kind == "service":
            return {"kind": "service", "id": self.token_id or self.id}
        return {"kind": "user", "id": self.id}

    # Flask-Login's user interface, for browser sessions
    is_authenticated = True
    is_active = True
    is_anonymous = False

    def get_id(self) -> str:
        return self.id


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


# The token with its user or service: one query, built once.
_TOKEN_QUERY = (
    select(
        Token.id,
        Token.tenant_id,
        Token.principal_kind,
        Token.principal_id,
        Token.revoked_at,
        Token.expires_at,
        func.coalesce(User.tenant_id, Service.tenant_id).label("principal_tenant"),
        func.coalesce(User.name, Service.name).label("principal_name"),
        User.admin,
    )
    .outerjoin(User, and_(Token.principal_kind == "user", User.id == Token.principal_id))
    .outerjoin(Service, and_(Token.principal_kind == "service", Service.id == Token.principal_id))
    .where(Token.secret_hash == bindparam("secret_hash"))
)


def authenticate(authorization: str | None) -> Principal:
    """The principal behind `Authorization: Bearer kgi_…`; 401 alike for every kind of bad token."""
    scheme, _, secret = (authorization or "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        raise Unauthenticated()
    row = sql().execute(_TOKEN_QUERY, {"secret_hash": hash_secret(secret)}).first()
    if (
        row is None
        or row.revoked_at is not None
        or (row.expires_at is not None and row.expires_at <= clock())
        or row.principal_tenant != row.tenant_id  # None too: the user or service is gone
    ):
        raise Unauthenticated()
    admin = row.principal_kind == "user" and bool(row.admin)
    return Principal(
        row.principal_kind, row.principal_id, row.tenant_id, admin, row.id, row.principal_name
    )


# A signed-in user's principal, read on every page: the four columns, not the ORM object.
_USER_QUERY = select(User.id, User.tenant_id, User.admin, User.name).where(
    User.id == bindparam("user_id")
)


def user_principal(user_id: str) -> Principal | None:
    """The principal of a signed-in browser session."""
    user = sql().execute(_USER_QUERY, {"user_id": user_id}).first()
    if user is None:
        return None
    return Principal("user", user.id, user.tenant_id, bool(user.admin), None, user.name)


def operator(agent_id: str, tenant_id: str | None = None) -> Principal:
    """Who acts at the command line (`kindgi export`): an admin of the agent's tenant, since
    whoever runs it holds the database anyway. The tenant must be named when several have an
    agent of that id."""
    query = select(Agent.tenant_id).where(Agent.id == agent_id)
    if tenant_id is not None:
        query = query.where(Agent.tenant_id == tenant_id)
    tenants = db.session.scalars(query.limit(2)).all()
    if len(tenants) != 1:
        raise (AgentNotFound() if not tenants else bad_input(tenant=["Name the agent's tenant."]))
    return Principal("user", "operator", tenants[0], admin=True, name="operator")


def sign_in(email: str, password: str) -> Principal | None:
    """The user with this email and password, or None alike for a wrong email or password.

    At most 10 failures per email in 15 minutes, counted in the database so the limit holds
    across workers and hosts; unknown emails are counted alike, so the limit tells nothing.
    Each try is recorded as a failure before the (slow) password check, under a lock on that
    email, so simultaneous guesses can't slip past the limit; a success clears them.
    """
    email = email.strip().lower().replace("\x00", "")  # no stored email has a NUL
    key = hash_secret("login\0" + email)
    now = clock()
    with on_its_own():  # the try is counted, and the lock released, before the slow check
        take_turns(key)
        failures = db.session.scalar(
            select(func.count()).where(
                LoginFailure.email_key == key, LoginFailure.at > now - LOGIN_WINDOW
            )
        )
        if failures >= LOGIN_MAX_FAILURES:
            telemetry.LOGINS_THROTTLED.inc()
            raise TooManyAttempts(headers={"Retry-After": str(int(LOGIN_WINDOW.total_seconds()))})
        db.session.add(LoginFailure(email_key=key, at=now))
        user = db.session.execute(
            select(User.id, User.password_hash).where(User.email == email)
        ).first()
    try:
        if user is None or not user.password_hash:
            _hasher.verify(_DUMMY_HASH, password)  # same work either way
            return None
        _hasher.verify(user.password_hash, password)
    except (VerificationError, InvalidHashError):
        return None
    db.session.execute(delete(LoginFailure).where(LoginFailure.email_key == key))
    if _hasher.check_needs_rehash(user.password_hash):
        db.session.get(User, user.id).password_hash = _hasher.hash(password)
    return user_principal(user.id)


# ---------------------------------------------------------------- a caller's own tokens


def create_token(caller: Principal, name: str, expires_at: datetime | None) -> tuple[Token, str]:
    """A personal (or service) token; its secret is returned this once and kept only hashed."""
    now = clock()
    if expires_at is not None and expires_at <= now:
        raise bad_input({"expiresAt": ["Must be in the future."]})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = Token(
        id=new_id("tok"),
        tenant_id=caller.tenant_id,
        principal_kind=caller.kind,
        principal_id=caller.id,
        name=name,
        secret_hash=hash_secret(secret),
        created_at=now,
        expires_at=expires_at,
    )
    db.session.add(token)
    db.session.flush()
    return token, secret


# What the tokens list shows of a token (the position first): never its secret's hash.
_TOKEN_COLUMNS = (Token.created_at, Token.id, Token.name, Token.expires_at, Token.revoked_at)


@cache
def _tokens_query(after: bool) -> Select[Any]:
    query = select(*_TOKEN_COLUMNS).where(
        Token.principal_kind == bindparam("kind"), Token.principal_id == bindparam("principal")
    )
    return newest_first(query, Token.created_at, Token.id, after)


def list_tokens(caller: Principal, *, limit: int = 25, cursor: str | None = None) -> Page:
    """One page of the caller's own tokens, newest first, revoked and expired ones included."""
    return keyset_page(
        _tokens_query,
        {"kind": caller.kind, "principal": caller.id},
        limit,
        cursor,
        {"list": "tokens", "caller": caller.scope},
    )


def revoke_token(caller: Principal, token_id: str) -> None:
    """Revoke one of the caller's own tokens; others' look like none."""
    token = db.session.get(Token, token_id)
    if token is None or (token.principal_kind, token.principal_id) != (caller.kind, caller.id):
        raise NotFound("No such token of yours.")
    if token.revoked_at is None:
        token.revoked_at = clock()
    db.session.flush()
