"""Argument matchers and `exactly` (issue 26, docs/grading.md §3): the pure rules as a table, then
through HTTP: added and read back as given, graded through the results endpoint, and every bad
matcher a 400 naming the entry and the argument that changes nothing."""

from __future__ import annotations

import html
from typing import Any

import pytest
from conftest import AGENT, P1, error_of, ok, sign_in

from kindgi import matchers
from kindgi.grading import explain, grade_decisions

CITY = {"city": {"anyOf": ["NY", "New York"]}}


def wrong(*entries: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"verdict": "wrong", "shouldCall": list(entries), **more}


def call(tool: str = "weather", **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def outcome(expect: dict[str, Any], *calls: dict[str, Any]) -> str:
    return grade_decisions(expect, list(calls), [])["outcome"]


# --- the rules, one row each -----------------------------------------------------------------

PASS, FAIL = "pass", "fail"
ABSENT = object()  # the call does not pass the argument
ARRAY_OF_TEXT = {"type": "array", "items": {"type": "string"}}
ROWS = [
    ("anyOf takes any of its values", {"anyOf": ["NY", "New York"]}, "New York", PASS),
    ("anyOf compares by JSON value", {"anyOf": [1, [2]]}, [2.0], PASS),
    ("anyOf refuses what it does not list", {"anyOf": ["NY"]}, "ny", FAIL),
    ("anyOf keeps booleans apart from numbers", {"anyOf": [1]}, True, FAIL),
    ("absent fails a matcher", {"anyOf": ["NY"]}, ABSENT, FAIL),
    ("absent fits an optional one", {"anyOf": ["NY"], "optional": True}, ABSENT, PASS),
    ("optional still checks a value", {"anyOf": ["NY"], "optional": True}, "LA", FAIL),
    ("text is exact by default", {"text": "Acoustic"}, "acoustic", FAIL),
    ("ignore case folds case", {"text": "Straße", "ignore": ["case"]}, "STRASSE", PASS),
    ("ignore space removes every space", {"text": "a b", "ignore": ["space"]}, "a\tb ", PASS),
    (
        "ignore punctuation removes category P",
        {"text": "a-b", "ignore": ["punctuation"]},
        "«ab»!",
        PASS,
    ),
    ("ignore punctuation keeps symbols", {"text": "ab", "ignore": ["punctuation"]}, "a+b", FAIL),
    ("ignore chars removes those only", {"text": "a.b", "ignore": [{"chars": ". "}]}, "a b", PASS),
    ("ignore chars keeps the rest", {"text": "ab", "ignore": [{"chars": "."}]}, "a-b", FAIL),
    ("text takes any of a list", {"text": ["x", "y"]}, "y", PASS),
    ("text refuses a value that is not text", {"text": "1"}, 1, FAIL),
    ("number within tolerance", {"number": 20, "tolerance": 0.5}, 20.5, PASS),
    ("number past tolerance", {"number": 20, "tolerance": 0.5}, 20.6, FAIL),
    ("number without tolerance is exact", {"number": 3}, 3.0, PASS),
    ("number refuses a boolean", {"number": 1}, True, FAIL),
    ("number refuses text", {"number": 1}, "1", FAIL),
    ("schema valid", {"schema": ARRAY_OF_TEXT}, ["a"], PASS),
    ("schema invalid", {"schema": ARRAY_OF_TEXT}, [1], FAIL),
    ("schema says 3.0 is an integer", {"schema": {"type": "integer"}}, 3.0, PASS),
    (
        "schema with a $ref within it",
        {"schema": {"$ref": "#/$defs/n", "$defs": {"n": {"enum": [2]}}}},
        2,
        PASS,
    ),
    (
        "schema's data may hold keywords",
        {"schema": {"enum": [{"pattern": "x"}]}},
        {"pattern": "x"},
        PASS,
    ),
    ("type integer refuses 3.0", {"anyOf": [3], "type": "integer"}, 3.0, FAIL),
    ("type integer takes 3", {"anyOf": [3], "type": "integer"}, 3, PASS),
    ("type number takes an integer", {"number": 3, "type": "number"}, 3, PASS),
    ("type on schema refuses 3.0", {"schema": {}, "type": "integer"}, 3.0, FAIL),
]


@pytest.mark.parametrize(
    ("matcher", "value", "expected"), [pytest.param(*r[1:], id=r[0]) for r in ROWS]
)
def test_a_matcher_grades_a_value_by_its_rule(matcher, value, expected) -> None:
    assert matchers.problems(matcher) == []
    args = {} if value is ABSENT else {"x": value}
    expect = wrong({"tool": "weather", "args": {}, "match": {"x": matcher}})
    assert outcome(expect, call(**args)) == expected


def test_args_and_match_both_hold_and_unlisted_arguments_are_free_without_exactly() -> None:
    entry = {"tool": "weather", "args": {"days": 3}, "match": CITY}
    assert outcome(wrong(entry), call(days=3, city="NY", units="C")) == PASS
    assert outcome(wrong(entry), call(days=4, city="NY")) == FAIL


EXACT = wrong({"tool": "weather", "args": {"days": 3}, "match": CITY}, exactly=True)


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        pytest.param([call(days=3, city="NY")], PASS, id="the calls named, nothing else"),
        pytest.param([call(days=3, city="NY", units="C")], FAIL, id="an argument not named"),
        pytest.param([call(days=3, city="NY"), call("news")], FAIL, id="an extra call"),
        pytest.param([call(days=3, city="NY")] * 2, FAIL, id="the same call twice"),
        pytest.param([], FAIL, id="no call"),
    ],
)
def test_exactly_wants_the_entries_calls_one_to_one_and_nothing_more(calls, expected) -> None:
    assert outcome(EXACT, *calls) == expected


