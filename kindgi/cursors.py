"""Sealed list cursors: encrypted and authenticated (AES-GCM), bound to one list and caller.

A cursor carries where the previous page ended, when it was sealed, and a digest of the list it
belongs to (its filters and caller); a client can neither read the ids inside nor forge one.
AES-GCM encrypts and authenticates in one pass, and the digest keeps the cursor short: both
matter, since a deep page pays for its cursor on every request. Anything off is `bad-input` with
`details.reason`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from functools import cache
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import bad_input

TTL_SECONDS = 24 * 60 * 60
MAX_CURSOR_CHARS = 2000
NONCE_BYTES = 12
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+")  # unpadded base64url: base64 would skip anything else


@cache
def _aead(secret_key: str) -> AESGCM:
    return AESGCM(hashlib.sha256(b"kindgi-cursor-gcm\0" + secret_key.encode()).digest())


def _digest(binding: dict[str, Any]) -> str:
    """What the list is, in 16 bytes: equal bindings, equal digests."""
    return hashlib.sha256(orjson.dumps(binding, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def seal(secret_key: str, binding: dict[str, Any], position: list[Any], now: float) -> str:
    """A cursor for the page after `position`, valid only for the list `binding` describes."""
    payload = orjson.dumps({"b": _digest(binding), "p": position, "t": int(now)})
    nonce = os.urandom(NONCE_BYTES)
    sealed = nonce + _aead(secret_key).encrypt(nonce, payload, None)
    return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode()


def unseal(secret_key: str, cursor: str, binding: dict[str, Any], now: float) -> list[Any]:
    """The position a cursor carries, if it was sealed for this very list within the last day."""
    if len(cursor) > MAX_CURSOR_CHARS or not TOKEN_RE.fullmatch(cursor):
        raise bad_input({"cursor": ["Not a cursor of this list."]}, reason="cursor-invalid")
    try:
        sealed = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        plain = _aead(secret_key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], None)
        data = orjson.loads(plain)
        sealed_at, position = int(data["t"]), data["p"]
    except (InvalidTag, binascii.Error, ValueError, TypeError, KeyError):
        raise bad_input(
            {"cursor": ["Not a cursor of this list."]}, reason="cursor-invalid"
        ) from None
    if now - sealed_at > TTL_SECONDS:
        raise bad_input(
            {"cursor": ["The cursor has expired; start again."]}, reason="cursor-expired"
        )
    if data.get("b") != _digest(binding):
        raise bad_input(
            {"cursor": ["The cursor belongs to another list, filter or caller."]},
            reason="cursor-mismatch",
        )
    return position
