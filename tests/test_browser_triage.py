"""Triage from a test run in a real browser (Chromium through Playwright, tests/browsing.py):
an expert revises a failing case taking the candidate's calls or answer, and retires another,
from the run's page, in place with JavaScript (j and k moving between the failures) and as
plain forms without; the run then says what was done from it. The page passes axe-core with
a form open in place."""

from __future__ import annotations

import json

import requests
from a11y import assert_accessible
from browsing import needs_chromium, sign_in
from conftest import AGENT, P1, TOKENS
from playwright.sync_api import Page, expect

pytestmark = needs_chromium
AUTH = {"Authorization": f"Bearer {TOKENS['admin']}"}
V = f"/v1/agents/{AGENT}"
LOOKUP = {"decisions": "wrong", "shouldCall": [{"tool": "lookup"}]}
SEARCHING = [{"tool": "search", "args": {"q": "x"}}]
ANSWER = "The notice period is three months."


def call(server: str, path: str, body: dict, status: int = 200) -> dict:
    resp = requests.post(f"{server}{V}{path}", json=body, headers=AUTH, timeout=10)
    assert resp.status_code == status, resp.text
    return resp.json()


def failing_run(server: str) -> tuple[str, list[str]]:
    """A finished run that failed two new cases (each expects `lookup`; the candidate called
    `search` and said ANSWER): its id and the cases', in the order the page lists them."""
    cases = sorted(
        call(server, "/test-set/cases", {"runId": "run-1", **LOOKUP}, 201)["id"] for _ in "ab"
    )
    run = call(server, "/test-runs", {"projectId": P1, "candidate": "3.0.0"}, 201)["id"]
    sent = [{"caseId": c, "output": ANSWER, "calls": SEARCHING} for c in cases]
    call(server, f"/test-runs/{run}/results", {"results": sent})
    call(server, f"/test-runs/{run}/finish", {})
    return run, cases


def case_of(server: str, case_id: str) -> dict:
    resp = requests.get(f"{server}{V}/test-set/cases/{case_id}", headers=AUTH, timeout=10)
    return resp.json()


def row_of(page: Page, case_id: str):
    return page.locator("#results tr[data-failure]").filter(
        has=page.get_by_role("link", name=case_id, exact=True)
    )


def test_an_expert_triages_a_runs_failures_from_its_page(page: Page, server):
    run, (first, second) = failing_run(server)
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    at = f"{server}/agents/{AGENT}/test-runs/{run}?outcome=fail"
    page.goto(at)
    done = page.locator("#triage-done")
    expect(done).to_be_hidden()
    if page.js:  # type: ignore[attr-defined]
        expect(page.locator("#triage-keys")).to_be_visible()
        page.keyboard.press("j")
        expect(page.get_by_role("link", name=first, exact=True)).to_be_focused()
        page.keyboard.press("j")
        expect(page.get_by_role("link", name=second, exact=True)).to_be_focused()
        page.keyboard.press("k")
        expect(page.get_by_role("link", name=first, exact=True)).to_be_focused()
        expect(row_of(page, first)).to_have_class("selected")

    row_of(page, first).get_by_role("link", name=f"Revise the expectation of {first}").click()
    box = page.get_by_label("What it expects")
    if page.js:  # type: ignore[attr-defined]
        expect(box).to_be_focused()  # opened in place, where the typing starts
    assert json.loads(box.input_value())["shouldCall"] == [{"tool": "lookup", "args": {}}]
    take = "calls" if page.js else "answer"  # type: ignore[attr-defined]
    page.get_by_role("button", name=f"Take the candidate's {take}").click()
    expect(page.locator("pre.diff .add").first).to_be_visible()
    taken = json.loads(box.input_value())
    if page.js:  # type: ignore[attr-defined]
        assert page.url == at  # in place: the run's page, never left
        assert taken == {"decisions": "wrong", "shouldCall": SEARCHING}
        note = page.get_by_label("Why it changes")
        note.fill("It searches now.")
        note.press("j")  # typing, not moving
        expect(note).to_have_value("It searches now.j")
        note.fill("It searches now.")
        assert_accessible(page)  # with a form open in place
    else:
        assert taken == {**LOOKUP | {"shouldCall": [{"tool": "lookup", "args": {}}]},
                         "answer": "wrong", "shouldSay": ANSWER}  # fmt: skip
        page.get_by_label("Why it changes").fill("It says the period.")
    page.get_by_role("button", name="Save the revision").click()
    expect(page.get_by_text(f"{first} is revised")).to_be_visible()
    expect(page).to_have_url(at)  # in place, or back to the run's page as it was
    expect(done).to_have_text("From this run: 1 revised by u-publisher.")

    row_of(page, second).get_by_role("link", name=f"Retire {second}").click()
    if page.js:  # type: ignore[attr-defined]
        expect(page.get_by_label("Why it is retired")).to_be_focused()
    page.get_by_role("button", name="Retire the case").click()  # no reason: refused
    expect(page.locator("input[name=reason][aria-invalid=true]")).to_be_visible()
    page.get_by_label("Why it is retired").fill("Lookups are gone.")
    page.get_by_role("button", name="Retire the case").click()
    expect(page.get_by_text(f"{second} is retired")).to_be_visible()
    expect(done).to_have_text("From this run: 1 revised, 1 retired by u-publisher.")
    expect(row_of(page, second).get_by_role("link", name=f"Retire {second}")).to_have_count(0)

    revised, retired = case_of(server, first), case_of(server, second)
    assert revised["revision"] == 2 and retired["retired"]["fromTestRun"] == run
    assert retired["retired"]["reason"] == "Lookups are gone."


def test_the_triage_pages_of_their_own_and_their_errors_pass_axe(js_page: Page, server):
    run, (case_id, _) = failing_run(server)
    sign_in(js_page, server, "publisher@acme.test", "publisher-pass-1")
    for what, button in (("revise", "Save the revision"), ("retire", "Retire the case")):
        js_page.goto(f"{server}/agents/{AGENT}/test-runs/{run}/results/{case_id}/{what}")
        assert_accessible(js_page)
        if what == "revise":
            js_page.get_by_role("button", name="Take the candidate's calls").click()
        js_page.get_by_role("button", name=button).click()  # no note, no reason: refused
        expect(js_page.locator("[aria-invalid=true]")).to_have_count(1)
        assert_accessible(js_page)