def test_exactly_lists_the_calls_left_over_and_still_honours_must_not_call() -> None:
    graded = grade_decisions(
        {**EXACT, "mustNotCall": ["mail"]}, [call(days=3, city="NY"), call("mail")], []
    )
    assert graded["extra"] == [{"call": 1, "tool": "mail"}]
    assert graded["forbidden"] == ["mail"]
    assert graded["expected"]["exactly"] is True


def test_an_optional_argument_the_entry_names_is_no_extra_under_exactly() -> None:
    expect = wrong({"tool": "t", "match": {"x": {"anyOf": [1], "optional": True}}}, exactly=True)
    assert outcome(expect, call("t")) == PASS
    assert outcome(expect, call("t", x=1)) == PASS
    assert outcome(expect, call("t", x=1, y=2)) == FAIL


def test_the_explanation_names_the_matcher_that_failed() -> None:
    graded = grade_decisions(wrong({"tool": "weather", "match": CITY}), [call(city="Boston")], [])
    (missing,) = graded["missing"]
    assert missing["match"] == CITY
    assert missing["nearest"] == {
        "call": 0,
        "differs": {
            "city": {
                "match": CITY["city"],
                "got": "Boston",
                "why": '`city`: got "Boston", expected any of "NY", "New York"',
            }
        },
    }


@pytest.mark.parametrize(
    ("matcher", "args", "said"),
    [
        (
            {"text": "a", "ignore": ["case", {"chars": "-"}]},
            {},
            'absent, expected text "a" ignoring case, the characters "-"',
        ),
        ({"number": 2, "tolerance": 0.1}, {"x": 3}, "got 3, expected 2 ± 0.1"),
        ({"anyOf": [3], "type": "integer"}, {"x": 3.0}, "got 3.0, expected an integer, any of 3"),
        (
            {"schema": {"type": "string"}},
            {"x": 1},
            'got 1, expected a value valid against the schema {"type": "string"}',
        ),
    ],
)
def test_why_not_says_what_came_and_what_the_matcher_wanted(matcher, args, said) -> None:
    assert matchers.why_not("x", matcher, args) == f"`x`: {said}"


def test_exactly_names_an_argument_the_entry_does_not() -> None:
    graded = grade_decisions(EXACT, [call(days=3, city="NY", units="C")], [])
    assert graded["missing"][0]["nearest"]["differs"] == {
        "units": {"got": "C", "why": "`units`: not named by the entry"}
    }


def test_the_one_line_explanation_ends_with_each_failed_matcher_in_words() -> None:
    graded = grade_decisions(EXACT, [call(days=3, city="LA", units="C")], [])
    said = explain({"decisions": graded})
    assert said.endswith(
        '; `city`: got "LA", expected any of "NY", "New York"; `units`: not named by the entry'
    )
    plain = grade_decisions(wrong({"tool": "s", "args": {"q": 1}}), [call("s", q=2)], [])
    assert explain({"decisions": plain}) == (
        'decisions fail — missing [{"tool": "s", "args": {"q": 1}, "nearest": {"call": 0, '
        '"differs": {"q": {"expected": 1, "got": 2}}}}]'
    )


def test_an_entry_without_matchers_explains_itself_as_it_always_did() -> None:
    graded = grade_decisions(wrong({"tool": "s", "args": {"q": 1}}), [call("s", q=2)], [])
    assert graded == {
        "outcome": "fail",
        "expected": {"shouldCall": [{"tool": "s", "args": {"q": 1}}], "mustNotCall": []},
        "missing": [
            {
                "tool": "s",
                "args": {"q": 1},
                "nearest": {"call": 0, "differs": {"q": {"expected": 1, "got": 2}}},
            }
        ],
        "extra": [],
        "forbidden": [],
    }


