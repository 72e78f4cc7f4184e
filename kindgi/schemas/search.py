"""Search: what the cases list's `q` may say, and a word as the indexes cut text."""

from __future__ import annotations

import re
from typing import Any

from marshmallow import ValidationError, fields

MAX_SEARCH_CHARS = 200
WORD_RE = re.compile(r"[^\W_]+")  # a word, as the search indexes cut text, about


class SearchText(fields.String):
    """Words to search for: 1..200 characters with at least one word in them."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        if not 1 <= len(text) <= MAX_SEARCH_CHARS:
            raise ValidationError(f"1 to {MAX_SEARCH_CHARS} characters.")
        if "\x00" in text or not WORD_RE.search(text):
            raise ValidationError("Give at least one word to search for.")
        return text
