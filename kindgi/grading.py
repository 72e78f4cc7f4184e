"""Grading one candidate result against a case's expectation, and the statistics of a test run.

Pure functions over plain JSON values (docs/design.md §9.3 and §9.5): no Flask, no database
(an argument's matchers are `kindgi.matchers`), so every rule is tested on its own and the
service only stores what they return. The answer part is the judge's (§9.4); here it only gets
its starting outcome.

Choices the design leaves open, made here:

- `grade_decisions` takes the decisions part of an expectation (`expect["decisions"]`).
- A missing `shouldCall` entry's `nearest` call is looked for first among the calls the maximum
  matching left unused (those differ in at least one listed field, or the entry would have been
  matched), then among all calls of its tool (then `differs` may be `{}`: the call that would do
  is taken by another entry). A field the call lacks has no `got` in `differs`.
- Ranked keys: a string is itself, an integer its decimal text, a float Python's `repr` of it
  (`1.0` is "1.0", not "1"); a boolean, null, array or an object with no usable `key` or `id`
  is no key. The same rule reads `ranked` and the array in the output.
- An items part that errs keeps every field: `score` is None, `ranks` and `unjudged` are empty,
  `ideal` is still the expectation's own. With no items at all (K = 0), score and ideal are 0.
- `ranks` lists the top K the candidate gave: fewer than K rows when its list is shorter.
- `wilson` refuses `total == 0` (ValueError): with nothing graded there is no pass rate at all.
- `mcnemar_p` is a float: below about 1e-308 it is 0.0.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from . import matchers
from .matchers import json_equal

PARTS = ("decisions", "answer", "items")  # an expectation's parts, in the order graded
PART_OUTCOMES = ("pass", "fail", "error", "pending", "ungraded")
# How a case changed between a baseline run and a candidate run (`compare_change`)
CHANGES = (
    "regressed",
    "fixed",
    "still-failing",
    "still-passing",
    "new",
    "gone",
    "errored",
    "ungraded",
)
NO_RANKED_LIST = "no-ranked-list"
NO_RESULT = "no-result"  # a case the run finished without a result for
NO_JUDGE = "no judge is configured"
# A score this close under its bar still passes: sums of logarithms are not exact.
SCORE_TOLERANCE = 1e-9

_MISSING = object()
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


# --- decisions -----------------------------------------------------------------------------


def _args(call: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments; anything but an object has no fields."""
    args = call.get("args")
    return args if isinstance(args, dict) else {}


def _differences(
    entry: dict[str, Any], args: dict[str, Any], exactly: bool
) -> Iterator[tuple[str, Callable[[], dict[str, Any]]]]:
    """Each field a call's arguments get wrong for an entry, as it is found, with how to say
    why: a listed `args` field not equal, a `match` field its matcher refuses, and with
    `exactly` an argument the entry names nowhere. Lazy, so that telling whether a call fits
    stops at the first and says nothing."""
    for field, expected in (entry.get("args") or {}).items():
        if field not in args:
            yield field, lambda expected=expected: {"expected": expected}
        elif not json_equal(args[field], expected):
            yield (
                field,
                lambda field=field, expected=expected: {
                    "expected": expected,
                    "got": args[field],
                },
            )
    for field, matcher in (entry.get("match") or {}).items():
        if not matchers.fits(matcher, args, field):
            yield field, lambda field=field, matcher=matcher: _failed_match(field, matcher, args)
    if exactly:
        for field in matchers.unnamed(entry, args):
            yield (
                field,
                lambda field=field: {
                    "got": args[field],
                    "why": f"`{field}`: not named by the entry",
                },
            )