# --- through HTTP ----------------------------------------------------------------------------

CASES = f"/v1/agents/{AGENT}/test-set/cases"
MATCHED = {
    "runId": "run-1",
    "decisions": "wrong",
    "shouldCall": [
        {
            "tool": "weather",
            "args": {"days": 3},
            "match": {
                "city": {"anyOf": ["NY", "New York"]},
                "genre": {"text": "Acoustic", "ignore": ["case", {"chars": " ,./-_*^"}]},
                "temp": {"number": 20, "tolerance": 0.5, "optional": True},
                "tags": {"schema": {"type": "array", "items": {"type": "string"}}},
                "n": {"anyOf": [3], "type": "integer"},
            },
        }
    ],
    "exactly": True,
}


def test_a_case_with_matchers_is_stored_and_read_back_as_given(api) -> None:
    added = ok(api.post(CASES, MATCHED), 201)
    stored = {
        "verdict": "wrong",
        "shouldCall": MATCHED["shouldCall"],
        "exactly": True,
    }
    assert added["expect"] == {"decisions": stored}
    assert ok(api.get(f"{CASES}/{added['id']}"))["expect"] == {"decisions": stored}


def test_a_case_with_matchers_is_graded_through_the_results_endpoint(api) -> None:
    case_id = ok(api.post(CASES, MATCHED), 201)["id"]
    runs = f"/v1/agents/{AGENT}/test-runs"
    run = ok(api.post(runs, {"projectId": P1, "candidate": "2.0.0"}), 201)
    good = {"days": 3, "city": "New York", "genre": "a-coustic", "tags": [], "n": 3}
    bad = {**good, "city": "Boston"}
    for args, expected in ((good, "pass"), (bad, "fail")):
        run = ok(api.post(runs, {"projectId": P1, "candidate": "2.0.0"}), 201)
        results = [
            {"caseId": case_id, "output": None, "calls": [{"tool": "weather", "args": args}]}
        ]
        ok(api.post(f"{runs}/{run['id']}/results", {"results": results}))
        shown = ok(api.get(f"{runs}/{run['id']}/results/{case_id}"))
        assert shown["outcome"] == expected, shown
    differs = shown["parts"]["decisions"]["missing"][0]["nearest"]["differs"]
    assert differs["city"]["why"] == '`city`: got "Boston", expected any of "NY", "New York"'


def entry_with(match: Any, **more: Any) -> dict[str, Any]:
    return {
        "runId": "run-1",
        "decisions": "wrong",
        "shouldCall": [{"tool": "ok"}, {"tool": "weather", "match": match}],
        **more,
    }


BAD = [
    ("an unknown matcher", {"city": {"oneOf": ["NY"]}}, "shouldCall.1.match.city"),
    ("two kinds at once", {"city": {"anyOf": ["NY"], "text": "NY"}}, "shouldCall.1.match.city"),
    ("a matcher that is not an object", {"city": ["NY"]}, "shouldCall.1.match.city"),
    ("an empty anyOf", {"city": {"anyOf": []}}, "shouldCall.1.match.city"),
    ("anyOf not a list", {"city": {"anyOf": "NY"}}, "shouldCall.1.match.city"),
    ("text not text", {"city": {"text": 3}}, "shouldCall.1.match.city"),
    ("an unknown ignore rule", {"c": {"text": "a", "ignore": ["accents"]}}, "shouldCall.1.match.c"),
    ("empty chars", {"city": {"text": "a", "ignore": [{"chars": ""}]}}, "shouldCall.1.match.city"),
    ("a negative tolerance", {"t": {"number": 1, "tolerance": -0.1}}, "shouldCall.1.match.t"),
    ("number not a number", {"t": {"number": "1"}}, "shouldCall.1.match.t"),
    ("an invalid JSON Schema", {"s": {"schema": {"type": "no-such-type"}}}, "shouldCall.1.match.s"),
    ("a schema that is not an object", {"s": {"schema": []}}, "shouldCall.1.match.s"),
    ("a schema's $ref to elsewhere", {"s": {"schema": {"$ref": "https://example.com/s.json"}}},
     "shouldCall.1.match.s"),
    ("a schema's $ref to nothing", {"s": {"schema": {"$ref": "#/$defs/none"}}},
     "shouldCall.1.match.s"),
    ("a schema's regular expression", {"s": {"schema": {"items": {"pattern": "(a+)+$"}}}},
     "shouldCall.1.match.s"),
    ("an unknown type", {"s": {"anyOf": [1], "type": "int"}}, "shouldCall.1.match.s"),
    ("optional not a boolean", {"s": {"anyOf": [1], "optional": 1}}, "shouldCall.1.match.s"),
    ("a field foreign to the kind", {"s": {"anyOf": [1], "tolerance": 1}}, "shouldCall.1.match.s"),
    ("match not an object", [], "shouldCall.1.match"),
    ("past 16,000 characters", {"s": {"anyOf": ["x" * 16_000]}}, "shouldCall.1.match"),
]  # fmt: skip


