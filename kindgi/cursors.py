"""Sealed list cursors: encrypted and authenticated (Fernet), bound to one list and caller.

A cursor carries where the previous page ended and what list it belongs to; a client can neither
read the ids inside nor forge one. Anything off is `bad-input` with `details.reason`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from functools import cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from .errors import bad_input

TTL_SECONDS = 24 * 60 * 60
MAX_CURSOR_CHARS = 2000
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+={0,2}")  # as sealed: base64 would skip anything else


@cache
def _fernet(secret_key: str) -> Fernet:
    key = hashlib.sha256(b"kindgi-cursor\0" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def seal(secret_key: str, binding: dict[str, Any], position: list[Any], now: float) -> str:
    """A cursor for the page after `position`, valid only for the list `binding` describes."""
    sealed = {"b": binding, "p": position, "t": int(now)}  # the time inside: one HMAC to check
    payload = json.dumps(sealed, separators=(",", ":"), sort_keys=True)
    return _fernet(secret_key).encrypt_at_time(payload.encode(), int(now)).decode()


def unseal(secret_key: str, cursor: str, binding: dict[str, Any], now: float) -> list[Any]:
    """The position a cursor carries, if it was sealed for this very list within the last day."""
    if len(cursor) > MAX_CURSOR_CHARS or not TOKEN_RE.fullmatch(cursor):
        raise bad_input({"cursor": ["Not a cursor of this list."]}, reason="cursor-invalid")
    try:
        data = json.loads(_fernet(secret_key).decrypt(cursor.encode("ascii")))
        sealed_at = int(data["t"])
    except (InvalidToken, UnicodeEncodeError, ValueError, TypeError, KeyError):
        raise bad_input(
            {"cursor": ["Not a cursor of this list."]}, reason="cursor-invalid"
        ) from None
    if now - sealed_at > TTL_SECONDS:
        raise bad_input(
            {"cursor": ["The cursor has expired; start again."]}, reason="cursor-expired"
        )
    if data.get("b") != binding:  # JSON values both (lists, never tuples): compared as they are
        raise bad_input(
            {"cursor": ["The cursor belongs to another list, filter or caller."]},
            reason="cursor-mismatch",
        )
    return data["p"]
