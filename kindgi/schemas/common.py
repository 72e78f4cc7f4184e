"""What every schema module shares: the fields (timestamps, project ids, whole numbers), the
base schemas of bodies and query strings with their guard against text no database can
store, paging, the error envelope, and `load` and `dump`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

import rfc8785
from marshmallow import (
    EXCLUDE,
    RAISE,
    Schema,
    ValidationError,
    fields,
    post_dump,
    post_load,
    pre_load,
    validate,
)

from ..errors import DomainError, bad_input
from ..nesting import MAX_JSON_DEPTH, deeper_than

UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
MAX_ARGS_JSON_CHARS = 4000
TOO_DEEP = (
    f"Arrays and objects nested more than {MAX_JSON_DEPTH} deep (the body's own is the first)."
)


# ---------------------------------------------------------------- fields


def rfc3339(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, to the millisecond where there is one; naive means UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    spec = "seconds" if value.microsecond == 0 else "milliseconds"
    return value.isoformat(timespec=spec) + "Z"


class Timestamp(fields.DateTime):
    """RFC 3339 timestamps (see `rfc3339`); one without a time zone is refused, and so is one
    whose UTC falls outside the years 1 to 9999 (`0001-01-01T00:00:00+01:00`), which no
    datetime holds."""

    def _serialize(self, value: datetime | None, attr: Any, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else rfc3339(value)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> datetime:
        parsed = super()._deserialize(value, attr, data, **kwargs)
        if parsed.tzinfo is None:
            raise self.make_error("invalid", input=value, obj_type="datetime with a time zone")
        try:
            return parsed.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            raise ValidationError(
                "Out of range: in UTC, from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z."
            ) from None


class ProjectId(fields.String):
    """A project id: a UUID in any case, answered lower-case."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("metadata", {}).setdefault("format", "uuid")
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if not UUID_RE.match(text):
            raise ValidationError("Not a project id (a UUID).")
        return text.lower()