@pytest.mark.parametrize(("match", "field"), [pytest.param(*r[1:], id=r[0]) for r in BAD])
def test_a_bad_matcher_is_refused_naming_entry_and_argument_and_changes_nothing(
    api, unchanged, match, field
) -> None:
    with unchanged():
        resp = api.post(CASES, entry_with(match))
    assert resp.status_code == 400, resp.get_json()
    assert field in error_of(resp)["details"]["fields"], error_of(resp)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(
            {
                "runId": "run-1",
                "decisions": "wrong",
                "shouldCall": [{"tool": "w", "args": {"city": "NY"}, "match": CITY}],
            },
            "shouldCall.0.match.city",
            id="an argument in both args and match",
        ),
        pytest.param(
            {"runId": "run-1", "decisions": "wrong", "mustNotCall": ["w"], "exactly": True},
            "exactly",
            id="exactly without shouldCall",
        ),
        pytest.param(
            {"runId": "run-1", "decisions": "wrong", "shouldCall": [{"tool": "w"}], "exactly": 1},
            "exactly",
            id="exactly not a boolean",
        ),
    ],
)
def test_a_bad_decisions_part_is_refused_naming_the_field_and_changes_nothing(
    api, unchanged, body, field
) -> None:
    with unchanged():
        resp = api.post(CASES, body)
    assert resp.status_code == 400, resp.get_json()
    assert field in error_of(resp)["details"]["fields"], error_of(resp)


def test_a_match_of_16000_characters_is_added_and_one_more_is_refused(api, unchanged) -> None:
    # {"s":{"anyOf":["…"]}} is 20 characters around the text
    at_limit = {"s": {"anyOf": ["x" * (16_000 - 20)]}}
    ok(api.post(CASES, entry_with(at_limit)), 201)
    with unchanged():
        resp = api.post(CASES, entry_with({"s": {"anyOf": ["x" * (16_000 - 19)]}}))
    assert resp.status_code == 400
    assert error_of(resp)["details"]["fields"] == {
        "shouldCall.1.match": ["At most 16000 characters in canonical JSON."]
    }


# --- everywhere: search, the case page, the run pages, the JUnit report ----------------------


def test_a_matchers_text_is_searchable(api) -> None:
    case_id = ok(api.post(CASES, MATCHED), 201)["id"]
    for word in ("Acoustic", "york", "genre"):
        found = ok(api.get(f"/v1/agents/{AGENT}/test-set/cases?projectId={P1}&q={word}"))
        assert [c["id"] for c in found["data"]] == [case_id], word


def test_the_case_page_shows_each_matcher_and_exactly(api, client) -> None:
    case_id = ok(api.post(CASES, MATCHED), 201)["id"]
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    page = client.get(f"/agents/{AGENT}/test-set/cases/{case_id}").get_data(as_text=True)
    assert "<code>city</code>: any of &#34;NY&#34;, &#34;New York&#34;" in page
    assert "<code>temp</code>: 20 ± 0.5 (or left out)" in page
    assert "<code>n</code>: an integer, any of 3" in page
    assert "No other calls, and no argument these do not name." in page


def test_the_run_pages_and_the_junit_report_say_which_matcher_failed(api, client) -> None:
    case_id = ok(api.post(CASES, MATCHED), 201)["id"]
    runs = f"/v1/agents/{AGENT}/test-runs"
    run = ok(api.post(runs, {"projectId": P1, "candidate": "2.0.0"}), 201)
    args = {"days": 3, "city": "Boston", "genre": "acoustic", "tags": [], "n": 3}
    calls = [{"tool": "weather", "args": args}, {"tool": "news", "args": {}}]
    results = [{"caseId": case_id, "output": None, "calls": calls}]
    ok(api.post(f"{runs}/{run['id']}/results", {"results": results}))
    why = '`city`: got "Boston", expected any of "NY", "New York"'

    report = api.get(f"{runs}/{run['id']}/report.xml").get_data(as_text=True)
    assert f"; {why}" in html.unescape(report)  # after the explanation's JSON, in words

    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    for url in (
        f"/agents/{AGENT}/test-runs/{run['id']}",
        f"/agents/{AGENT}/test-runs/{run['id']}/results/{case_id}",
    ):
        page = html.unescape(client.get(url).get_data(as_text=True))
        assert why in page, url
        assert (
            "where no other call is allowed: call 1 (<code>weather</code>), call 2 (<code>news"
            in page
        )
