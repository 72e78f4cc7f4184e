"""Search: what the cases list's `q` and the runs list's `q` may say."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields

from ..words import words

MAX_SEARCH_CHARS = 200


class SearchText(fields.String):
    """Words to search for: 1..200 characters with at least one word in them."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        if not 1 <= len(text) <= MAX_SEARCH_CHARS:
            raise ValidationError(f"1 to {MAX_SEARCH_CHARS} characters.")
        if "\x00" in text or not words(text):
            raise ValidationError("Give at least one word to search for.")
        return text
