"""The test-run pages in a real browser (Debian's Chromium, Playwright) against a live server:
an expert reads a run and its failures, a team lead goes from the overview to a comparison,
a case's history marks a flaky candidate, and a running run's progress updates itself until
the run is done. Each flow runs with JavaScript and without; with KINDGI_UPDATE_SCREENSHOTS=1
the run page and the comparison are the README's screenshots.

The world: the test world plus three hand cases on run-1 and three finished test runs of
acme.drafting in P1 (`RUNS_WORLD`), loaded as a runner makes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import live
import pytest
import requests
from a11y import assert_accessible
from browsing import CHROMIUM, sign_in
from conftest import AGENT, MULTI, P1, P2, TOKENS, app_on
from playwright.sync_api import Page, expect
from test_browser import NAMELESS, shoot
from test_test_runs import EXPECTS, GOOD_CALLS, GOOD_OUTPUT

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")

D, I, R = "case-run-d", "case-run-i", "case-run-r"  # noqa: E741  (the EXPECTS names)
GOOD = {
    D: {"output": GOOD_OUTPUT, "calls": GOOD_CALLS},
    I: {"output": GOOD_OUTPUT, "calls": []},
    R: {"output": None, "calls": [{"tool": "search", "args": {"q": "other"}}]},
    "cor-1": {"output": None, "calls": [{"tool": "lookup", "args": {}}]},
    "case-2": {"output": None, "calls": [], "ranked": ["k1"]},
}
BAD = {
    D: {"output": GOOD_OUTPUT, "calls": [{"tool": "search", "args": {"q": "nope"}},
                                         {"tool": "search", "args": {"q": "y"}},
                                         {"tool": "send_email", "args": {}}]},
    I: {"output": None, "calls": [], "ranked": ["zz", "m1", "m0"]},
    "case-2": {"output": {"no": "list"}, "calls": []},
}  # fmt: skip


def results(**changed: dict) -> list[dict]:
    return [{"caseId": case, **changed.get(case, GOOD[case])} for case in GOOD]


RUNS_WORLD = {
    "cases": [
        {"id": case, "run": "run-1", "by": "u-publisher", "at": f"2026-05-01T0{n}:00:00Z",
         "body": EXPECTS[name]}
        for n, (case, name) in enumerate(((D, "D"), (I, "I"), (R, "R")))
    ],
    "testRuns": [
        {"id": "trun-base", "agent": AGENT, "project": P1, "candidate": "1.0.0",
         "by": "u-writer", "at": "2026-11-01T10:00:00Z", "results": results()},
        {"id": "trun-next", "agent": AGENT, "project": P1, "candidate": "1.1.0",
         "label": "PR 42", "by": "u-writer", "at": "2026-11-02T10:00:00Z",
         "baseline": "trun-base", "results": results(**BAD)},
        {"id": "trun-again", "agent": AGENT, "project": P1, "candidate": "1.1.0",
         "label": "retry", "by": "u-writer", "at": "2026-11-03T10:00:00Z",
         "baseline": "trun-next", "results": results(**{I: BAD[I]})},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def server(databases) -> Iterator[str]:
    """A live server (real HTTP, threads) on a copy of the test world with test runs."""
    with app_on(databases, databases.clone()) as app, live.threaded(app, RUNS_WORLD) as base:
        yield base


def result_rows(tab: Page):
    """The results listed (not the rows below a failure where triage opens its forms)."""
    return tab.locator("#results table.results > tbody > tr:not(.triage-row)")


def checked(tab: Page) -> None:
    """axe-core on the page as it stands (it runs as the page's script: with JavaScript)."""
    if tab.js:  # type: ignore[attr-defined]
        assert_accessible(tab)


def apply(tab: Page, button: str) -> None:
    """Without JavaScript a filter is a plain form: send it (with htmx a change swaps)."""
    if not tab.js:  # type: ignore[attr-defined]
        tab.get_by_role("button", name=button).click()


def test_an_expert_reads_a_run_filters_its_failures_and_opens_one(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.get_by_role("row", name=re.compile("Drafting")).get_by_role("link", name=AGENT).click()
    page.get_by_role("navigation", name="Test set").get_by_role("link", name="Test runs").click()
    runs = page.get_by_role("table", name="Test runs, newest first")
    expect(runs.locator("tbody tr")).to_have_count(3)
    expect(
        page.get_by_role("img", name=re.compile("1.0.0 100.0 %; 1.1.0 50.0 %; 1.1.0 80.0 %"))
    ).to_be_visible()
    checked(page)
    runs.get_by_role("row", name=re.compile("PR 42")).get_by_role("link", name="1.1.0").click()

    expect(page.get_by_role("heading", name=re.compile("Test run of 1.1.0"))).to_be_visible()
    progress = page.locator("#progress")
    expect(progress).to_contain_text("done")
    expect(progress).to_contain_text("50.0 %")
    expect(result_rows(page)).to_have_count(5)
    checked(page)

    page.get_by_label("Outcome").select_option("fail")
    apply(page, "Apply")
    expect(page).to_have_url(re.compile(r"outcome=fail"))
    expect(result_rows(page)).to_have_count(2)
    expect(result_rows(page).first).to_contain_text("Called a forbidden tool: send_email")
    expect(
        page.get_by_role("table", name=re.compile("Arguments of the nearest call"))
    ).to_contain_text('"y"')
    expect(result_rows(page).nth(1)).to_contain_text("Unjudged keys in the top 2")
    checked(page)
    page.mouse.wheel(0, 520)  # the screenshot: the tallies' end and the failures explained
    page.wait_for_timeout(300)
    shoot(page, "run.png")
    page.get_by_label("Of the part").select_option("items")
    apply(page, "Apply")
    expect(page).to_have_url(re.compile(r"part=items"))
    expect(result_rows(page)).to_have_count(1)
    page.reload()  # the address keeps the filters
    expect(page.get_by_label("Outcome")).to_have_value("fail")
    expect(result_rows(page)).to_have_count(1)

    result_rows(page).first.get_by_role("link", name=re.compile("Output beside")).click()
    expect(page.get_by_role("heading", name=re.compile(I))).to_be_visible()
    expect(page.get_by_role("heading", name="The candidate", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="The corrected run", exact=True)).to_be_visible()
    checked(page)


def test_a_team_lead_goes_from_the_overview_to_a_comparison(page, server):
    sign_in(page, server, "reader@acme.test", "reader-pass-1")
    row = page.get_by_role("row", name=re.compile("Drafting"))
    expect(row).to_contain_text("80.0 %")  # trun-again: I fails, the rest pass
    checked(page)
    row.get_by_role("link", name="1.1.0").click()
    expect(page.get_by_role("heading", name=re.compile("Test run of 1.1.0"))).to_be_visible()
    page.get_by_role("link", name="Compare with a baseline").click()

    expect(page.get_by_label("Baseline run")).to_have_value("trun-next")  # its own baseline
    comparison = page.locator("#comparison")
    expect(comparison).to_contain_text("0 regressed and 1 fixed")
    expect(comparison).to_contain_text("could be chance")
    shoot(page, "compare.png")
    checked(page)

    page.get_by_label("Baseline run").select_option("trun-base")
    apply(page, "Compare")
    expect(page).to_have_url(re.compile(r"baseline=trun-base"))
    expect(comparison).to_contain_text("1 regressed and 0 fixed")
    comparison.get_by_role("link", name="Regressed").click()
    expect(page).to_have_url(re.compile(r"change=regressed"))
    pairs = page.get_by_role("table", name=re.compile("Regressed cases"))
    expect(pairs.locator("tbody tr")).to_have_count(1)
    expect(pairs).to_contain_text(I)
    checked(page)


def test_a_cases_history_marks_the_candidate_that_got_two_outcomes_flaky(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases/{D}")
    history = page.get_by_role("table", name=re.compile("Its outcome in the last 3 test runs"))
    expect(history.locator("tbody tr")).to_have_count(3)
    expect(history.locator("tbody tr").nth(1)).to_contain_text("fail")
    expect(page.get_by_text("The same candidate got different outcomes: 1.1.0.")).to_be_visible()
    checked(page)
    history.get_by_role("link", name="trun-base").click()
    expect(page.get_by_role("heading", name=re.compile(D))).to_be_visible()


def test_a_running_runs_progress_updates_itself_and_stops_when_it_is_done(page, server):
    """In acme.multi / P2 (cor-3 alone), so the other flows' runs stay as they are."""
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {TOKENS['admin']}"
    base = f"{server}/v1/agents/{MULTI}/test-runs"
    started = api.post(base, json={"projectId": P2, "candidate": "live"}, timeout=10)
    assert started.status_code == 201, started.text
    run = started.json()["id"]
    sign_in(page, server, "admin@acme.test", "admin-pass-1")
    page.goto(f"{server}/agents/{MULTI}/test-runs/{run}")
    progress = page.locator("#progress")
    expect(progress).to_contain_text("0 of 1 results received.")
    expect(progress).to_have_attribute("aria-live", "polite")
    checked(page)
    one = {"caseId": "cor-3", "output": {"answer": "Hi"}, "calls": []}
    sent = api.post(f"{base}/{run}/results", json={"results": [one]}, timeout=10)
    assert sent.status_code == 200 and sent.json()["run"]["status"] == "done", sent.text
    if page.js:  # type: ignore[attr-defined]
        expect(progress).to_contain_text("Status: done", timeout=10_000)  # polled in place
        expect(progress).not_to_have_attribute("hx-trigger", re.compile("."))
        polled = []
        page.on("request", lambda request: polled.append(request.url))
        page.wait_for_timeout(3_000)
        assert not [url for url in polled if url.endswith("/progress")]  # it stopped polling
        progress.get_by_role("link", name="see its results as it ended").click()
        expect(page.locator("#results")).to_contain_text("cor-3")
    else:
        expect(progress).to_contain_text("Status: open")  # nothing runs: reload to see
        page.get_by_role("link", name="reload the run").click()
        expect(progress).to_contain_text("Status: done")
    expect(progress).not_to_contain_text("reload the run")


def test_every_control_on_the_run_pages_has_a_label(browser, server):
    tab = browser.new_page()
    try:
        sign_in(tab, server, "admin@acme.test", "admin-pass-1")
        controls = "input:not([type=hidden]), select, textarea, button"
        for path in (
            f"/agents/{AGENT}/test-set/runs?projectId={P1}",
            f"/agents/{AGENT}/test-runs/trun-next",
            f"/agents/{AGENT}/test-runs/trun-next/compare",
            f"/agents/{AGENT}/test-runs/trun-next/results/{D}",
        ):
            tab.goto(server + path)
            assert tab.locator(controls).evaluate_all(NAMELESS) == [], path
    finally:
        tab.close()
