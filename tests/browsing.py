"""A live server and Debian's Chromium for the browser tests, shared by every file that drives
pages (tests/conftest.py registers this module as a plugin, so its fixtures are everyone's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import live
import pytest
from conftest import app_on
from playwright.sync_api import Browser, Page, expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
EXTRA_CASES = 60  # more than two pages of 25

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
# An assertion waits as long as an action does (10 s, not Playwright's 5 s): a loaded CI host is
# slow, never wrong, and a failing assertion still fails, only later.
expect.set_options(timeout=10_000)


def extra_cases() -> dict:
    """Hand cases on run-2, one a minute, so the list has pages to load."""
    return {
        "cases": [
            {
                "id": f"case-extra-{i:03d}",
                "run": "run-2",
                "by": "u-publisher",
                "at": f"2026-05-01T{i // 60:02d}:{i % 60:02d}:00Z",
                "body": {"answer": "right"},
            }
            for i in range(EXTRA_CASES)
        ]
    }


@pytest.fixture(scope="module")
def server(databases) -> Iterator[str]:
    """A live server (real HTTP, threads) on a copy of the test world with extra cases."""
    with app_on(databases, databases.clone()) as app, live.threaded(app, extra_cases()) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium (never a browser download of Playwright's own), one for the module."""
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture(params=[True, False], ids=["js", "no-js"])
def page(request, browser: Browser) -> Iterator[Page]:
    """A page with JavaScript, then one without: each flow that takes it runs both ways."""
    context = browser.new_context(
        java_script_enabled=request.param, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.js = request.param  # type: ignore[attr-defined]
    yield page
    context.close()


@pytest.fixture
def js_page(browser: Browser) -> Iterator[Page]:
    """A page with JavaScript on (axe-core runs in the page)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def sign_in(page: Page, server: str, email: str, password: str) -> None:
    """Sign in through the login form; the overview is where one lands."""
    page.goto(f"{server}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Test sets")).to_be_visible()
