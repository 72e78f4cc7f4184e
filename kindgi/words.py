"""The words of a text, as search finds them: one rule, in the app, for the text indexed and for
the words asked, so that SQLite and PostgreSQL find the same (docs/design.md §4.1).

A text is folded (case folded and decomposed as Unicode's compatibility caseless match does, so
`É` is `e`, `ß` is `ss`, `ﬁ` is `fi` and `²` is `2`; then every combining mark dropped: accents,
and the marks of scripts that write vowels so) and cut at every character that is not a letter
or a digit (Unicode's L* and N*, Python's `str.isalnum`): spaces, punctuation, symbols, `_`,
`@`, `/`, `.`, `'` and `-` alike. A word longer than `MAX_WORD_CHARS` counts as several of that
length (and the rest), so no word is too long for an index. Nothing here knows of cases: any
text is cut the same way. Pure: no Flask, no database.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from functools import lru_cache

MAX_WORD_CHARS = 200  # at most 800 bytes: PostgreSQL refuses a lexeme over 2,047

_WORD = re.compile(rf"[^\W_]{{1,{MAX_WORD_CHARS}}}")
_ASCII_WORD = re.compile(rf"[a-z0-9]{{1,{MAX_WORD_CHARS}}}")  # the same in folded ASCII, quicker
_WORDS = re.compile(rf"(?:{_WORD.pattern}(?: {_WORD.pattern})*)?")  # words, a space between


def _marks(codes: Iterable[int]) -> list[int]:
    return [c for c in codes if unicodedata.category(chr(c)).startswith("M")]


def _class(codes: list[int]) -> str:
    """A regular expression's class of these characters, as ranges."""
    ranges, start = [], codes[0]
    for prev, code in zip(codes, [*codes[1:], None], strict=True):
        if code != prev + 1:
            ranges.append(f"{re.escape(chr(start))}-{re.escape(chr(prev))}")
            start = code
    return "[" + "".join(ranges) + "]"


# Every combining mark (Unicode's M*). Marks lie in planes 0, 1 and 14 only (tests/test_words.py
# checks that against every code point). Those of plane 0 are dropped by a regular expression
# (its class a table, so fast); one of planes 1 and 14 in a class made it a list of ranges,
# searched for every character, and ten times slower: those few are dropped by `str.translate`,
# from a text that has a character past plane 0 at all.
_MARKS = re.compile(_class(_marks(range(0x10000))) + "+")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_ASTRAL_MARKS = dict.fromkeys(_marks([*range(0x10000, 0x20000), *range(0xE0000, 0xE1000)]))


def fold(text: str) -> str:
    """The text as words are compared: its compatibility caseless form (Unicode §3.13, D146:
    NFKD(casefold(NFKD(casefold(NFD(text)))))) without its combining marks."""
    if text.isascii():
        return text.lower()
    norm = unicodedata.normalize
    text = _MARKS.sub("", norm("NFKD", norm("NFKD", norm("NFD", text).casefold()).casefold()))
    return text.translate(_ASTRAL_MARKS) if _ASTRAL.search(text) else text


def words(text: str) -> list[str]:
    """The words of a text, in order, repeats kept."""
    if text.isascii():
        return _ASCII_WORD.findall(text.lower())
    return _WORD.findall(fold(text))


def are_words(text: str) -> bool:
    """Whether a text is words as `words` cuts them, a space between each: one that cutting
    again leaves as it is."""
    return _WORDS.fullmatch(text) is not None and fold(text) == text


def distinct(texts: Iterable[str]) -> list[str]:
    """The words of several texts, each once, in the order first found (cut as one text: a
    space between two cuts nothing but them, and is quicker than cutting each)."""
    return list(dict.fromkeys(words(" ".join(texts))))


@lru_cache(maxsize=4096)
def _folded_char(ch: str) -> str:
    return fold(ch)


def spans(text: str) -> Iterator[tuple[int, int, str]]:
    """Where each word of a text lies in it, `(start, end, word)`, in order: the same words as
    `words`, as folding is character by character. A character folded into two words (`½`) is
    in the span of each."""
    if text.isascii():
        for found in _ASCII_WORD.finditer(text.lower()):
            yield found.start(), found.end(), found.group()
        return
    pieces = [_folded_char(ch) for ch in text]
    origin = [at for at, piece in enumerate(pieces) for _ in piece]
    for found in _WORD.finditer("".join(pieces)):
        yield origin[found.start()], origin[found.end() - 1] + 1, found.group()
