"""Grading without Flask or a database: each rule of docs/design.md §9.3 and §9.5 on
hand-computed values, and the properties that must hold for any input."""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kindgi.grading import (
    PART_OUTCOMES,
    Graded,
    case_outcome,
    compare_change,
    grade_answer,
    grade_case,
    grade_decisions,
    grade_items,
    json_equal,
    mcnemar_p,
    wilson,
)


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def wrong(
    should_call: list[dict[str, Any]], must_not_call: list[str] | None = None
) -> dict[str, Any]:
    return {"verdict": "wrong", "shouldCall": should_call, "mustNotCall": must_not_call or []}


def item(key: str, verdict: str, pointer: str | None = None) -> dict[str, Any]:
    return {"key": key, "verdict": verdict} | ({"pointer": pointer} if pointer is not None else {})


def exact_mcnemar(b: int, c: int) -> Fraction:
    """The McNemar p-value in exact integer and rational arithmetic: no rounding anywhere."""
    n, low = b + c, min(b, c)
    if n == 0:
        return Fraction(1)
    term = tail = 1  # C(n, 0), then C(n, k) from C(n, k - 1), exactly
    for k in range(1, low + 1):
        term = term * (n - k + 1) // k
        tail += term
    return min(Fraction(1), Fraction(2 * tail, 2**n))


# --- json_equal ------------------------------------------------------------------------------


def test_json_equal_compares_numbers_by_value() -> None:
    assert json_equal(1, 1.0)
    assert json_equal(0, -0.0)
    assert json_equal(2**53, float(2**53))
    assert not json_equal(1, 1.5)
    assert not json_equal(1, "1")


def test_json_equal_keeps_booleans_apart_from_numbers() -> None:
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert not json_equal({"n": True}, {"n": 1})
    assert json_equal(True, True)
    assert not json_equal(True, False)


def test_json_equal_compares_objects_and_arrays_deeply_by_the_same_rule() -> None:
    assert json_equal({"a": [1, {"b": 2.0}], "c": None}, {"c": None, "a": [1.0, {"b": 2}]})
    assert not json_equal({"a": [1, {"b": True}]}, {"a": [1, {"b": 1}]})
    assert not json_equal([1, 2], [2, 1])
    assert not json_equal([1], [1, 1])
    assert not json_equal({"a": None}, {})
    assert not json_equal({"a": 1}, [1])


# --- decisions: right ----------------------------------------------------------------------------


def test_decisions_right_passes_on_the_same_set_of_tools() -> None:
    corrected = [call("search", q="x"), call("fetch", id=1)]
    assert grade_decisions({"verdict": "right"}, corrected, corrected) == {
        "outcome": "pass",
        "expected": ["fetch", "search"],
        "missing": [],
        "extra": [],
        "forbidden": [],
    }


def test_decisions_right_ignores_order_repeats_and_args() -> None:
    corrected = [call("search", q="x"), call("fetch", id=1)]
    calls = [call("fetch", id=9), call("search"), call("fetch"), call("search", q="other")]
    assert grade_decisions({"verdict": "right"}, calls, corrected)["outcome"] == "pass"


def test_decisions_right_names_the_missing_and_extra_tools_sorted() -> None:
    corrected = [call("search"), call("fetch"), call("answer")]
    calls = [call("write"), call("search"), call("delete"), call("write")]
    assert grade_decisions({"verdict": "right"}, calls, corrected) == {
        "outcome": "fail",
        "expected": ["answer", "fetch", "search"],
        "missing": ["answer", "fetch"],
        "extra": ["delete", "write"],
        "forbidden": [],
    }


def test_decisions_right_passes_when_neither_run_called_a_tool() -> None:
    assert grade_decisions({"verdict": "right"}, [], [])["outcome"] == "pass"


def test_decisions_right_fails_a_candidate_that_calls_nothing_when_the_run_did() -> None:
    graded = grade_decisions({"verdict": "right"}, [], [call("search")])
    assert (graded["outcome"], graded["missing"], graded["extra"]) == ("fail", ["search"], [])


def test_decisions_with_an_unknown_verdict_are_refused() -> None:
    with pytest.raises(ValueError, match="right or wrong"):
        grade_decisions({"verdict": "maybe"}, [], [])


# --- decisions: wrong ----------------------------------------------------------------------------


