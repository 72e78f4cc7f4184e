"""A case's stance: what its expectation says of its run, as small values stored with the case.

Pure rules, no Flask or database (docs/design.md §9.9, §9.11). A quick run's draw stratifies by
the parts a case is graded on, and the set's health finds the cases that contradict each other
by the input they were made on, the verdicts they give and the tools they want called or
forbid. Reading those from every case's expectation and snapshot (JSON, decoded a row at a time)
made a large set's draw take seconds and its health most of a minute; so they are worked out
here when a case is made or revised (and a version's member keeps the parts it was frozen with),
and `kindgi check` holds the stored values to what these rules give.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

import orjson

from .grading import PARTS

# The parts a case is graded on, as a stratum names them ("decisions+answer"), by their bits
# (a part's bit is 2 ** its place in PARTS)
PARTS_NAMED = [
    "+".join(part for i, part in enumerate(PARTS) if code >> i & 1)
    for code in range(2 ** len(PARTS))
]
VERDICT_PARTS = ("decisions", "answer")  # the parts with one verdict, right or wrong


class Stance(NamedTuple):
    """The stored columns of a case: its parts and which of them it says were right (bits by
    PARTS), a key of its run's input, the tools it wants called and forbids (sorted; None
    when none), and a key of its expectation (the cases of one run it duplicates have it too)."""

    parts: int
    rights: int
    input_key: str
    wants: list[str] | None
    forbids: list[str] | None
    expect_key: str


def parts_code(expect: dict[str, Any]) -> int:
    """Which parts an expectation has, as bits."""
    return sum(2**i for i, part in enumerate(PARTS) if part in expect)


def input_key(given: Any) -> str:
    """A short key of a run's input: equal inputs (as JSON values) have equal keys. Written by
    orjson, keys sorted (a tenth of the standard library's time, which was most of loading a
    large world's stances); a value orjson refuses (an integer past 64 bits) by `json`."""
    try:
        text = orjson.dumps(given, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        text = json.dumps(given, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(text).hexdigest()[:16]


# An expectation's key is worked out as an input's is: equal expectations, equal keys
expect_key = input_key


class Own(NamedTuple):
    """What an expectation alone gives of a stance: its parts, those it says were right (bits)
    and its key."""

    parts: int
    rights: int
    expect_key: str


def own(expect: dict[str, Any]) -> Own:
    """The part of a stance an expectation gives alone."""
    rights = sum(
        2 ** PARTS.index(part)
        for part in VERDICT_PARTS
        if part in expect and expect[part]["verdict"] == "right"
    )
    return Own(parts_code(expect), rights, expect_key(expect))


def stance(expect: dict[str, Any], key: str, calls: Any, mine: Own | None = None) -> Stance:
    """A case's stance from its expectation, its run's input's key (`input_key`) and the run's
    calls: `decisions: right` wants the run's own calls, `wrong` the shouldCall tools. `mine` is
    `own(expect)` when the caller has it (a world's loader works it out once an expectation)."""
    mine = mine or own(expect)
    wants: set[str] = set()
    forbids: set[str] = set()
    decisions = expect.get("decisions")
    if decisions is not None:
        called = (
            [c.get("tool") for c in calls or [] if isinstance(c, dict)]
            if decisions["verdict"] == "right"
            else [c["tool"] for c in decisions.get("shouldCall", [])]
        )
        wants = {t for t in called if isinstance(t, str)}
        forbids = set(decisions.get("mustNotCall", []))
    return Stance(
        mine.parts, mine.rights, key, sorted(wants) or None, sorted(forbids) or None,
        mine.expect_key,
    )  # fmt: skip


def columns(expect: dict[str, Any], given: Any, calls: Any) -> dict[str, Any]:
    """A case's stance, from its expectation and its run's input and calls, as the values of
    its columns."""
    return stance(expect, input_key(given), calls)._asdict()