class WholeNumber(fields.Integer):
    """An integer in a query string, written as one: digits only, no fractions or booleans."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool | float):
            raise self.make_error("invalid")
        if isinstance(value, str) and not re.fullmatch(r"-?[0-9]{1,18}", value):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class AsStored(fields.Nested):
    """A value stored already in the shape `nested` describes (a case's `expect`, who did it):
    answered as it is, while the OpenAPI document still shows the nested schema."""

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> Any:
        return value


def canonical_args(args: dict[str, Any]) -> None:
    """`args`: at most 100 top-level fields and 4000 characters of canonical JSON (RFC 8785)."""
    if len(args) > 100:
        raise ValidationError("At most 100 properties.")
    try:
        canonical = rfc8785.dumps(args).decode("utf-8")
    except Exception:  # non-finite floats, integers JSON can't carry exactly
        raise ValidationError("Not representable as canonical JSON.") from None
    if len(canonical) > MAX_ARGS_JSON_CHARS:
        raise ValidationError(f"At most {MAX_ARGS_JSON_CHARS} characters in canonical JSON.")


def nonempty_max(n: int) -> validate.Length:
    return validate.Length(min=1, max=n)


# ---------------------------------------------------------------- request bodies


def _refuse_unstorable(checked: Any, data: Any) -> Any:
    """`data`, unless `checked` (all of it or its known part) holds what no database can store."""
    if _clearly_storable(checked):
        return data
    unstorable = _unstorable(checked)
    if unstorable:
        raise ValidationError(unstorable)
    return data


def _clearly_storable(data: Any) -> bool:
    """True when `data` surely holds nothing `_unstorable` names, told at C speed: its JSON text
    (NaN and infinity refused) has no escaped NUL and encodes as UTF-8 (no lone surrogate).
    Anything else, a false alarm included (a backslash before `u0000` in text, a value JSON
    can't write), is left to `_unstorable`'s walk, which names what and where: the walk, in
    Python, was a third of the CPU a batch of results costs the server."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return False
    return "\\u0000" not in text


def _unstorable(data: Any, path: str = "") -> dict[str, list[str]]:
    """What no database can store, anywhere in `data`: NUL characters and lone surrogates in
    text, and numbers past a double (JSON's 1e400 reads as infinity)."""
    if isinstance(data, float) and not math.isfinite(data):
        return {path or "_body": ["A number too large to store (past a double)."]}
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            return {path or "_body": ["Not valid Unicode text (a lone surrogate)."]}
        return {path or "_body": ["No NUL characters."]} if "\x00" in data else {}
    found: dict[str, list[str]] = {}
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        found.update(_unstorable(key, where) if isinstance(key, str) else {})
        found.update(_unstorable(value, where))
    return found


class StrictSchema(Schema):
    """A request body: unknown fields are refused, not ignored, and so is text no database
    can store (NUL, lone surrogates) anywhere in it."""

    class Meta:
        unknown = RAISE

    @pre_load
    def _storable(self, data: Any, **_: Any) -> Any:
        return _refuse_unstorable(data, data)


# ---------------------------------------------------------------- query strings


class Cursor(fields.String):
    """Where the last page ended, sealed (`kindgi/cursors.py`): unsealed, never compared in SQL,
    so a spoilt one (NUL included) is 400 `cursor-invalid`, not a field's error."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validate=validate.Length(min=1), **kwargs)


class QuerySchema(Schema):
    """Query strings: unknown parameters are ignored, known ones checked. Every value loaded,
    whatever its field is called inside (`addedBy` loads as `added_by`), is refused if it holds
    text no database can store, as in a body: PostgreSQL can't even compare a NUL. Cursors
    aside."""

    class Meta:
        unknown = EXCLUDE

    @post_load
    def _storable(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        loaded = {
            field.data_key or name: data[field.attribute or name]
            for name, field in self.load_fields.items()
            if (field.attribute or name) in data and not isinstance(field, Cursor)
        }
        return _refuse_unstorable(loaded, data)


class TestSetQuery(QuerySchema):
    projectId = ProjectId(required=True)


class Paging(QuerySchema):
    """A page of a list: how many, and where the last page ended."""

    limit = WholeNumber(load_default=25, validate=validate.Range(min=1, max=100))
    cursor = Cursor()


class PageQuery(TestSetQuery, Paging):
    """A page of one of an agent's lists in a project."""


# ---------------------------------------------------------------- responses


class OmitEmpty(Schema):
    """Leaves out optional fields that have no value, as the reference's shapes do."""

    OPTIONAL: tuple[str, ...] = ()

    @post_dump
    def _omit(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        for name in self.OPTIONAL:
            if data.get(name) in (None, False):
                data.pop(name, None)
        return data


class Actor(Schema):
    kind = fields.String(required=True, validate=validate.OneOf(("user", "service")))
    id = fields.String(required=True)


def page_json(page: Any, dump_item: Callable[[Any], Any]) -> dict[str, Any]:
    """A page of a list (`service.Page`): `data`, `hasMore`, and `nextCursor` while there is
    more."""
    out: dict[str, Any] = {"data": [dump_item(i) for i in page.items], "hasMore": page.has_more}
    if page.next_cursor:
        out["nextCursor"] = page.next_cursor
    return out


class PageOut(Schema):
    """A list's page: `data`, and where the next page starts while there is one."""

    nextCursor = fields.String()
    hasMore = fields.Boolean(required=True)


class ErrorBody(Schema):
    code = fields.String(required=True)
    message = fields.String(required=True)
    details = fields.Dict()
    requestId = fields.String(required=True)


class ErrorOut(Schema):
    error = fields.Nested(ErrorBody, required=True)


def flatten_errors(messages: Any, prefix: str = "") -> dict[str, list[str]]:
    """Marshmallow's nested error dict as `path → messages`, e.g. `shouldCall.0.tool`."""
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        return {prefix or "_body": list(messages)}
    if not isinstance(messages, dict):
        return {prefix or "_body": [str(messages)]}
    flat: dict[str, list[str]] = {}
    for key, value in messages.items():
        name = "_body" if key == "_schema" else str(key)
        path = f"{prefix}.{name}" if prefix else name
        for p, msgs in flatten_errors(value, path).items():
            flat.setdefault(p, []).extend(msgs)
    return flat


@cache
def _instance(schema: type[Schema]) -> Schema:
    """One instance per schema: making one deep-copies its fields, and they hold no state."""
    return schema()


def dump(schema: type[Schema], obj: Any) -> Any:
    """`obj` as the answer `schema` describes."""
    return _instance(schema).dump(obj)


class TooDeep(ValueError):
    """JSON nested past `MAX_JSON_DEPTH`."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str | bytes) -> Any:
    """JSON text as Python, as a request sends it (a body, a form's args): ValueError if it is
    not JSON (NaN and Infinity included), `TooDeep` if it nests deeper than the parser itself
    can follow, far past `MAX_JSON_DEPTH` (which `load` holds every body to)."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise TooDeep(TOO_DEEP) from None


def too_deep() -> DomainError:
    """400 `bad-input` for a body nested past `MAX_JSON_DEPTH`, naming the limit."""
    return bad_input({"_body": [TOO_DEEP]}, maxDepth=MAX_JSON_DEPTH)


def load(schema: type[Schema], data: Any) -> dict[str, Any]:
    """Validate `data` with `schema`: the loaded dict, or 400 `bad-input` naming each field.
    Every body passes here, JSON or a form's, so here it is held to `MAX_JSON_DEPTH`."""
    if not isinstance(data, dict):
        raise bad_input({"_body": ["Send a JSON object."]})
    if deeper_than(data, MAX_JSON_DEPTH):
        raise too_deep()
    try:
        return _instance(schema).load(data)
    except ValidationError as err:
        raise bad_input(flatten_errors(err.messages)) from None