def test_decisions_wrong_passes_when_every_entry_has_a_call_and_nothing_banned_is_called() -> None:
    expect = wrong([call("search", q="x")], ["delete"])
    graded = grade_decisions(expect, [call("fetch"), call("search", q="x", page=2)], [])
    assert graded == {
        "outcome": "pass",
        "expected": {"shouldCall": [call("search", q="x")], "mustNotCall": ["delete"]},
        "missing": [],
        "extra": [],
        "forbidden": [],
    }


def test_decisions_wrong_finds_the_matching_a_greedy_matcher_misses() -> None:
    # Greedy gives search(q=x) to the any-args entry, then nothing is left for the q=x entry.
    expect = wrong([call("search"), call("search", q="x")])
    graded = grade_decisions(expect, [call("search", q="x"), call("search", q="y")], [])
    assert graded["outcome"] == "pass"
    assert graded["missing"] == []


def test_decisions_wrong_needs_a_distinct_call_for_each_entry() -> None:
    expect = wrong([call("search"), call("search")])
    graded = grade_decisions(expect, [call("search", q="x")], [])
    assert graded["outcome"] == "fail"
    # The only search call is taken by the first entry: nearest is it, differing in nothing.
    assert graded["missing"] == [
        {"tool": "search", "args": {}, "nearest": {"call": 0, "differs": {}}}
    ]


def test_decisions_wrong_compares_listed_args_by_json_value() -> None:
    expect = wrong([call("page", n=1, opts={"tags": ["a", 2]})])
    same = call("page", n=1.0, opts={"tags": ["a", 2.0]}, extra="ignored")
    assert grade_decisions(expect, [same], [])["outcome"] == "pass"
    boolean = call("page", n=True, opts={"tags": ["a", 2]})
    graded = grade_decisions(expect, [boolean], [])
    assert graded["outcome"] == "fail"
    assert graded["missing"][0]["nearest"] == {
        "call": 0,
        "differs": {"n": {"expected": 1, "got": True}},
    }
    nested = call("page", n=1, opts={"tags": ["a", True]})
    assert grade_decisions(expect, [nested], [])["missing"][0]["nearest"]["differs"] == {
        "opts": {"expected": {"tags": ["a", 2]}, "got": {"tags": ["a", True]}}
    }


def test_decisions_wrong_treats_an_absent_field_as_differing_even_from_null() -> None:
    expect = wrong([call("search", q=None)])
    graded = grade_decisions(expect, [call("search")], [])
    assert graded["outcome"] == "fail"
    assert graded["missing"] == [
        {
            "tool": "search",
            "args": {"q": None},
            "nearest": {"call": 0, "differs": {"q": {"expected": None}}},
        }
    ]
    assert grade_decisions(expect, [call("search", q=None)], [])["outcome"] == "pass"


def test_decisions_wrong_names_the_call_with_the_fewest_differing_fields_as_nearest() -> None:
    expect = wrong([call("search", q="x", n=1, lang="en")])
    calls = [
        call("search", q="y", n=2, lang="en"),
        call("fetch", q="x", n=1, lang="en"),
        call("search", q="x", n=2, lang="en"),
        call("search", q="x", n=3, lang="en"),
    ]
    nearest = grade_decisions(expect, calls, [])["missing"][0]["nearest"]
    # Calls 2 and 3 both differ only in n: the lower index wins; fetch is another tool.
    assert nearest == {"call": 2, "differs": {"n": {"expected": 1, "got": 2}}}


def test_decisions_wrong_looks_for_the_nearest_call_among_unused_calls_first() -> None:
    expect = wrong([call("search", q="x"), call("search", q="x")])
    graded = grade_decisions(expect, [call("search", q="x"), call("search", q="y")], [])
    assert graded["missing"] == [
        {
            "tool": "search",
            "args": {"q": "x"},
            "nearest": {"call": 1, "differs": {"q": {"expected": "x", "got": "y"}}},
        }
    ]


def test_decisions_wrong_has_no_nearest_call_when_the_tool_was_never_called() -> None:
    graded = grade_decisions(wrong([call("search", q="x")]), [call("fetch", q="x")], [])
    assert graded["missing"] == [{"tool": "search", "args": {"q": "x"}, "nearest": None}]