def _failed_match(field: str, matcher: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    said = {"match": matcher, "why": matchers.why_not(field, matcher, args)}
    if field in args:
        said["got"] = args[field]
    return said


def _differs(
    entry: dict[str, Any], args: dict[str, Any], exactly: bool = False
) -> dict[str, dict[str, Any]]:
    """The fields a call's arguments get wrong for an entry: each listed `args` field with what
    was expected and what came (a field the call lacks has no `got`: absent differs from every
    value, null included); each `match` field it fails with the matcher and `why` in words;
    with `exactly`, each argument the entry names nowhere."""
    return {field: say() for field, say in _differences(entry, args, exactly)}


def _fits(entry: dict[str, Any], call: dict[str, Any], exactly: bool) -> bool:
    """Whether a call meets an entry: its tool, and no field it gets wrong."""
    if call.get("tool") != entry["tool"]:
        return False
    return next(_differences(entry, _args(call), exactly), None) is None


def _maximum_matching(adjacent: list[list[int]]) -> dict[int, int]:
    """A maximum one-to-one matching of entries to calls (`adjacent[entry]`: the calls that
    would do), as {call: entry}. Augmenting paths, searched breadth-first for each entry in
    turn (Kuhn): exact where taking the first fitting call would strand a later entry."""
    owner: dict[int, int] = {}
    for start in range(len(adjacent)):
        reached_by: dict[int, int] = {}  # call -> the entry whose search reached it first
        via: dict[int, int] = {}  # entry (not start) -> the call it owns and was reached through
        queue: deque[int] = deque([start])
        free: int | None = None
        while queue and free is None:
            entry = queue.popleft()
            for call in adjacent[entry]:
                if call in reached_by:
                    continue
                reached_by[call] = entry
                if call not in owner:
                    free = call
                    break
                via[owner[call]] = call
                queue.append(owner[call])
        step: int | None = free
        while step is not None:  # flip the path: each entry on it takes the call that reached it
            entry = reached_by[step]
            owner[step] = entry
            step = via.get(entry)
    return owner


def _nearest(
    entry: dict[str, Any], calls: list[dict[str, Any]], used: set[int], exactly: bool
) -> dict[str, Any] | None:
    """The call of the entry's tool with the fewest differing listed fields (lowest index on a
    tie), unused calls first; None when the candidate never called that tool."""
    same_tool = [i for i, call in enumerate(calls) if call.get("tool") == entry["tool"]]
    pool = [i for i in same_tool if i not in used] or same_tool
    if not pool:
        return None
    differs = {i: _differs(entry, _args(calls[i]), exactly) for i in pool}
    best = min(pool, key=lambda i: (len(differs[i]), i))
    return {"call": best, "differs": differs[best]}


def _decisions_right(
    calls: list[dict[str, Any]], corrected_calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """The same set of tools as the corrected run; how often and in what order don't count."""
    expected = {call["tool"] for call in corrected_calls}
    got = {call["tool"] for call in calls}
    missing, extra = sorted(expected - got), sorted(got - expected)
    return {
        "outcome": "fail" if missing or extra else "pass",
        "expected": sorted(expected),
        "missing": missing,
        "extra": extra,
        "forbidden": [],
    }


def _missing(
    entry: dict[str, Any], calls: list[dict[str, Any]], used: set[int], exactly: bool
) -> dict[str, Any]:
    """An unmatched entry as the explanation lists it: its `match` only when it has one."""
    missing = {"tool": entry["tool"], "args": entry.get("args") or {}}
    if "match" in entry:
        missing["match"] = entry["match"]
    missing["nearest"] = _nearest(entry, calls, used, exactly)
    return missing


def _decisions_wrong(expect: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Each shouldCall entry met by a call of its own, and no mustNotCall tool called; with
    `exactly`, no call left over and no argument an entry does not name."""
    should_call: list[dict[str, Any]] = list(expect.get("shouldCall") or [])
    must_not_call: list[str] = list(expect.get("mustNotCall") or [])
    exactly = bool(expect.get("exactly"))
    adjacent = [
        [i for i, call in enumerate(calls) if _fits(entry, call, exactly)] for entry in should_call
    ]
    owner = _maximum_matching(adjacent)
    matched, used = set(owner.values()), set(owner)
    missing = [
        _missing(entry, calls, used, exactly)
        for index, entry in enumerate(should_call)
        if index not in matched
    ]
    banned = set(must_not_call)
    forbidden = sorted({call["tool"] for call in calls if call.get("tool") in banned})
    extra = []
    if exactly:
        extra = [{"call": i, "tool": c.get("tool")} for i, c in enumerate(calls) if i not in used]
    expected: dict[str, Any] = {"shouldCall": should_call, "mustNotCall": must_not_call}
    if exactly:
        expected["exactly"] = True
    return {
        "outcome": "fail" if missing or forbidden or extra else "pass",
        "expected": expected,
        "missing": missing,
        "extra": extra,
        "forbidden": forbidden,
    }


def grade_decisions(
    expect: dict[str, Any], calls: list[dict[str, Any]], corrected_calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """Grade the decisions part (`expect` is `expectation["decisions"]`): `right` against the
    corrected run's calls, `wrong` against its shouldCall and mustNotCall. Returns the outcome
    with its explanation: {outcome, expected, missing, extra, forbidden}."""
    verdict = expect.get("verdict")
    if verdict == "right":
        return _decisions_right(calls, corrected_calls)
    if verdict == "wrong":
        return _decisions_wrong(expect, calls)
    raise ValueError(f"decisions verdict must be right or wrong, not {verdict!r}")


# --- items ---------------------------------------------------------------------------------


def _key_text(value: Any) -> str | None:
    """A ranked key as the string keys compare by: 1 is "1"; booleans and the rest are no key."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return None


def element_key(element: Any) -> str | None:
    """An element's key: itself when a string or number, else its `key` field, else its `id`."""
    if isinstance(element, dict):
        key = _key_text(element.get("key"))
        return key if key is not None else _key_text(element.get("id"))
    return _key_text(element)


def _pointer_tokens(pointer: Any) -> list[str] | None:
    """A JSON Pointer's reference tokens, unescaped (RFC 6901); None when it is not one."""
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        return None
    if not pointer:
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _resolve(document: Any, tokens: list[str]) -> Any:
    """What the tokens point at in the document, or _MISSING."""
    for token in tokens:
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif (
            isinstance(document, list)
            and _ARRAY_INDEX.fullmatch(token)
            and int(token) < len(document)
        ):
            document = document[int(token)]
        else:
            return _MISSING
    return document


def _shared_array(items: list[dict[str, Any]], output: Any) -> list[Any] | None:
    """The array in the candidate's output that every item's pointer has as its parent, when
    they all have a pointer and the same parent; None otherwise."""
    parents: set[tuple[str, ...]] = set()
    for item in items:
        tokens = _pointer_tokens(item.get("pointer"))
        if not tokens:  # no pointer, not a pointer, or the whole output
            return None
        parents.add(tuple(tokens[:-1]))
    if len(parents) != 1:
        return None
    found = _resolve(output, list(parents.pop()))
    return found if isinstance(found, list) else None


def _ranked_keys(
    items: list[dict[str, Any]], output: Any, ranked: list[Any] | None
) -> list[str] | None:
    """The candidate's ranking as distinct keys, each at its first rank; None when there is none."""
    elements = ranked if ranked is not None else _shared_array(items, output)
    if elements is None:
        return None
    keys: dict[str, None] = {}  # ordered: a repeat keeps its first rank
    for element in elements:
        key = element_key(element)
        if key is None:
            return None
        keys.setdefault(key, None)
    return list(keys)


def _weights(k: int) -> list[float]:
    """wᵢ = 1 / log₂(i + 1) for ranks 1..k: a hit near the top counts more."""
    return [1 / math.log2(i + 1) for i in range(1, k + 1)]


def grade_items(
    items: list[dict[str, Any]], output: Any, ranked: list[Any] | None, threshold: float
) -> dict[str, Any]:
    """Grade a ranked answer by weighted precision at K (K = len(items)) against the best
    ranking the experts' verdicts allow. Returns {outcome, reason? (only when error), score,
    ideal, k, ranks: [{rank (1-based), key, verdict}], unjudged}."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], not {threshold!r}")
    k = len(items)
    verdicts: dict[str, str] = {}
    for item in items:
        verdicts.setdefault(item["key"], item["verdict"])
    weights = _weights(k)
    total = sum(weights)
    right = sum(1 for verdict in verdicts.values() if verdict == "right")
    ideal = sum(weights[:right]) / total if total else 0.0
    keys = _ranked_keys(items, output, ranked)
    if keys is None:
        return {
            "outcome": "error",
            "reason": NO_RANKED_LIST,
            "score": None,
            "ideal": ideal,
            "k": k,
            "ranks": [],
            "unjudged": [],
        }
    top = keys[:k]
    hits = sum(w for w, key in zip(weights, top, strict=False) if verdicts.get(key) == "right")
    score = hits / total if total else 0.0
    if ideal > 0:
        passed = score >= threshold * ideal - SCORE_TOLERANCE
    else:
        passed = all(verdicts.get(key) != "wrong" for key in top)
    return {
        "outcome": "pass" if passed else "fail",
        "score": score,
        "ideal": ideal,
        "k": k,
        "ranks": [
            {"rank": rank, "key": key, "verdict": verdicts.get(key)}
            for rank, key in enumerate(top, start=1)
        ],
        "unjudged": [key for key in top if key not in verdicts],
    }


# --- answer and the case ---------------------------------------------------------------------


def grade_answer(judge_configured: bool) -> dict[str, Any]:
    """The answer part's outcome before the judge speaks: pending for it, or ungraded without
    one (never guessed)."""
    if judge_configured:
        return {"outcome": "pending"}
    return {"outcome": "ungraded", "reason": NO_JUDGE}


def case_outcome(part_outcomes: Iterable[str]) -> str:
    """A case's outcome from its parts': fail, else error, else pending, else pass, else
    ungraded. A failure is news even while another part still waits."""
    outcomes = set(part_outcomes)
    unknown = outcomes - set(PART_OUTCOMES)
    if unknown:
        raise ValueError(f"unknown part outcomes: {sorted(unknown)}")
    return next(
        (o for o in ("fail", "error", "pending", "pass") if o in outcomes),
        "ungraded",
    )


@dataclass(frozen=True)
class Graded:
    """One graded case: its outcome, why it is an error (else None), and each part's outcome
    with its explanation, keyed "decisions", "answer", "items"."""

    outcome: str
    reason: str | None
    parts: dict[str, dict[str, Any]]


def grade_case(
    expect: dict[str, Any],
    corrected_calls: list[dict[str, Any]],
    result: dict[str, Any],
    threshold: float,
    judge_configured: bool,
) -> Graded:
    """Grade every part the expectation has against one result {output?, calls?, ranked?,
    error?}. A candidate that failed on the case is an error with its text, no part graded."""
    if result.get("error") is not None:
        return Graded("error", result["error"], {})
    parts: dict[str, dict[str, Any]] = {}
    if "decisions" in expect:
        parts["decisions"] = grade_decisions(
            expect["decisions"], result.get("calls") or [], corrected_calls
        )
    if "answer" in expect:
        parts["answer"] = grade_answer(judge_configured)
    if "items" in expect:
        parts["items"] = grade_items(
            expect["items"], result.get("output"), result.get("ranked"), threshold
        )
    outcome = case_outcome(part["outcome"] for part in parts.values())
    reason = None
    if outcome == "error":
        reason = next(p.get("reason") for p in parts.values() if p["outcome"] == "error")
    return Graded(outcome, reason, parts)


# --- statistics ------------------------------------------------------------------------------


def wilson(passed: int, total: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95 % by default): unlike p ± z·se it stays in
    [0, 1] and is honest at 0/n and n/n. Raises ValueError when total is 0 (no rate at all)."""
    if total <= 0 or not 0 <= passed <= total:
        raise ValueError(f"need 0 <= passed <= total and total > 0, not {passed}/{total}")
    p = passed / total
    z2 = z * z / total
    centre = (p + z2 / 2) / (1 + z2)
    half = z / (1 + z2) * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    low = 0.0 if passed == 0 else max(0.0, centre - half)  # exact ends, not 1e-17 off them
    high = 1.0 if passed == total else min(1.0, centre + half)
    return low, high


def _stirling_error(n: int) -> float:
    """log(n!) - log(√(2πn)·(n/e)ⁿ), computed apart so that log C(n, k) keeps full precision
    (Loader 2000); the series for n > 15, where it needs five terms."""
    if n <= 15:
        return math.lgamma(n + 1) - (n + 0.5) * math.log(n) + n - _LOG_SQRT_2PI
    nn = n * n
    return (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - 1 / (1188 * nn)) / nn) / nn) / nn) / n


