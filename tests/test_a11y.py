"""Accessibility: every page passes axe-core with no serious or critical violation, and the
filters, the add-case form and retiring work from the keyboard alone (Tab, Space, Enter, typing;
no mouse click anywhere), with JavaScript and without.

The docs page is left out of axe's check but for its own heading: it is Swagger UI, vendored
third-party code that draws the API reference.
"""

from __future__ import annotations

import re

import pytest
from a11y import assert_accessible, report, violations
from browsing import needs_chromium, sign_in
from conftest import AGENT, P1
from playwright.sync_api import Locator, Page, expect

pytestmark = needs_chromium

NEW_CASE = f"/agents/{AGENT}/test-set/cases/new?projectId={P1}"
CASES = f"/agents/{AGENT}/test-set/cases?projectId={P1}"


def tab_to(page: Page, target: Locator, *, backwards: bool = False, most: int = 150) -> None:
    """Press Tab (or Shift+Tab) until the target has the focus, as a keyboard user would."""
    for _ in range(most):
        if target.evaluate("el => el === document.activeElement"):
            return
        page.keyboard.press("Shift+Tab" if backwards else "Tab")
    raise AssertionError(f"Tab never reached {target}")


def type_and_press(page: Page, field: str, text: str, button: str) -> None:
    """Tab to a field, type into it, then Tab to a button and press Enter."""
    tab_to(page, page.get_by_label(field))
    page.keyboard.type(text)
    tab_to(page, page.get_by_role("button", name=button))
    page.keyboard.press("Enter")


# ---------------------------------------------------------------- axe-core on every page


def test_the_login_page_and_its_error_pass_axe(js_page, server):
    js_page.goto(f"{server}/login")
    assert_accessible(js_page)
    js_page.get_by_label("Email").fill("nobody@nowhere.test")
    js_page.get_by_label("Password").fill("wrong")
    js_page.get_by_role("button", name="Sign in").click()
    expect(js_page.get_by_role("alert")).to_be_visible()
    assert_accessible(js_page)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        CASES,
        f"{CASES}&kind=hand&part=answer&include=retired&q=lease&expert=true&addedAfter=2026-01-01",
        f"{CASES}&q=nothing-matches-this",
        f"/agents/{AGENT}/test-set/cases/case-2",
        f"/agents/{AGENT}/test-set/cases/case-1",  # retired
        NEW_CASE,
        "/tokens",
        "/logout",
        f"/agents/{AGENT}/test-set/cases/case-nope",  # the not-found page
    ],
    ids=[
        "overview",
        "cases",
        "cases filtered",
        "cases none match",
        "case",
        "retired case",
        "add-case form",
        "tokens",
        "sign out",
        "not found",
    ],
)
def test_every_page_passes_axe(js_page, server, path):
    sign_in(js_page, server, "admin@acme.test", "admin-pass-1")
    js_page.goto(server + path)
    assert_accessible(js_page)


def test_the_add_case_form_with_a_run_taken_and_errors_passes_axe(js_page, server):
    sign_in(js_page, server, "admin@acme.test", "admin-pass-1")
    js_page.goto(server + NEW_CASE)
    js_page.locator("input[name=runId][value=run-1]").check()
    expect(js_page.get_by_role("heading", name="Run run-1")).to_be_visible()
    js_page.get_by_role("button", name="Rank these 2 items of /matches").click()
    expect(js_page.locator("#items-1-pointer")).to_have_value("/matches/1")
    assert_accessible(js_page)
    js_page.locator("#shouldCall-0-tool").fill("lookup")
    js_page.locator("#shouldCall-0-args").fill("not json")
    js_page.locator("#items-0-rank").fill("first")
    js_page.get_by_role("button", name="Add the case").click()
    expect(js_page.get_by_role("alert")).to_contain_text("The case was not added")
    assert_accessible(js_page)


def test_a_token_just_made_and_its_name_error_pass_axe(js_page, server):
    sign_in(js_page, server, "reader@acme.test", "reader-pass-1")
    js_page.goto(f"{server}/tokens")
    js_page.get_by_role("button", name="Create token").click()  # no name: an error
    assert_accessible(js_page)
    js_page.get_by_label("Name of a new token").fill("axe")
    js_page.get_by_role("button", name="Create token").click()
    expect(js_page.get_by_label("The new token's secret")).to_be_visible()
    assert_accessible(js_page)


def test_the_docs_page_passes_axe_but_for_swagger_ui(js_page, server):
    """The page's own frame (its title, its language) is checked; Swagger UI's drawing is not."""
    js_page.goto(f"{server}/docs")
    assert_accessible(js_page, exclude=["#swagger-ui"])


def test_the_check_fails_on_a_serious_violation_and_names_it(js_page, server):
    """The helper can fail: an image without a text alternative and an unnamed button."""
    js_page.goto(f"{server}/login")
    js_page.evaluate("""() => {
        const img = document.createElement("img"); img.src = "/static/none.png";
        const button = document.createElement("button"); button.id = "nameless";
        document.querySelector("main").append(img, button);
    }""")
    found = violations(js_page)
    assert {"image-alt", "button-name"} <= {v["id"] for v in found}
    assert "#nameless" in report(found)
    with pytest.raises(AssertionError, match="button-name"):
        assert_accessible(js_page)


# ---------------------------------------------------------------- the keyboard alone


def test_the_filters_work_from_the_keyboard(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(server + CASES)
    tab_to(page, page.get_by_label("Search cases"))
    page.keyboard.type("lookup")
    tab_to(
        page, page.get_by_role("radio", name="All")
    )  # Tab enters a radio group at its checked radio
    page.keyboard.press("ArrowRight")  # an arrow moves to the next one and checks it
    if not page.js:  # type: ignore[attr-defined]
        tab_to(page, page.get_by_role("button", name="Apply"))
        page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"kind=correction"))
    expect(page).to_have_url(re.compile(r"q=lookup"))
    expect(page.get_by_label("Corrections")).to_be_checked()
    rows = page.locator("#case-rows tr:not(#more-row)")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("cor-1")


def test_a_case_is_added_then_retired_from_the_keyboard(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(server + NEW_CASE)
    tab_to(page, page.get_by_label("Find a run by id"))
    page.keyboard.type("run-1")
    page.keyboard.press("Enter")  # the form's first button: Find
    expect(page.locator("input[name=runId]")).to_have_count(1)
    tab_to(page, page.locator("input[name=runId][value=run-1]"))
    page.keyboard.press("Space")
    if not page.js:  # type: ignore[attr-defined]
        tab_to(page, page.get_by_role("button", name="Show this run"))
        page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Run run-1")).to_be_visible()
    if page.js:  # type: ignore[attr-defined]
        expect(page.locator("input[name=runId][value=run-1]")).to_be_focused()  # kept on swap
    tab_to(page, page.locator("input[name=answer][value='']"))  # "No verdict", checked
    page.keyboard.press("ArrowRight")  # "Right"
    page.keyboard.press("ArrowRight")  # "Wrong"
    expect(page.locator("input[name=answer][value=wrong]")).to_be_checked()
    type_and_press(page, "Why", "typed from the keyboard", "Add the case")
    expect(page.get_by_role("status")).to_contain_text("Case added")
    expect(page.get_by_text("typed from the keyboard")).to_be_visible()

    type_and_press(page, "Why retire it?", "added by a keyboard test", "Retire this case")
    expect(page.get_by_role("status")).to_contain_text("retired")
    expect(page.get_by_text("“added by a keyboard test”")).to_be_visible()
