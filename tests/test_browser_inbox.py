"""The runs inbox in Chromium (docs/design.md §4.2), against a live server: walked with the keys
`j`, `k` and `a` with JavaScript; with plain links and the GET form without it (and with it,
where htmx swaps the list); and every page of it checked by axe-core.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import live
import pytest
from a11y import assert_accessible
from browsing import needs_chromium, sign_in
from conftest import AGENT, P1, app_on
from playwright.sync_api import Page, expect

pytestmark = needs_chromium

EXTRA_RUNS = 30  # with the world's five, more than a page of 25
INBOX = f"/agents/{AGENT}/runs?projectId={P1}"


def extra_runs() -> dict:
    """Runs of acme.drafting in P1, a minute apart, each calling a tool, none made a case."""
    return {
        "runs": [
            {
                "id": f"run-inbox-{i:03d}",
                "agent": AGENT,
                "project": P1,
                "version": "1.1.0" if i % 2 else "1.0.0",
                "status": "finished",
                "input": {"q": f"question {i}"},
                "output": {"answer": f"answer {i}"},
                "calls": [{"tool": "lookup" if i % 3 else "search", "args": {"n": i}}],
                "at": f"2026-05-02T00:{i:02d}:00Z",
            }
            for i in range(EXTRA_RUNS)
        ]
    }


@pytest.fixture(scope="module")
def server(databases) -> Iterator[str]:
    """A live server on a copy of the test world with the extra runs."""
    with app_on(databases, databases.clone()) as app, live.threaded(app, extra_runs()) as base:
        yield base


def rows(page: Page):
    return page.locator("#run-rows tr[data-run]")


def run_link(page: Page, index: int):
    return rows(page).nth(index).locator("[data-run-link]")


def test_an_expert_walks_the_inbox_with_j_and_k_and_adds_a_case_with_a(js_page, server):
    page = js_page
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.get_by_role("row", name=re.compile("Drafting")).get_by_role("link", name="Inbox").click()
    expect(page.get_by_role("heading", name=f"{AGENT} runs")).to_be_visible()
    expect(page.locator("#inbox-keys")).to_be_visible()  # told only where the keys work
    expect(rows(page)).to_have_count(25)
    expect(run_link(page, 0)).to_have_text("run-inbox-029")  # newest first

    for _ in range(3):
        page.keyboard.press("j")
    expect(run_link(page, 2)).to_be_focused()
    expect(rows(page).nth(2)).to_have_class(re.compile("selected"))
    page.keyboard.press("k")
    expect(run_link(page, 1)).to_be_focused()
    expect(page.locator("#run-rows tr.selected")).to_have_count(1)
    assert_accessible(page)  # the selected row too

    page.keyboard.press("a")
    expect(page.get_by_role("heading", name="Add a case by hand")).to_be_visible()
    expect(page.locator("#pick-run-inbox-028")).to_be_checked()
    expect(page.get_by_role("heading", name="Run run-inbox-028")).to_be_visible()


def test_the_keys_reach_load_more_and_go_on_into_the_rows_it_brings(js_page, server):
    page = js_page
    sign_in(page, server, "reader@acme.test", "reader-pass-1")
    page.goto(server + INBOX)
    for _ in range(25):
        page.keyboard.press("j")
    expect(run_link(page, 24)).to_be_focused()
    page.keyboard.press("j")
    more = page.get_by_role("link", name="Load more")
    expect(more).to_be_focused()
    page.keyboard.press("Enter")
    expect(rows(page)).to_have_count(EXTRA_RUNS + 5)
    page.keyboard.press("j")
    expect(run_link(page, 25)).to_be_focused()
    page.keyboard.press("a")  # a reader may add no case: nothing happens
    expect(run_link(page, 25)).to_be_focused()


def test_typing_in_the_filters_is_never_taken_for_a_key(js_page, server):
    page = js_page
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(server + INBOX)
    search = page.get_by_label("Search runs")
    search.click()
    page.keyboard.type("answer 1a")
    expect(search).to_have_value("answer 1a")
    expect(search).to_be_focused()
    expect(page).to_have_url(re.compile(r"q=answer(\+|%20)1a"))
    expect(rows(page)).to_have_count(0)
    expect(page.get_by_text("No run matches these filters.")).to_be_visible()


def test_the_inbox_works_by_its_form_and_links(page, server):
    """With JavaScript htmx swaps the list in place and keeps the URL; without, the form is a
    plain GET and every step a link."""
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(server + f"/agents/{AGENT}/test-set/cases?projectId={P1}")
    page.get_by_role("navigation", name="Test set").get_by_role("link", name="Runs inbox").click()
    # htmx binds the filters once the page has loaded; a change before that is a plain form's
    # change, which waits for Apply (CI once picked both filters in that moment and lost them)
    page.wait_for_url(re.compile(rf"/agents/{re.escape(AGENT)}/runs\?"))
    page.get_by_label("Tool called").select_option("search")
    page.get_by_label("Version").select_option("1.0.0")
    if not page.js:  # type: ignore[attr-defined]
        page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(
        re.compile(r"tool=search.*version=1\.0\.0|version=1\.0\.0.*tool=search")
    )
    expected = [f"run-inbox-{i:03d}" for i in range(EXTRA_RUNS - 1, -1, -1) if i % 6 == 0]
    expect(rows(page).locator("[data-run-link]")).to_have_text(expected)

    page.get_by_role("link", name="run-inbox-024", exact=True).click()
    expect(page.get_by_role("heading", name="Run run-inbox-024")).to_be_visible()
    calls = page.get_by_role("list", name=re.compile("Calls"))
    expect(calls.get_by_role("listitem")).to_have_count(1)
    expect(calls).to_contain_text("search")
    expect(page.get_by_text("None yet.")).to_be_visible()
    page.get_by_role("link", name="Add a case from this run").click()
    expect(page.locator("#pick-run-inbox-024")).to_be_checked()


def test_load_more_without_javascript_is_a_link_with_a_way_back(page, server):
    sign_in(page, server, "reader@acme.test", "reader-pass-1")
    page.goto(server + INBOX)
    page.get_by_role("link", name="Load more").click()
    if page.js:  # type: ignore[attr-defined]
        expect(rows(page)).to_have_count(EXTRA_RUNS + 5)
    else:
        expect(rows(page)).to_have_count(EXTRA_RUNS + 5 - 25)
        expect(run_link(page, 0)).to_have_text("run-inbox-004")
        page.get_by_role("link", name="Back to the newest runs").click()
        expect(run_link(page, 0)).to_have_text("run-inbox-029")


@pytest.mark.parametrize(
    "path",
    [
        INBOX,
        f"{INBOX}&q=answer&status=finished&version=1.1.0&tool=lookup&hasCase=false"
        "&after=2026-01-01&before=2026-12-31",
        f"{INBOX}&q=nothing-matches-this",
        f"/agents/{AGENT}/runs/run-1",  # with cases made from it
        f"/agents/{AGENT}/runs/run-running",  # no case can be made from it
        f"/agents/{AGENT}/runs/run-inbox-003",
    ],
    ids=["inbox", "filtered", "empty", "run-with-cases", "running-run", "run"],
)
def test_the_inbox_pages_pass_axe(js_page, server, path):
    sign_in(js_page, server, "publisher@acme.test", "publisher-pass-1")
    js_page.goto(server + path)
    expect(js_page.get_by_role("heading", level=1)).to_be_visible()
    assert_accessible(js_page)