def test_decisions_wrong_fails_on_banned_tools_and_names_each_once_sorted() -> None:
    expect = wrong([call("search")], ["send", "delete"])
    calls = [call("send"), call("search"), call("delete"), call("send")]
    graded = grade_decisions(expect, calls, [])
    assert (graded["outcome"], graded["missing"], graded["forbidden"]) == (
        "fail",
        [],
        ["delete", "send"],
    )


def test_decisions_wrong_with_only_banned_tools_passes_when_none_is_called() -> None:
    expect = {"verdict": "wrong", "mustNotCall": ["delete"]}
    graded = grade_decisions(expect, [call("search")], [call("delete")])
    assert graded == {
        "outcome": "pass",
        "expected": {"shouldCall": [], "mustNotCall": ["delete"]},
        "missing": [],
        "extra": [],
        "forbidden": [],
    }


# --- items ---------------------------------------------------------------------------------------

# the worked example of docs/design.md §9.3 (and docs/grading.md): A, C and E right, B wrong
DESIGN_ITEMS = [item("A", "right"), item("B", "wrong"), item("C", "right"), item("E", "right")]


def test_items_grade_the_design_example() -> None:
    graded = grade_items(DESIGN_ITEMS, None, ["A", "B", "C", "D", "E"], 0.8)
    assert graded["outcome"] == "fail"
    assert round(graded["score"], 3) == 0.586
    assert round(graded["ideal"], 3) == 0.832
    assert graded["score"] == pytest.approx(1.5 / (1 + 1 / math.log2(3) + 0.5 + 1 / math.log2(5)))
    assert graded["k"] == 4
    assert graded["ranks"] == [
        {"rank": 1, "key": "A", "verdict": "right"},
        {"rank": 2, "key": "B", "verdict": "wrong"},
        {"rank": 3, "key": "C", "verdict": "right"},
        {"rank": 4, "key": "D", "verdict": None},
    ]
    assert graded["unjudged"] == ["D"]
    assert "reason" not in graded


def test_items_pass_when_the_score_reaches_the_threshold_times_the_ideal() -> None:
    # 0.586 >= 0.7 x 0.832 = 0.582
    assert grade_items(DESIGN_ITEMS, None, ["A", "B", "C", "D", "E"], 0.7)["outcome"] == "pass"
    best = grade_items(DESIGN_ITEMS, None, ["E", "C", "A", "B"], 1.0)
    assert (best["outcome"], best["score"]) == ("pass", best["ideal"])


def test_items_take_k_from_the_expectation_not_from_the_candidate_list() -> None:
    items = [item("A", "right"), item("B", "wrong")]
    graded = grade_items(items, None, ["B", "X", "A", "A"], 0.5)
    assert (graded["k"], graded["score"], graded["ideal"]) == (2, 0.0, 1 / (1 + 1 / math.log2(3)))
    assert [row["key"] for row in graded["ranks"]] == ["B", "X"]
    assert graded["outcome"] == "fail"


def test_items_count_the_ranks_a_short_list_lacks_as_misses() -> None:
    items = [item("A", "right"), item("C", "right")]
    graded = grade_items(items, None, ["A"], 0.5)
    assert graded["score"] == pytest.approx(1 / (1 + 1 / math.log2(3)))  # 0.613
    assert graded["ideal"] == 1.0
    assert graded["ranks"] == [{"rank": 1, "key": "A", "verdict": "right"}]
    assert graded["outcome"] == "pass"
    assert grade_items(items, None, [], 0.5)["score"] == 0.0


def test_items_compare_keys_as_strings() -> None:
    items = [item("1", "right"), item("2.5", "right")]
    assert grade_items(items, None, [1, 2.5], 1.0)["score"] == 1.0
    assert grade_items(items, None, ["1", "2.5"], 1.0)["score"] == 1.0
    # A float is its repr: 1.0 is "1.0", not "1".
    assert grade_items(items, None, [1.0, 2.5], 1.0)["ranks"][0] == {
        "rank": 1,
        "key": "1.0",
        "verdict": None,
    }