def _deviance(x: float, mean: float) -> float:
    """x·log(x/mean) + mean - x without the cancellation when x is near mean (Loader's bd0)."""
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        s = (x - mean) * v
        term = 2 * x * v
        j = 1
        while True:
            term *= v * v
            following = s + term / (2 * j + 1)
            if following == s:
                return s
            s, j = following, j + 1
    return x * math.log(x / mean) + mean - x


def _binomial_half(k: int, n: int) -> float:
    """P(X = k) for X ~ Bin(n, 1/2), 0 < k < n, to a few ulps however large n is (lgamma's
    absolute error would grow with n)."""
    half = n / 2
    log_p = (
        _stirling_error(n)
        - _stirling_error(k)
        - _stirling_error(n - k)
        - _deviance(k, half)
        - _deviance(n - k, half)
    )
    return math.exp(log_p) * math.sqrt(n / (2 * math.pi * k * (n - k)))


def mcnemar_p(regressed: int, fixed: int) -> float:
    """The exact two-sided McNemar p-value: a binomial test of the discordant pairs at 1/2,
    min(1, 2·P(X ≤ min(b, c))) with X ~ Bin(b + c, 1/2); 1 when nothing changed. Sums down from
    the largest term and stops once the rest cannot matter, so n = 10⁶ takes milliseconds."""
    if regressed < 0 or fixed < 0:
        raise ValueError(f"counts must be >= 0, not {regressed}, {fixed}")
    n, low = regressed + fixed, min(regressed, fixed)
    if 2 * low + 1 >= n:  # P(X <= low) >= 1/2
        return 1.0
    if low == 0:
        return math.ldexp(1.0, 1 - n)
    term, tail = 1.0, 1.0  # in units of P(X = low)
    for k in range(low, 0, -1):
        ratio = k / (n - k + 1)  # P(X = k - 1) / P(X = k): below 1, and shrinking as k falls
        term *= ratio
        tail += term
        if term * ratio < (1 - ratio) * tail * 1e-17:  # bounds all that is left
            break
    return min(1.0, 2 * _binomial_half(low, n) * tail)


