"""Revising a case in a real browser (Chromium through Playwright, tests/browsing.py), with
JavaScript and without: the form is prefilled, shows the change before saving, and saves it."""

from __future__ import annotations

import json
import re

import requests
from browsing import needs_chromium, sign_in
from conftest import AGENT, TOKENS
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