def test_items_count_a_repeated_key_at_its_first_rank_only() -> None:
    items = [item("A", "right"), item("B", "right")]
    graded = grade_items(items, None, ["A", "A", "B"], 1.0)
    assert [row["key"] for row in graded["ranks"]] == ["A", "B"]
    assert graded["score"] == 1.0
    # "1" and 1 are one key too.
    assert [row["key"] for row in grade_items(items, None, [1, "1", "A"], 1.0)["ranks"]] == [
        "1",
        "A",
    ]


def test_items_with_ideal_zero_pass_unless_a_wrong_item_is_in_the_top_k() -> None:
    items = [item("A", "wrong"), item("B", "wrong")]
    graded = grade_items(items, None, ["C", "D", "A"], 0.8)
    assert (graded["outcome"], graded["score"], graded["ideal"]) == ("pass", 0.0, 0.0)
    assert graded["unjudged"] == ["C", "D"]
    assert grade_items(items, None, ["C", "A"], 0.8)["outcome"] == "fail"


def test_items_read_the_ranking_from_the_array_the_pointers_share() -> None:
    items = [item("A", "right", "/matches/0"), item("B", "wrong", "/matches/3")]
    output = {"matches": [{"key": "A", "id": "Z"}, {"id": "B"}, "C", 7], "total": 4}
    graded = grade_items(items, output, None, 0.8)
    assert [row["key"] for row in graded["ranks"]] == ["A", "B"]
    assert graded["outcome"] == "pass"
    assert graded["score"] == 1 / (1 + 1 / math.log2(3))


def test_items_prefer_the_sent_ranking_over_the_output() -> None:
    items = [item("A", "right", "/matches/0"), item("B", "wrong", "/matches/1")]
    graded = grade_items(items, {"matches": ["B", "A"]}, ["A", "B"], 0.8)
    assert [row["key"] for row in graded["ranks"]] == ["A", "B"]


def test_items_follow_escaped_pointer_tokens_and_a_top_level_array() -> None:
    items = [item("A", "right", "/a~1b/m~0n/0")]
    assert grade_items(items, {"a/b": {"m~n": ["A"]}}, None, 1.0)["outcome"] == "pass"
    assert grade_items([item("A", "right", "/0")], ["A"], None, 1.0)["outcome"] == "pass"


@pytest.mark.parametrize(
    ("items", "output"),
    [
        pytest.param([item("A", "right"), item("B", "right")], {"m": ["A"]}, id="no-pointers"),
        pytest.param(
            [item("A", "right", "/m/0"), item("B", "right")], {"m": ["A", "B"]}, id="one-pointer"
        ),
        pytest.param(
            [item("A", "right", "/m/0"), item("B", "right", "/n/0")],
            {"m": ["A"], "n": ["B"]},
            id="different-parents",
        ),
        pytest.param([item("A", "right", "/m/0")], {"m": [{"name": "A"}]}, id="no-key"),
        pytest.param([item("A", "right", "/m/0")], {"m": ["A", True]}, id="boolean-element"),
        pytest.param([item("A", "right", "/m/0")], {"m": ["A", None]}, id="null-element"),
        pytest.param([item("A", "right", "/m/0")], {"m": [{"key": None}]}, id="null-key"),
        pytest.param([item("A", "right", "/m/x")], {"m": {"x": "A"}}, id="parent-an-object"),
        pytest.param([item("A", "right", "/m/0")], {"n": ["A"]}, id="parent-missing"),
        pytest.param([item("A", "right", "/m/0/0")], {"m": ["A"]}, id="parent-a-string"),
        pytest.param([item("A", "right", "/m/01/0")], {"m": [[], ["A"]]}, id="leading-zero"),
        pytest.param([item("A", "right", "")], ["A"], id="pointer-to-the-whole-output"),
    ],
)
def test_items_without_a_ranked_list_are_an_error(items: list[dict], output: Any) -> None:
    assert grade_items(items, output, None, 0.8) == {
        "outcome": "error",
        "reason": "no-ranked-list",
        "score": None,
        "ideal": 1.0,  # every item is right
        "k": len(items),
        "ranks": [],
        "unjudged": [],
    }


def test_items_error_on_a_sent_ranking_with_an_element_that_has_no_key() -> None:
    assert grade_items([item("A", "right")], None, ["A", True], 0.8)["reason"] == "no-ranked-list"


