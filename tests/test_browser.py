"""The pages in a real browser: Debian's Chromium driven by Playwright, against a live server.

Every flow runs twice, with JavaScript (htmx swaps in place) and without (plain forms and links):
the `page` fixture (tests/browsing.py) is one of each.
Screenshots land in test-artifacts/; with KINDGI_UPDATE_SCREENSHOTS=1 the README's are refreshed.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import requests
from browsing import needs_chromium, sign_in
from conftest import AGENT, P1, TOKENS
from playwright.sync_api import Page, expect

ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
README_SHOTS = Path(__file__).parent.parent / "docs" / "screenshots"

pytestmark = needs_chromium


def shoot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=False)
    if os.environ.get("KINDGI_UPDATE_SCREENSHOTS") and page.js:  # type: ignore[attr-defined]
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ARTIFACTS / name, README_SHOTS / name)


def case_rows(page: Page):
    return page.locator("#case-rows tr:not(#more-row)")


def case_row(page: Page, case_id: str):
    """The row of this case: by its link's exact text, as `case-2` is also the start of a
    random `case-2…` id that another test here added."""
    return case_rows(page).filter(has=page.get_by_role("link", name=case_id, exact=True))


def test_a_wrong_password_and_an_unknown_email_get_the_same_answer(page, server):
    answers = []
    for email, password in (("reader@acme.test", "wrong"), ("nobody@nowhere.test", "x")):
        page.goto(f"{server}/login")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        answers.append(page.get_by_role("alert").inner_text())
    assert answers[0] == answers[1] == "That email and password don't match an account."


def test_an_expert_filters_loads_more_goes_back_and_opens_a_case(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.get_by_role("row", name=re.compile("Drafting")).get_by_role("link", name=AGENT).click()
    expect(page.get_by_role("heading", name=re.compile(AGENT))).to_be_visible()
    expect(case_rows(page)).to_have_count(25)
    chips = {
        "smoke": ["case-extra-059", "case-extra-058", "case-extra-055"],
        "billing": ["case-extra-058", "case-extra-056"],
        "lease": ["case-extra-057"],
    }
    for tag, ids in chips.items():  # tags change no version: the other flows see the same set
        tagged = requests.post(
            f"{server}/v1/agents/{AGENT}/test-set/cases/tags",
            json={"projectId": P1, "caseIds": ids, "add": [tag]},
            headers={"Authorization": f"Bearer {TOKENS['publisher']}"},
            timeout=10,
        )
        assert tagged.ok, tagged.text
    page.reload()
    chips_of_58 = case_row(page, "case-extra-058").locator("span[class=tag]")  # not "expert"
    expect(chips_of_58).to_have_text(["billing", "smoke"])
    shoot(page, "cases.png")

    page.get_by_label("Corrections").check()
    if not page.js:  # type: ignore[attr-defined]
        page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"kind=correction"))
    expect(case_rows(page)).to_have_count(1)  # cor-1; cor-2 is won't-fix
    expect(case_rows(page).first).to_contain_text("cor-1")

    page.get_by_label("By hand").check()
    if not page.js:  # type: ignore[attr-defined]
        page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"kind=hand"))
    expect(case_rows(page)).to_have_count(25)
    first_page = case_rows(page).all_inner_texts()
    page.get_by_role("link", name="Load more").click()
    if page.js:  # type: ignore[attr-defined]
        expect(case_rows(page)).to_have_count(50)  # appended in place
    else:
        expect(page).to_have_url(re.compile(r"cursor="))  # the next page, as its own URL
        expect(case_rows(page)).to_have_count(25)
        assert set(case_rows(page).all_inner_texts()).isdisjoint(first_page)

    # Back and reload show the list the URL names: with htmx, loading more is not a step in
    # history, so back is the previous filter; without, it is the first page of this one.
    page.go_back()
    if page.js:  # type: ignore[attr-defined]
        expect(page).to_have_url(re.compile(r"kind=correction(&|$)"))
        expected_filter, expected_first = "Corrections", "cor-1"
    else:
        expect(page).to_have_url(re.compile(r"kind=hand(&|$)"))
        expected_filter, expected_first = "By hand", first_page[0].split()[0]
    for _ in ("back", "reload"):
        expect(page.get_by_label(expected_filter)).to_be_checked()
        expect(case_rows(page).first).to_contain_text(expected_first)
        page.reload()

    case_rows(page).first.get_by_role("link").click()
    expect(page.get_by_role("heading", name="What it expects")).to_be_visible()
    expect(page.get_by_text("The run it came from")).to_be_visible()


def test_a_load_more_link_gone_stale_starts_the_list_again_with_a_note(page, server):
    """A cursor lasts a day: a "Load more" kept longer (here, one spoilt on its way) brings
    the list back from its newest, filters kept, and says why, with htmx and without."""
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}&kind=hand")
    expect(case_rows(page)).to_have_count(25)
    newest = case_rows(page).first.inner_text()

    def spoil(route):
        route.continue_(url=re.sub(r"cursor=[^&]+", "cursor=spoilt", route.request.url))

    page.route(re.compile(r".*/test-set/cases\?.*cursor=.*"), spoil)
    page.get_by_role("link", name="Load more").click()
    expect(page.get_by_role("status").filter(has_text="out of date")).to_be_visible()
    expect(page).to_have_url(re.compile(r"kind=hand(&|$)"))
    expect(page.get_by_label("By hand")).to_be_checked()
    expect(case_rows(page)).to_have_count(25)
    expect(case_rows(page).first).to_have_text(newest)


def test_an_expert_adds_a_case_after_a_first_error_then_retires_and_restores_it(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases/new?projectId={P1}")
    page.locator("input[name=runId][value=run-1]").check()
    if page.js:  # type: ignore[attr-defined]
        # the pick swaps the whole form in: a verdict checked before that lands is dropped
        expect(page.get_by_role("heading", name="Run run-1")).to_be_visible()
    page.locator("input[name=decisions][value=wrong]").check()
    page.get_by_role("button", name="Add the case").click()

    expect(page.get_by_role("alert")).to_contain_text("The case was not added")
    expect(page.locator("#err-decisions")).to_contain_text("shouldCall or mustNotCall")
    expect(page.locator("input[name=runId][value=run-1]")).to_be_checked()  # kept
    expect(page.locator("input[name=decisions][value=wrong]")).to_be_checked()

    page.locator("#shouldCall-0-tool").fill("lookup")
    page.locator("#shouldCall-0-args").fill('{"q": "<b>lease</b>"}')
    page.get_by_label("Must not call").fill("send_email")
    page.get_by_role("button", name="Add the case").click()
    expect(page.get_by_role("status")).to_contain_text("Case added")
    expect(page.get_by_text('{"q": "<b>lease</b>"}')).to_be_visible()  # escaped, as typed
    case_url = page.url
    shoot(page, "case.png")

    page.get_by_label("Why retire it?").fill("a duplicate of case-2")
    page.get_by_role("button", name="Retire this case").click()
    expect(page.get_by_role("status")).to_contain_text("retired")
    expect(page.get_by_text("“a duplicate of case-2”")).to_be_visible()
    page.get_by_role("button", name="Restore this case").click()
    expect(page.get_by_role("status")).to_contain_text("restored")
    expect(page.get_by_role("button", name="Retire this case")).to_be_visible()
    assert page.url == case_url


def test_an_expert_ticks_cases_retires_them_at_once_then_restores_them(page, server):
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}")
    boxes = page.locator("#case-rows input[name=caseIds]")
    expect(boxes).to_have_count(25)
    if page.js:  # type: ignore[attr-defined]
        page.get_by_label("Select all on this page").check()
        assert all(boxes.nth(i).is_checked() for i in range(25))
        page.get_by_label("Select all on this page").uncheck()
        assert not any(boxes.nth(i).is_checked() for i in range(25))
    picked = [case_rows(page).nth(i).get_by_role("link").inner_text() for i in (0, 1)]
    for case_id in picked:
        page.get_by_label(f"Select {case_id}").check()
    page.get_by_label("Reason to retire").fill("superseded by the new policy")
    page.get_by_role("button", name="Retire selected").click()
    expect(page.get_by_role("status").first).to_contain_text("Retired 2 cases.")
    expect(page.locator("#case-rows input[name=caseIds]")).to_have_count(25)
    assert picked[0] not in page.locator("#case-rows").inner_text()  # retired: not listed
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}&include=retired")
    for case_id in picked:
        page.get_by_label(f"Select {case_id}").check()
    page.get_by_role("button", name="Restore selected").click()
    expect(page.get_by_role("status").first).to_contain_text("Restored 2 cases.")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}")
    expect(case_rows(page).first.get_by_role("link")).to_have_text(picked[0])


def test_a_user_creates_a_token_uses_it_and_revokes_it(page, server):
    sign_in(page, server, "reader@acme.test", "reader-pass-1")
    page.get_by_role("link", name="API tokens").click()
    name = f"browser {'js' if page.js else 'plain'}"  # type: ignore[attr-defined]
    page.get_by_label("Name of a new token").fill(name)
    page.get_by_role("button", name="Create token").click()
    secret = page.get_by_label("The new token's secret").input_value()
    assert secret.startswith("kgi_")
    api = f"{server}/v1/agents/{AGENT}/test-set?projectId={P1}"
    assert requests.get(api, headers={"Authorization": f"Bearer {secret}"}, timeout=10).ok

    page.get_by_role("button", name=f"Revoke {name}").click()
    expect(page.get_by_role("status")).to_contain_text("revoked")
    assert (
        requests.get(api, headers={"Authorization": f"Bearer {secret}"}, timeout=10).status_code
        == 401
    )
    page.reload()
    assert secret not in page.content()  # shown once only


def test_a_user_with_many_tokens_sees_them_a_page_at_a_time(page, server):
    headers = {"Authorization": f"Bearer {TOKENS['writer']}"}
    for i in range(30):
        made = requests.post(
            f"{server}/v1/tokens", json={"name": f"many {i:02d}"}, headers=headers, timeout=10
        )
        assert made.status_code == 201, made.text
    listed = requests.get(f"{server}/v1/tokens?limit=100", headers=headers, timeout=10).json()
    assert listed["hasMore"] is False
    expected = [token["name"] for token in listed["data"]]
    sign_in(page, server, "writer@acme.test", "writer-pass-1")
    page.get_by_role("link", name="API tokens").click()
    names = page.locator("table tbody tr td:first-child")
    older = page.get_by_role("link", name="Older tokens")
    seen: list[str] = []
    while True:
        expect(names.first).to_have_text(expected[len(seen)])
        expect(names).to_have_count(min(25, len(expected) - len(seen)))
        seen += names.all_inner_texts()
        if len(seen) == len(expected):
            break
        older.click()
    expect(older).to_have_count(0)
    assert seen == expected
    page.get_by_role("link", name="← Back to the newest tokens").click()
    expect(names.first).to_have_text(expected[0])

    page.goto(f"{server}/tokens?cursor=spoilt")  # a stale or spoilt "Older tokens" link
    expect(page.get_by_role("status")).to_contain_text("out of date")
    expect(names).to_have_count(25)
    expect(names.first).to_have_text(expected[0])
    assert page.url == f"{server}/tokens"


def test_a_reader_is_not_offered_what_they_may_not_do_and_is_refused_it_anyway(page, server):
    sign_in(page, server, "reader@acme.test", "reader-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}")
    expect(page.get_by_role("link", name="Add a case by hand")).to_have_count(0)
    page.goto(f"{server}/agents/{AGENT}/test-set/cases/case-2")
    expect(page.get_by_role("button", name="Retire this case")).to_have_count(0)
    response = page.goto(f"{server}/agents/{AGENT}/test-set/cases/new?projectId={P1}")
    assert response.status == 403


def test_another_tenants_case_is_a_not_found_page(page, server):
    sign_in(page, server, "admin@globex.test", "globex-pass-1")
    response = page.goto(f"{server}/agents/{AGENT}/test-set/cases/case-2")
    assert response.status == 404
    expect(page.get_by_role("heading")).to_contain_text("No such case")


NAMELESS = """els => els.filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
    && !(e.tagName === 'BUTTON' && e.textContent.trim())).map(e => e.outerHTML)"""


def test_every_control_on_every_page_has_a_label(browser, server):
    page = browser.new_page()
    try:
        page.goto(f"{server}/login")
        controls = "input:not([type=hidden]), select, textarea, button"
        assert page.locator(controls).evaluate_all(NAMELESS) == []
        sign_in(page, server, "admin@acme.test", "admin-pass-1")
        for path in (
            "/",
            f"/agents/{AGENT}/test-set/cases?projectId={P1}",
            f"/agents/{AGENT}/test-set/cases/case-2",
            f"/agents/{AGENT}/test-set/cases/new?projectId={P1}",
            "/tokens",
        ):
            page.goto(server + path)
            assert page.locator(controls).evaluate_all(NAMELESS) == [], path
    finally:
        page.close()


def test_an_expert_searches_and_the_address_keeps_the_search(page, server):
    """The search box: as one types with htmx (debounced, the address kept in step), by the
    Apply button without JavaScript; the matched words marked, the matches counted, and the
    address, opened anew, showing the same search. (Other tests here add cases to the same
    server, so what is found is checked by what it must include.)"""
    sign_in(page, server, "publisher@acme.test", "publisher-pass-1")
    page.goto(f"{server}/agents/{AGENT}/test-set/cases?projectId={P1}")
    page.get_by_label("Search cases").fill("LOOKUP")
    if not page.js:  # type: ignore[attr-defined]
        page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"[?&]q=LOOKUP(&|$)"))
    expect(page.locator("#matching")).to_be_visible()
    found = case_rows(page)
    expect(case_row(page, "cor-1")).to_have_count(1)
    expect(case_row(page, "case-1")).to_have_count(0)  # retired
    n = found.count()
    expect(found.locator("mark")).to_have_count(n)  # each row's summary names the tool
    expect(found.locator("mark").first).to_have_text("lookup")
    expect(page.locator("#matching")).to_have_text(re.compile(rf"^{n} of \d+ cases$"))

    page.goto(page.url)  # a bookmark, a shared link
    expect(page.get_by_label("Search cases")).to_have_value("LOOKUP")
    expect(case_rows(page)).to_have_count(n)

    page.get_by_label("Search cases").fill("lease")  # in run-1's input only
    page.get_by_label("Show retired cases").check()
    if not page.js:  # type: ignore[attr-defined]
        page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"[?&]q=lease(&|$)"))
    expect(case_row(page, "case-1")).to_have_count(1)  # retired, shown now
    expect(case_row(page, "case-2")).to_have_count(0)  # run-2's
