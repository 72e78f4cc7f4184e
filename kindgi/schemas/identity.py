"""Personal tokens: making one, and the answers (its secret shown once)."""

from __future__ import annotations

from marshmallow import fields

from .common import OmitEmpty, PageOut, StrictSchema, Timestamp, nonempty_max


class NewTokenBody(StrictSchema):
    name = fields.String(required=True, validate=nonempty_max(200))
    expiresAt = Timestamp(allow_none=True)


class TokenOut(OmitEmpty):
    OPTIONAL = ("revokedAt",)
    id = fields.String(required=True)
    name = fields.String(required=True)
    createdAt = Timestamp(required=True, attribute="created_at")
    expiresAt = Timestamp(required=True, allow_none=True, attribute="expires_at")
    revokedAt = Timestamp(attribute="revoked_at")


class NewTokenOut(TokenOut):
    secret = fields.String(required=True, metadata={"description": "Shown this once only."})


class TokenPage(PageOut):
    data = fields.List(fields.Nested(TokenOut), required=True)