def test_items_with_no_items_score_zero_and_pass_on_any_sent_ranking() -> None:
    graded = grade_items([], None, ["A"], 0.8)
    assert graded == {
        "outcome": "pass",
        "score": 0.0,
        "ideal": 0.0,
        "k": 0,
        "ranks": [],
        "unjudged": [],
    }
    assert grade_items([], {"m": ["A"]}, None, 0.8)["reason"] == "no-ranked-list"


def test_items_refuse_a_threshold_outside_zero_to_one() -> None:
    with pytest.raises(ValueError, match="threshold"):
        grade_items([item("A", "right")], None, ["A"], 1.5)


# --- answer, case outcome, grade_case ------------------------------------------------------------


def test_the_answer_waits_for_a_judge_and_is_ungraded_without_one() -> None:
    assert grade_answer(True) == {"outcome": "pending"}
    assert grade_answer(False) == {"outcome": "ungraded", "reason": "no judge is configured"}


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (["pass", "pending", "error", "fail", "ungraded"], "fail"),
        (["pass", "pending", "error", "ungraded"], "error"),
        (["ungraded", "pass", "pending"], "pending"),
        (["ungraded", "pass"], "pass"),
        (["ungraded", "ungraded"], "ungraded"),
        ([], "ungraded"),
    ],
)
def test_a_case_outcome_takes_the_first_of_fail_error_pending_pass(
    parts: list[str], expected: str
) -> None:
    assert case_outcome(parts) == expected
    assert case_outcome(iter(parts)) == expected


def test_a_case_outcome_refuses_an_unknown_part_outcome() -> None:
    with pytest.raises(ValueError, match="unknown"):
        case_outcome(["pass", "awaiting"])


EXPECT = {
    "decisions": {"verdict": "right"},
    "answer": {"verdict": "right"},
    "items": [item("A", "right", "/m/0")],
}


def test_a_candidate_error_makes_the_case_an_error_and_grades_no_part() -> None:
    result = {"error": "timed out after 30 s", "calls": [call("search")]}
    assert grade_case(EXPECT, [call("search")], result, 0.8, True) == Graded(
        "error", "timed out after 30 s", {}
    )


def test_grade_case_grades_each_part_the_expectation_has() -> None:
    result = {"output": {"m": ["A"]}, "calls": [call("search")]}
    graded = grade_case(EXPECT, [call("search")], result, 0.8, judge_configured=False)
    assert list(graded.parts) == ["decisions", "answer", "items"]
    assert graded.parts["answer"] == {"outcome": "ungraded", "reason": "no judge is configured"}
    assert graded.parts["items"]["score"] == 1.0
    assert (graded.outcome, graded.reason) == ("pass", None)
    waiting = grade_case(EXPECT, [call("search")], result, 0.8, judge_configured=True)
    assert (waiting.outcome, waiting.reason) == ("pending", None)


def test_grade_case_grades_only_the_parts_the_expectation_has() -> None:
    expect = {"decisions": wrong([call("search")])}
    graded = grade_case(expect, [], {"output": "hello"}, 0.8, True)
    assert list(graded.parts) == ["decisions"]
    assert graded.parts["decisions"]["missing"] == [{"tool": "search", "args": {}, "nearest": None}]
    assert (graded.outcome, graded.reason) == ("fail", None)


def test_grade_case_takes_its_reason_from_the_part_that_errs() -> None:
    result = {"output": {"other": ["A"]}, "calls": [call("search")]}
    graded = grade_case(EXPECT, [call("search")], result, 0.8, True)
    assert graded.parts["items"]["outcome"] == "error"
    assert (graded.outcome, graded.reason) == ("error", "no-ranked-list")


def test_a_failing_part_outweighs_one_that_errs() -> None:
    result = {"output": {"other": ["A"]}, "calls": []}
    graded = grade_case(EXPECT, [call("search")], result, 0.8, True)
    assert (graded.outcome, graded.reason) == ("fail", None)


# --- statistics ----------------------------------------------------------------------------------


def test_wilson_matches_known_intervals() -> None:
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=5e-5)
    assert wilson(50, 100) == pytest.approx((0.4038, 0.5962), abs=5e-5)
    assert wilson(0, 10) == (0.0, pytest.approx(0.2775, abs=5e-5))
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=5e-5), 1.0)
    # z = 1: centre (0.8 + 0.05) / 1.1 = 0.77273, half sqrt(0.016 + 0.0025) / 1.1 = 0.12365
    assert wilson(8, 10, z=1.0) == pytest.approx((0.6491, 0.8964), abs=5e-5)


