"""The add-case form filled from a run: its rules on their own (kindgi/case_form.py), the form
over HTTP on a real database, and the whole flow in Chromium with JavaScript (htmx re-renders
the form in place) and without (each button posts the form back).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from browsing import needs_chromium, sign_in
from conftest import AGENT, P1, TOKENS, csrf_of
from conftest import sign_in as sign_in_client
from playwright.sync_api import Page, expect

from kindgi import case_form
from kindgi.case_form import CallOffer, ItemOffer, ListOffer, RunOffers

NEW_CASE = f"/agents/{AGENT}/test-set/cases/new?projectId={P1}"
OUTPUT = {
    "answer": "Three leases.",
    "matches": [{"key": "lease-a", "id": "x"}, {"id": 7}, {"title": "no key"}],
    "a/b~c": ["plain", 2.5, True],
    "empty": [],
}
CALLS = [
    {"tool": "search", "args": {"q": "lease", "limit": 3}},
    {"tool": "send_email", "args": {}},
]


# ---------------------------------------------------------------- the rules


def test_a_run_offers_its_calls_and_every_non_empty_array_with_pointers_and_keys():
    offers = case_form.run_offers(OUTPUT, CALLS)
    assert offers.calls == [
        CallOffer("search", '{"q": "lease", "limit": 3}'),
        CallOffer("send_email", ""),
    ]
    assert [offer.pointer for offer in offers.lists] == ["/matches", "/a~1b~0c"]
    matches, escaped = offers.lists
    # the key grading reads: `key`, else `id`, else none (typed by hand); ranked from 0
    assert [(i.key, i.pointer, i.rank) for i in matches.items] == [
        ("lease-a", "/matches/0", 0),
        ("7", "/matches/1", 1),
        ("", "/matches/2", 2),
    ]
    assert [i.key for i in escaped.items] == ["plain", "2.5", ""]  # a boolean is no key
    assert escaped.items[0].pointer == "/a~1b~0c/0"


def test_nested_arrays_are_offered_too_and_a_run_without_output_offers_nothing():
    offers = case_form.run_offers({"groups": [{"ids": ["a", "b"]}]}, None)
    assert [o.pointer for o in offers.lists] == ["/groups", "/groups/0/ids"]
    assert offers.lists[1].items[1] == ItemOffer("b", "/groups/0/ids/1", 1, "b")
    assert case_form.run_offers(None, None) == RunOffers([], [])
    top = case_form.run_offers(["x"], [])
    assert top.lists == [ListOffer("", [ItemOffer("x", "/0", 0, "x")])]


def blank(**fields: Any) -> dict[str, Any]:
    """The form's fields as `shown_fields` reads a fresh form, with some filled."""
    return {**case_form.shown_fields({}), **fields}


def test_taking_calls_fills_should_call_and_must_not_call_once_and_says_wrong():
    offers = case_form.run_offers(OUTPUT, CALLS)
    shown = case_form.take(blank(), offers, "call:0")
    assert shown["decisions"] == "wrong"
    assert shown["shouldCall"] == [{"tool": "search", "args": '{"q": "lease", "limit": 3}'}]
    shown = case_form.take(shown, offers, "not:1")
    shown = case_form.take(shown, offers, "not:1")
    assert shown["mustNotCall"] == "send_email"
    typed = case_form.take(blank(mustNotCall="delete\n"), offers, "not:1")
    assert typed["mustNotCall"] == "delete\nsend_email"


def test_taking_a_list_makes_its_rows_keeping_verdicts_already_given():
    offers = case_form.run_offers(OUTPUT, CALLS)
    given = [{"key": "k", "pointer": "/matches/1", "rank": "", "verdict": "wrong"}]
    shown = case_form.take(blank(items=given), offers, "list:/matches")
    assert shown["items"] == [
        {"key": "lease-a", "pointer": "/matches/0", "rank": "0", "verdict": ""},
        {"key": "7", "pointer": "/matches/1", "rank": "1", "verdict": "wrong"},
        {"key": "", "pointer": "/matches/2", "rank": "2", "verdict": ""},
    ]


@pytest.mark.parametrize("choice", ["call:9", "not:x", "list:/nowhere", "list:/answer", "junk"])
def test_a_choice_the_run_does_not_offer_changes_nothing(choice):
    shown = blank(why="kept")
    assert case_form.take(shown, case_form.run_offers(OUTPUT, CALLS), choice) == shown


