"""The test set's Health tab in a real browser (Debian's Chromium, Playwright) against a live
server, with JavaScript and without: a team lead finds the case every run failed, sees the
histogram (its values also as a table) and goes to retire it. With KINDGI_UPDATE_SCREENSHOTS=1
the Health tab is the README's screenshot.

The world: the test world plus case W (run-1's decisions were right) and five finished test runs
of acme.drafting in P1 that all fail W and pass cor-1 and case-2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import live
import pytest
from browsing import CHROMIUM, sign_in
from conftest import AGENT, P1, app_on
from playwright.sync_api import expect
from test_browser import shoot
from test_browser_runs import GOOD, checked

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")

W = "case-health-w"
HEALTH_WORLD = {
    "cases": [
        {"id": W, "run": "run-1", "by": "u-publisher", "at": "2026-05-01T00:00:00Z",
         "body": {"decisions": "right"}},
    ],
    "testRuns": [
        {"id": f"trun-health-{n}", "agent": AGENT, "project": P1, "candidate": f"1.{n}.0",
         "by": "u-writer", "at": f"2026-11-0{n + 1}T10:00:00Z",
         "results": [{"caseId": W, "output": None, "calls": []},
                     {"caseId": "cor-1", **GOOD["cor-1"]}, {"caseId": "case-2", **GOOD["case-2"]}]}
        for n in range(5)
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def server(databases) -> Iterator[str]:
    with app_on(databases, databases.clone()) as app, live.threaded(app, HEALTH_WORLD) as base:
        yield base


def test_a_team_lead_finds_the_always_failing_case_and_goes_to_retire_it(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}")
    page.get_by_role("navigation", name="Test set").get_by_role("link", name="Health").click()
    expect(page.get_by_role("heading", name="Always failing (1)")).to_be_visible()
    expect(page.get_by_role("heading", name="Never run (0)")).to_be_visible()
    failing = page.locator("#always-failing + p + ul li")
    expect(failing).to_have_count(1)
    expect(failing.get_by_role("link", name=W)).to_be_visible()
    expect(failing.get_by_role("link", name="Revise")).to_have_attribute(
        "href", re.compile(rf"/cases/{W}/revise$")
    )
    chart = page.get_by_role("img", name=re.compile("Cases by pass rate, in tenths"))
    expect(chart).to_be_visible()
    expect(chart.locator("rect")).to_have_count(10)
    table = page.get_by_role("table", name="Cases by pass rate")
    expect(table.get_by_role("row", name="0 to 10 % 1")).to_be_visible()
    expect(table.get_by_role("row", name="90 to 100 % 2")).to_be_visible()
    checked(page)
    page.mouse.wheel(0, 250)  # the screenshot: from the always-failing case to the histogram
    page.wait_for_timeout(300)
    shoot(page, "health.png")
    failing.get_by_role("link", name="Retire").click()
    expect(page).to_have_url(re.compile(rf"/cases/{W}#retire$"))
    expect(page.get_by_role("heading", name="Retire")).to_be_visible()
    expect(page.get_by_role("table", name=re.compile("5 graded it"))).to_contain_text(
        "0 pass, 5 fail, 0 error"
    )