@pytest.mark.parametrize(("passed", "total"), [(0, 0), (3, 2), (-1, 2)])
def test_wilson_refuses_counts_that_are_no_rate(passed: int, total: int) -> None:
    with pytest.raises(ValueError):
        wilson(passed, total)


@pytest.mark.parametrize(
    ("regressed", "fixed", "expected"),
    [
        (0, 0, 1.0),
        (5, 0, 0.0625),
        (0, 5, 0.0625),
        (1, 9, 0.021484375),  # 2 x (1 + 10) / 1024
        (9, 1, 0.021484375),
        (1, 0, 1.0),
        (3, 4, 1.0),
        (4, 4, 1.0),
        (2, 10, 0.0385742187500),  # 2 x (1 + 12 + 66) / 4096
    ],
)
def test_mcnemar_p_gives_exact_binomial_values(regressed: int, fixed: int, expected: float) -> None:
    assert mcnemar_p(regressed, fixed) == pytest.approx(expected, rel=1e-14)


def test_mcnemar_p_is_exact_and_fast_for_large_counts() -> None:
    started = time.perf_counter()
    p = mcnemar_p(500, 560)
    assert time.perf_counter() - started < 0.5
    assert p == pytest.approx(float(exact_mcnemar(500, 560)), rel=1e-12)
    assert mcnemar_p(4000, 4300) == pytest.approx(float(exact_mcnemar(4000, 4300)), rel=1e-12)
    assert mcnemar_p(1000, 3000) == pytest.approx(float(exact_mcnemar(1000, 3000)), rel=1e-12)


def test_mcnemar_p_takes_milliseconds_at_a_million_pairs() -> None:
    started = time.perf_counter()
    p = mcnemar_p(499_000, 501_000)
    assert time.perf_counter() - started < 0.5
    # The normal approximation with continuity correction, to its own precision.
    z = (2000 - 1) / math.sqrt(1_000_000)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-3)


def test_mcnemar_p_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_p(-1, 3)


@pytest.mark.parametrize(
    ("outcome", "baseline", "change"),
    [
        ("pass", None, "new"),
        ("error", None, "new"),
        (None, "fail", "gone"),
        ("error", "pass", "errored"),
        ("fail", "error", "errored"),
        ("error", "ungraded", "errored"),
        ("ungraded", "pass", "ungraded"),
        ("fail", "pending", "ungraded"),
        ("awaiting", "fail", "ungraded"),
        ("fail", "pass", "regressed"),
        ("pass", "fail", "fixed"),
        ("fail", "fail", "still-failing"),
        ("pass", "pass", "still-passing"),
    ],
)
def test_compare_change_takes_the_first_change_that_applies(
    outcome: str | None, baseline: str | None, change: str
) -> None:
    assert compare_change(outcome, baseline) == change


@pytest.mark.parametrize(("outcome", "baseline"), [(None, None), ("pass", "passed")])
def test_compare_change_refuses_what_is_no_pair_of_outcomes(
    outcome: str | None, baseline: str | None
) -> None:
    with pytest.raises(ValueError):
        compare_change(outcome, baseline)


# --- properties ----------------------------------------------------------------------------------

KEYS = st.sampled_from(["A", "B", "C", "D", "E", "F", "G"])
TOOLS = st.sampled_from(["search", "fetch", "send"])
VALUES = st.sampled_from(["x", "y", 1, 1.0, 2, True, None, [1], {"a": 1}])
ARGS = st.dictionaries(st.sampled_from(["q", "n"]), VALUES, max_size=2)
CALLS = st.lists(st.fixed_dictionaries({"tool": TOOLS, "args": ARGS}), max_size=5)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.lists(st.tuples(KEYS, st.sampled_from(["right", "wrong"])), unique_by=lambda t: t[0]),
    st.lists(KEYS | st.integers(0, 3), max_size=10),
    st.floats(0, 1),
)
def test_a_score_never_exceeds_its_ideal_and_both_lie_in_zero_to_one(
    verdicts: list[tuple[str, str]], ranked: list[Any], threshold: float
) -> None:
    graded = grade_items([item(k, v) for k, v in verdicts], None, ranked, threshold)
    assert 0 <= graded["score"] <= graded["ideal"] + 1e-9
    assert graded["ideal"] <= 1 + 1e-9
    assert len(graded["ranks"]) <= len(verdicts)