def test_rows_not_judged_are_left_out_and_errors_name_the_rows_they_came_from():
    rows = [
        {"key": "a", "pointer": "/matches/0", "rank": "0", "verdict": ""},
        {"key": "b", "pointer": "/matches/1", "rank": "x", "verdict": "right"},
        {"key": "c", "pointer": "/matches/2", "rank": "y", "verdict": "wrong"},
    ]
    shown = blank(items=rows)
    body, errors = case_form.case_body(shown)
    assert body == {
        "items": [
            {"key": "b", "pointer": "/matches/1", "verdict": "right"},
            {"key": "c", "pointer": "/matches/2", "verdict": "wrong"},
        ]
    }
    # named by the body's items, as the schema names its errors; then by the form's rows
    assert set(errors) == {"items.0.rank", "items.1.rank"}
    assert set(case_form.row_errors(errors, shown)) == {"items.1.rank", "items.2.rank"}
    schema = {"items.0.key": ["bad"], "items": ["Each key once."]}
    assert case_form.row_errors(schema, shown) == {
        "items.1.key": ["bad"],
        "items": ["Each key once."],
    }


@pytest.mark.parametrize(
    ("row", "matcher"),
    [
        ({"anyOf": "NY\nNew York"}, {"anyOf": ["NY", "New York"]}),
        ({"anyOf": '3\ntrue\n"3"'}, {"anyOf": [3, True, "3"]}),
        ({"anyOf": "Acoustic", "ignoreCase": "on", "ignorePunctuation": "on"},
         {"text": ["Acoustic"], "ignore": ["case", "punctuation"]}),
        ({"anyOf": "20", "tolerance": "0.5", "optional": "on"},
         {"number": 20, "tolerance": 0.5, "optional": True}),
    ],
)  # fmt: skip
def test_a_rows_matcher_fields_make_its_match(row, matcher):
    shown = blank(shouldCall=[{"tool": "weather", "args": "", "arg": "city", **row}], exactly="on")
    body, errors = case_form.case_body(shown)
    assert errors == {}
    assert body["shouldCall"] == [{"tool": "weather", "match": {"city": matcher}}]
    assert body["exactly"] is True


@pytest.mark.parametrize(
    "row",
    [{"anyOf": "x", "tolerance": "0.5"}, {"anyOf": "1\n2", "tolerance": "1"},
     {"anyOf": "1", "tolerance": "a lot"}],
)  # fmt: skip
def test_a_tolerance_without_one_number_is_an_error_on_the_rows_matcher(row):
    shown = blank(shouldCall=[{"tool": "t", "args": "", "arg": "n", **row}])
    assert set(case_form.case_body(shown)[1]) == {"shouldCall.0.match"}


def test_the_schemas_errors_on_a_matcher_name_the_rows_matcher():
    schema = {"shouldCall.1.match.city": ["anyOf: a non-empty list of values."]}
    assert case_form.row_errors(schema, blank()) == {
        "shouldCall.1.match": ["anyOf: a non-empty list of values."]
    }


# ---------------------------------------------------------------- over HTTP


@pytest.fixture
def publisher(client):
    sign_in_client(client, "publisher@acme.test", "publisher-pass-1")
    return client


def post_form(client, fields: dict[str, str]):
    return client.post(NEW_CASE, data={"csrf_token": csrf_of(client, NEW_CASE), **fields})


def test_a_take_button_re_renders_the_form_filled_and_adds_nothing(publisher, unchanged):
    with unchanged():
        resp = post_form(publisher, {"runId": "run-1", "take": "call:0", "why": "kept"})
        page = resp.get_data(as_text=True)
    assert resp.status_code == 200
    assert 'id="shouldCall-0-tool" name="shouldCall-0-tool" value="search"' in page
    assert 'value="{&#34;q&#34;: &#34;lease&#34;}"' in page  # the args, escaped, editable
    assert re.search(r'name="decisions" value="wrong"\s+checked', page)
    assert "Run <code>run-1</code>" in page and "The case was not added" not in page
    ranked = post_form(publisher, {"runId": "run-1", "take": "list:/matches"})
    text = ranked.get_data(as_text=True)
    assert 'name="items-1-key" value="m1"' in text
    assert 'name="items-1-pointer" value="/matches/1"' in text


