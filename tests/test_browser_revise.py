"""Revising a case in a real browser (Chromium through Playwright, tests/browsing.py), with
JavaScript and without: the form is prefilled, shows the change before saving, and saves it."""

from __future__ import annotations

import json
import re

import requests
from browsing import needs_chromium, sign_in
from conftest import AGENT, P1, TOKENS
from playwright.sync_api import Page, expect

pytestmark = needs_chromium
AUTH = {"Authorization": f"Bearer {TOKENS['admin']}"}


def added(server: str) -> str:
    """A new hand case on run-1 expecting the calls right; its id."""
    resp = requests.post(f"{server}/v1/agents/{AGENT}/test-set/cases", headers=AUTH, timeout=10,
                         json={"runId": "run-1", "decisions": "right"})  # fmt: skip
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def test_an_expert_revises_a_case_seeing_the_change_before_saving_it(page: Page, server):
    case_id = added(server)
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases/{case_id}")
    page.get_by_role("link", name="Revise the expectation").click()
    expect(page.get_by_role("heading", name=f"Revise what {case_id} expects")).to_be_visible()
    box = page.get_by_label("What it expects")
    assert json.loads(box.input_value()) == {"decisions": "right"}  # prefilled
    expect(page.get_by_role("button", name="Save the revision")).to_have_count(0)
    box.fill(json.dumps({"decisions": "wrong", "shouldCall": [{"tool": "lookup"}]}))
    page.get_by_label("Why it changes").fill("It must look the notice period up.")
    page.get_by_role("button", name="Show the change").click()
    change = page.locator("pre.diff")
    expect(change.locator(".del")).to_contain_text('"decisions": "right"')
    expect(change.locator(".add").first).to_contain_text('"decisions": "wrong"')
    page.get_by_role("button", name="Save the revision").click()
    expect(page.get_by_text("The case is revised")).to_be_visible()
    expect(page.locator("dl.facts")).to_contain_text(re.compile(r"Revision\s*2"))
    expect(page.get_by_text("It should call:")).to_be_visible()
    case = requests.get(f"{server}/v1/agents/{AGENT}/test-set/cases/{case_id}", headers=AUTH,
                        timeout=10).json()  # fmt: skip
    assert case["revision"] == 2 and case["expect"]["decisions"]["verdict"] == "wrong"


def test_an_expert_tags_a_selection_sees_the_chips_and_filters_by_the_tag(page: Page, server):
    tag = "smoke-js" if page.js else "smoke-no-js"  # type: ignore[attr-defined]
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}")
    rows = page.locator("#case-rows tr:not(#more-row)")
    picked = [rows.nth(n).get_by_role("link").first.inner_text() for n in (0, 2)]
    for case_id in picked:
        page.get_by_label(f"Select {case_id}", exact=True).check()
    page.get_by_label("Tags", exact=True).fill(f"{tag}, Bad Tag")
    page.get_by_role("button", name="Tag selected", exact=True).click()
    expect(page.get_by_text("Nothing was changed")).to_be_visible()  # 'Bad' is no tag
    for case_id in picked:
        page.get_by_label(f"Select {case_id}", exact=True).check()
    page.get_by_label("Tags", exact=True).fill(tag)
    page.get_by_role("button", name="Tag selected", exact=True).click()
    expect(page.get_by_text(f"Tagged 2 cases: {tag}.")).to_be_visible()
    for case_id in picked:
        row = rows.filter(has=page.get_by_role("link", name=case_id, exact=True))
        expect(row.locator(".tag", has_text=tag)).to_be_visible()
    page.get_by_label("Tag", exact=True).fill(tag)
    page.get_by_role("button", name="Apply").click()
    expect(rows).to_have_count(2)
    shown = sorted(rows.nth(n).get_by_role("link").first.inner_text() for n in (0, 1))
    assert shown == sorted(picked)
