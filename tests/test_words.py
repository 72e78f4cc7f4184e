"""How a text is cut into words (kindgi/words.py, docs/design.md §4.1): the one rule both
databases' indexes and every search's words go through. Pure: no app, no database."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from kindgi.words import MAX_WORD_CHARS, are_words, fold, spans, words

EVERY_CHARACTER = "".join(
    chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF
)  # every code point but the surrogates, which no text holds


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (  # issue 27: PostgreSQL's parser kept the address, the URL and the path whole
            "write to wombat@acme.test, see https://kb.acme.test/wombat-policy, /srv/wombat "
            "and wombat.rules",
            "write to wombat acme test see https kb acme test wombat policy srv wombat and "
            "wombat rules",
        ),
        ("~refund <refund> /refund 'refund' \"refund\" refund:*", "refund refund refund " * 2),
        (
            "send_email fetch-clause a.b/c\\d|e&f!g?h(i)j[k]l{m}n^o%p$q#r+s=t*u:v;w,x`y~z",
            "send email fetch clause a b c d e f g h i j k l m n o p q r s t u v w x y z",
        ),
        ("Café CRÈME naïve e\u0301cole", "cafe creme naive ecole"),
        ("Ångström \u212bngström Ærø", "angstrom angstrom ærø"),  # Æ and ø are letters
        ("Straße ﬁnal x² ½ ℃", "strasse final x2 1 2 c"),  # compatibility forms
        ("ΣΊΣΥΦΟΣ σίσυφος", "σισυφοσ σισυφοσ"),  # case folded, the final sigma too
        (
            "Don't l\u2019été O'Brien well-known re\u2010sent non\u2011breaking",
            "don t l ete o brien well known re sent non breaking",
        ),
        (  # a run of letters without spaces is one word
            "退款政策、请查看。 환불 Возврат استرداد",
            "退款政策 请查看 " + unicodedata.normalize("NFKD", "환불") + " возврат استرداد",
        ),
        ("v2.3.1 2026-12-02 12,50 3rd", "v2 3 1 2026 12 02 12 50 3rd"),
        ("👍\ufe0f ok \u0301 \u00a0 \u3000 € —", "ok"),  # symbols, spaces, a mark alone
    ],
)
def test_a_text_is_folded_and_cut_at_everything_but_letters_and_digits(text, said):
    assert words(text) == said.split()


def test_a_long_word_counts_as_several_of_the_longest_length():
    assert words("a" * (2 * MAX_WORD_CHARS + 5)) == ["a" * MAX_WORD_CHARS] * 2 + ["a" * 5]


def test_every_combining_mark_is_dropped_wherever_it_is_in_unicode():
    """The marks are looked for in planes 0, 1 and 14 only: that must be all of them."""
    marks = [ch for ch in EVERY_CHARACTER if unicodedata.category(ch).startswith("M")]
    assert {hex(ord(ch) >> 16) for ch in marks} <= {"0x0", "0x1", "0xe"}
    kept = [ch for ch in marks if fold(f"a{ch}b") != "ab"]
    assert kept == ["\u0345"]  # the iota subscript: case folded to an iota


def test_cutting_the_words_again_gives_the_same_words_for_every_character():
    """A word is found by itself: a stored word, cut again, is that word (the index holds the
    words, a search cuts what it is given)."""
    once = words(" ".join(EVERY_CHARACTER))
    assert words(" ".join(once)) == once


def test_folding_twice_is_folding_once():
    assert fold(fold(EVERY_CHARACTER)) == fold(EVERY_CHARACTER)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", True),
        ("cafe wombat 2026 σισυφοσ 退款政策", True),
        ("café", False),  # not folded
        ("Wombat", False),
        ("wombat  policy", False),  # two spaces
        (" wombat", False),
        ("wombat@acme", False),
        ("a" * (MAX_WORD_CHARS + 1), False),  # two words, no space
    ],
)
def test_words_as_stored_are_those_that_cutting_again_leaves_alone(text, said):
    assert are_words(text) is said
    assert are_words(text) is (" ".join(words(text)) == text)


@pytest.mark.parametrize(
    "text",
    [
        "Write to wombat@acme.test, Café e\u0301cole ½ x² ℃ ﬁnal 👍\ufe0f Σ" + "z" * 450,
        "plain ascii, nothing else",
        EVERY_CHARACTER[::97],
    ],
)
def test_spans_find_the_same_words_where_they_are(text):
    found = list(spans(text))
    assert [word for _, _, word in found] == words(text)
    for start, end, word in found:
        assert word in words(text[start:end]) or len(word) == MAX_WORD_CHARS


def test_spans_mark_the_text_as_written():
    text = "Write to wombat@acme.test: Café e\u0301cole"
    assert [(text[a:b], word) for a, b, word in spans(text)] == [
        ("Write", "write"),
        ("to", "to"),
        ("wombat", "wombat"),
        ("acme", "acme"),
        ("test", "test"),
        ("Café", "cafe"),
        ("e\u0301cole", "ecole"),
    ]