def test_bad_input_gets_its_error_next_to_its_row_and_changes_nothing(publisher, unchanged):
    fields = {
        "runId": "run-1",
        "items-0-key": "m0",
        "items-0-pointer": "/matches/0",
        "items-1-key": "m1",
        "items-1-pointer": "matches/1",  # not a JSON Pointer
        "items-1-verdict": "right",
    }
    with unchanged():
        resp = post_form(publisher, fields)
    assert resp.status_code == 400
    page = resp.get_data(as_text=True)
    assert 'id="err-items-1-pointer"' in page and 'id="err-items-0-pointer"' not in page
    assert 'aria-describedby="err-items-1-pointer"' in page


def test_a_case_with_a_matcher_and_no_other_calls_is_added_from_the_form(publisher, api):
    fields = {
        "runId": "run-1", "decisions": "wrong", "shouldCall-0-tool": "weather",
        "shouldCall-0-arg": "city", "shouldCall-0-anyOf": "NY\nNew York",
        "shouldCall-0-optional": "on", "exactly": "on",
    }  # fmt: skip
    resp = post_form(publisher, fields)
    assert resp.status_code == 303, resp.get_data(as_text=True)[:500]
    case_id = resp.headers["Location"].rsplit("/", 1)[1]
    case = api.get(f"/v1/agents/{AGENT}/test-set/cases/{case_id}").get_json()
    assert case["expect"]["decisions"] == {
        "verdict": "wrong",
        "shouldCall": [
            {"tool": "weather", "args": {},
             "match": {"city": {"anyOf": ["NY", "New York"], "optional": True}}}
        ],
        "exactly": True,
    }  # fmt: skip


def test_a_bad_matcher_gets_its_error_next_to_its_row_and_changes_nothing(publisher, unchanged):
    fields = {
        "runId": "run-1", "decisions": "wrong", "shouldCall-0-tool": "ok",
        "shouldCall-1-tool": "weather", "shouldCall-1-arg": "city",
    }  # fmt: skip
    with unchanged():
        resp = post_form(publisher, fields)
    assert resp.status_code == 400
    page = resp.get_data(as_text=True)
    assert 'id="err-shouldCall-1-match"' in page and "anyOf: a non-empty list" in page
    assert 'aria-describedby="err-shouldCall-1-match"' in page


# ---------------------------------------------------------------- in the browser


def api(server: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKENS['admin']}"}
    resp = requests.request(method, f"{server}/v1{path}", headers=headers, timeout=10, **kw)
    assert resp.ok, resp.text
    return resp.json()


def active_cases(server: str) -> int:
    return api(server, "GET", f"/agents/{AGENT}/test-set?projectId={P1}")["cases"]["active"]


def press(page: Page, name: str) -> None:
    """Click a button that posts the form back and wait for the form it brings: swapped in
    place by htmx with JavaScript (the old form, marked, is gone), a new page without (the
    click waits for it)."""
    if page.js:  # type: ignore[attr-defined]
        page.locator("#case-form").evaluate("form => { form.dataset.old = '1'; }")
    page.get_by_role("button", name=name).click()
    expect(page.locator("#case-form[data-old]")).to_have_count(0)


def open_a_new_run_in_the_form(page: Page, server: str) -> dict[str, Any]:
    """Record a finished run through the API, then, as a publisher, find it on the add-case
    form and show it there (swapped in with JavaScript, a new page without); the run."""
    run = api(
        server,
        "POST",
        f"/agents/{AGENT}/runs",
        json={"projectId": P1, "version": "1.2.0", "status": "finished", "input": {"q": "leases"},
              "output": OUTPUT, "calls": CALLS},
    )  # fmt: skip
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(server + NEW_CASE)
    page.get_by_label("Find a run by id").fill(run["id"])
    press(page, "Find")
    page.locator(f"input[name=runId][value='{run['id']}']").check()
    if not page.js:  # type: ignore[attr-defined]
        press(page, "Show this run")
    expect(page.get_by_role("heading", name=f"Run {run['id']}")).to_be_visible()
    return run