@given(CALLS, CALLS, st.data())
def test_decisions_right_ignores_order_and_repeats(
    calls: list[dict], corrected: list[dict], data: st.DataObject
) -> None:
    graded = grade_decisions({"verdict": "right"}, calls, corrected)
    shuffled = data.draw(st.permutations(calls))
    repeats = data.draw(st.lists(st.sampled_from(calls), max_size=4)) if calls else []
    again = grade_decisions({"verdict": "right"}, shuffled + repeats, corrected)
    assert again == graded


@given(CALLS, CALLS, st.data())
def test_decisions_wrong_ignores_the_order_of_calls(
    should_call: list[dict], calls: list[dict], data: st.DataObject
) -> None:
    expect = wrong(should_call)
    outcome = grade_decisions(expect, calls, [])["outcome"]
    assert grade_decisions(expect, data.draw(st.permutations(calls)), [])["outcome"] == outcome


@given(CALLS, CALLS, st.lists(TOOLS, min_size=1, max_size=2), st.data())
def test_adding_a_banned_call_never_turns_a_fail_into_a_pass(
    should_call: list[dict], calls: list[dict], banned: list[str], data: st.DataObject
) -> None:
    # Stronger than asked: with a banned call anywhere, whatever it was before, it fails.
    expect = wrong(should_call, banned)
    extra = {"tool": data.draw(st.sampled_from(banned)), "args": data.draw(ARGS)}
    at = data.draw(st.integers(0, len(calls)))
    after = grade_decisions(expect, [*calls[:at], extra, *calls[at:]], [])
    assert after["outcome"] == "fail"
    assert extra["tool"] in after["forbidden"]


def brute_force_matching_size(entries: list[dict], calls: list[dict]) -> int:
    """The largest number of entries met by distinct calls, by trying every assignment."""

    def fits(entry: dict, candidate: dict) -> bool:
        args = candidate["args"]
        return entry["tool"] == candidate["tool"] and all(
            field in args and json_equal(args[field], value)
            for field, value in entry["args"].items()
        )

    slots: list[int | None] = [*range(len(calls)), *[None] * len(entries)]
    return max(
        sum(
            1
            for entry, index in zip(entries, chosen, strict=True)
            if index is not None and fits(entry, calls[index])
        )
        for chosen in itertools.permutations(slots, len(entries))
    )


SMALL_CALLS = st.lists(
    st.fixed_dictionaries(
        {
            "tool": st.sampled_from(["search", "fetch"]),
            "args": st.dictionaries(
                st.sampled_from(["q", "n"]), st.sampled_from(["x", "y", 1]), max_size=2
            ),
        }
    ),
    max_size=4,
)


@given(SMALL_CALLS.filter(lambda entries: len(entries) <= 3), SMALL_CALLS)
def test_decisions_wrong_finds_a_matching_whenever_one_exists(
    entries: list[dict], calls: list[dict]
) -> None:
    graded = grade_decisions(wrong(entries), calls, [])
    best = brute_force_matching_size(entries, calls)
    assert len(graded["missing"]) == len(entries) - best
    assert (graded["outcome"] == "pass") == (best == len(entries))


@given(st.integers(0, 400), st.integers(0, 400))
def test_mcnemar_p_is_symmetric_exact_and_in_zero_to_one(regressed: int, fixed: int) -> None:
    p = mcnemar_p(regressed, fixed)
    assert p == mcnemar_p(fixed, regressed)
    assert 0 < p <= 1
    assert p == pytest.approx(float(exact_mcnemar(regressed, fixed)), rel=1e-12)


@given(JSON)
def test_json_equal_holds_between_a_value_and_itself(value: Any) -> None:
    assert json_equal(value, value)


@given(st.integers(-(2**53), 2**53))
def test_json_equal_holds_between_an_integer_and_its_float(n: int) -> None:
    assert json_equal(n, float(n))
    assert json_equal([n], [float(n)])


def test_every_part_outcome_is_a_case_outcome_of_its_own() -> None:
    for outcome in PART_OUTCOMES:
        assert case_outcome([outcome]) == outcome