def compare_change(outcome: str | None, baseline_outcome: str | None) -> str:
    """How one case changed between a baseline run and a candidate run (None: not in that run),
    the first that applies: new, gone, errored, ungraded, regressed, fixed, still-failing,
    still-passing."""
    if outcome is None and baseline_outcome is None:
        raise ValueError("a case is in at least one of the two runs")
    if baseline_outcome is None:
        return "new"
    if outcome is None:
        return "gone"
    pair = {outcome, baseline_outcome}
    if not pair <= {*PART_OUTCOMES, "awaiting"}:
        raise ValueError(f"unknown outcomes: {outcome!r}, {baseline_outcome!r}")
    if "error" in pair:
        return "errored"
    if pair & {"ungraded", "pending", "awaiting"}:
        return "ungraded"
    return {
        ("pass", "fail"): "regressed",
        ("fail", "pass"): "fixed",
        ("fail", "fail"): "still-failing",
        ("pass", "pass"): "still-passing",
    }[baseline_outcome, outcome]


def _whys(found: dict[str, Any]) -> list[str]:
    """A decisions part's failed matchers and unnamed arguments in words, as `differs` says
    them (none for an entry without matchers or `exactly`)."""
    said = []
    for entry in found.get("missing") or []:
        nearest = entry.get("nearest") if isinstance(entry, dict) else None
        for diff in ((nearest or {}).get("differs") or {}).values():
            if "why" in diff:
                said.append(diff["why"])
    return said


def explain(parts: dict[str, Any] | None) -> str:
    """Why a case did not pass, part by part, in one line."""
    said = []
    for part, found in (parts or {}).items():
        if found.get("outcome") == "pass":
            continue
        words = [f"{part} {found.get('outcome')}"]
        if found.get("reason"):
            words.append(str(found["reason"]))
        for name in ("missing", "extra", "forbidden", "unjudged"):
            if found.get(name):
                words.append(f"{name} {json.dumps(found[name], ensure_ascii=False)}")
        words += _whys(found)
        if found.get("score") is not None:
            words.append(f"score {found['score']:.3f} of ideal {found['ideal']:.3f}")
        said.append(": ".join(words[:1]) + (" — " + "; ".join(words[1:]) if words[1:] else ""))
    return " | ".join(said)