@needs_chromium
def test_an_expert_makes_a_case_from_a_run_by_taking_its_calls_and_ranking_its_list(page, server):
    run = open_a_new_run_in_the_form(page, server)
    expect(page.get_by_text('"q": "leases"')).to_be_visible()  # its input, shown

    press(page, "Should call search, call 1")
    expect(page.locator("#shouldCall-0-tool")).to_have_value("search")
    expect(page.locator("#shouldCall-0-args")).to_have_value('{"q": "lease", "limit": 3}')
    page.locator("#shouldCall-0-args").fill('{"q": "lease"}')  # edited
    press(page, "Must not call send_email, call 2")
    expect(page.get_by_label("Must not call (one tool per line)")).to_have_value("send_email")
    expect(page.locator("#shouldCall-0-args")).to_have_value('{"q": "lease"}')  # kept
    expect(page.locator("input[name=decisions][value=wrong]")).to_be_checked()

    press(page, "Rank these 3 items of /matches")
    expect(page.locator("#items-2-pointer")).to_have_value("/matches/2")
    page.locator("#items-0-verdict").select_option("right")
    page.locator("#items-1-verdict").select_option("wrong")  # the third left not judged
    before = active_cases(server)
    page.get_by_role("button", name="Add the case").click()

    expect(page.get_by_role("status")).to_contain_text("Case added")
    case_id = page.url.rsplit("/", 1)[1]
    assert case_id.startswith("case-") and active_cases(server) == before + 1
    case = api(server, "GET", f"/agents/{AGENT}/test-set/cases/{case_id}")
    assert case["runId"] == run["id"]
    assert case["expect"] == {
        "decisions": {
            "verdict": "wrong",
            "shouldCall": [{"tool": "search", "args": {"q": "lease"}}],
            "mustNotCall": ["send_email"],
        },
        "items": [
            {"key": "lease-a", "pointer": "/matches/0", "rank": 0, "verdict": "right"},
            {"key": "7", "pointer": "/matches/1", "rank": 1, "verdict": "wrong"},
        ],
    }


@needs_chromium
def test_an_expert_says_what_a_right_argument_is_and_that_nothing_else_is(page, server):
    open_a_new_run_in_the_form(page, server)
    press(page, "Should call search, call 1")
    page.locator("#shouldCall-0-args").fill('{"limit": 3}')
    page.locator("#shouldCall-0-arg").fill("q")
    page.locator("#shouldCall-0-anyOf").fill("Lease\nleases")
    page.locator("#shouldCall-0-ignoreCase").check()
    page.locator("#shouldCall-0-ignorePunctuation").check()
    page.get_by_label("No other calls").check()
    page.get_by_role("button", name="Add the case").click()

    expect(page.get_by_role("status")).to_contain_text("Case added")
    expect(page.get_by_text("No other calls, and no argument these do not name.")).to_be_visible()
    expect(page.locator("ul.matchers")).to_contain_text(
        'q: text "Lease" or "leases" ignoring case, punctuation'
    )
    case = api(server, "GET", f"/agents/{AGENT}/test-set/cases/{page.url.rsplit('/', 1)[1]}")
    assert case["expect"]["decisions"] == {
        "verdict": "wrong",
        "shouldCall": [
            {"tool": "search", "args": {"limit": 3},
             "match": {"q": {"text": ["Lease", "leases"], "ignore": ["case", "punctuation"]}}}
        ],
        "exactly": True,
    }  # fmt: skip


@needs_chromium
def test_a_taken_form_with_bad_input_says_where_and_adds_nothing(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(server + NEW_CASE)
    page.locator("input[name=runId][value=run-1]").check()
    if not page.js:  # type: ignore[attr-defined]
        press(page, "Show this run")
    expect(page.get_by_role("heading", name="Run run-1")).to_be_visible()  # htmx's swap is in
    press(page, "Should call search, call 1")
    page.locator("#shouldCall-0-args").fill("{not json")
    press(page, "Rank these 2 items of /matches")
    page.locator("#items-1-verdict").select_option("right")
    page.locator("#items-1-rank").fill("second")
    before = active_cases(server)
    page.get_by_role("button", name="Add the case").click()

    expect(page.get_by_role("alert")).to_contain_text("The case was not added")
    expect(page.locator("#err-shouldCall-0-args")).to_contain_text("Not valid JSON")
    expect(page.locator("#err-items-1-rank")).to_contain_text("A whole number")
    expect(page.locator("#shouldCall-0-args")).to_have_attribute(
        "aria-describedby", "err-shouldCall-0-args"
    )
    expect(page.locator("#items-1-rank")).to_have_value("second")  # as typed
    expect(page.locator("#items-0-key")).to_have_value("m0")
    assert active_cases(server) == before
