"""The pages against a hostile browser: CSRF, script injection, framing, and password guessing.

- Every form that changes something refuses a missing CSRF token, another session's, an expired
  one and garbage, in the form and in htmx's `X-CSRFToken` header, and nothing changes.
- Script payloads in every field a user can fill (reason, shouldSay, why, tool names, args,
  item keys and pointers, a run's output, input, version and tools, token names, the sign-in
  email, the search box) render as text in Debian's Chromium, with the page's CSP switched off
  so that only escaping stands in the way: no dialog opens, no element is injected.
- Every kind of answer carries the CSP (`object-src 'none'`, `base-uri 'none'`,
  `frame-ancestors 'none'`, no inline script), `nosniff` and `X-Frame-Options: DENY`, and
  Chromium enforces them: no inline script runs, no other site can frame a page.
- Sign-in is throttled per account across gunicorn's worker processes: at most 10 failures in 15
  minutes, alike for emails that exist and emails that don't.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from conftest import (
    AGENT,
    CSRF_FIELD,
    MULTI,
    P1,
    P2,
    TOKENS,
    app_on,
    csrf_of,
    sign_in,
    snapshot_db,
)
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from jsonpointer import JsonPointer
from live import gunicorn
from playwright.sync_api import Browser, Page, sync_playwright
from werkzeug.serving import make_server

from kindgi.database import db

CHROMIUM = "/usr/bin/chromium"
ADMIN = {"Authorization": f"Bearer {TOKENS['admin']}"}


# ---------------------------------------------------------------- CSRF


FORMS = {
    # (path, form): every form that changes something
    "retire": (f"/agents/{AGENT}/test-set/cases/case-2/retire", {"reason": "stale"}),
    "restore": (f"/agents/{AGENT}/test-set/cases/case-1/restore", {}),
    "add a case": (f"/agents/{AGENT}/test-set/cases/new?projectId={P1}",
                   {"runId": "run-1", "answer": "right", "add": "1"}),
    "make a token": ("/tokens", {"name": "sneaky"}),
    "revoke a token": ("/tokens/tok-publisher/revoke", {}),
    "sign out": ("/logout", {}),
}  # fmt: skip


def expired_token(app, client) -> str:
    """This session's own CSRF token, as a page would have given it an hour and a second ago."""
    with client.session_transaction() as session:
        raw = session["csrf_token"]
    serializer = URLSafeTimedSerializer(app.secret_key, salt="wtf-csrf-token")
    original = TimestampSigner.get_timestamp
    TimestampSigner.get_timestamp = lambda self: int(time.time()) - 3601
    try:
        return serializer.dumps(raw)
    finally:
        TimestampSigner.get_timestamp = original


def token_for(kind: str, app, client) -> dict[str, str]:
    """Form fields and headers carrying a CSRF token of the given kind."""
    if kind == "missing":
        return {}
    if kind == "another session's":
        other = app.test_client()
        sign_in(other, "reader@acme.test", "reader-pass-1")
        return {"csrf_token": csrf_of(other)}
    if kind == "expired":
        csrf_of(client)  # the session has its raw token
        return {"csrf_token": expired_token(app, client)}
    if kind == "garbage":
        return {"csrf_token": "IjAwMDAi.Zm9v.YmFy"}
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "another session's", "expired", "garbage"])
def test_every_form_without_this_sessions_live_csrf_token_is_refused_and_changes_nothing(app, kind):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    extra = token_for(kind, app, client)
    for form, (path, fields) in FORMS.items():
        before = snapshot_db(app)
        resp = client.post(path, data={**fields, **extra})
        assert resp.status_code == 400, (form, resp.status_code, resp.get_data(as_text=True)[:300])
        assert resp.mimetype == "text/html" and "bad-input" in resp.get_data(as_text=True), form
        assert snapshot_db(app) == before, form
        assert client.get("/tokens").status_code == 200, form  # still signed in


@pytest.mark.parametrize("kind", ["missing", "another session's", "expired", "garbage"])
def test_an_htmx_request_with_a_foreign_csrf_header_is_refused(app, kind):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    token = token_for(kind, app, client).get("csrf_token")
    headers = {"HX-Request": "true", **({"X-CSRFToken": token} if token else {})}
    before = snapshot_db(app)
    resp = client.post(*FORMS["retire"][:1], data=FORMS["retire"][1], headers=headers)
    assert resp.status_code == 400
    assert snapshot_db(app) == before


def test_sign_in_itself_needs_the_forms_csrf_token(app):
    client = app.test_client()
    client.get("/login")
    resp = client.post("/login", data={"email": "reader@acme.test", "password": "reader-pass-1"})
    assert resp.status_code == 400
    assert client.get("/tokens").status_code == 302  # not signed in


def test_the_same_forms_with_this_sessions_token_do_work(app):
    """The control: the refusals above are for the token, not for anything else."""
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    for name, (path, fields) in FORMS.items():
        resp = client.post(path, data={**fields, "csrf_token": csrf_of(client)})
        assert resp.status_code in (201, 302, 303), (name, resp.get_data(as_text=True)[:300])


def test_the_session_cookie_is_http_only_and_same_site_lax(app):
    client = app.test_client()
    client.get("/login")
    cookie = client.get_cookie("session")
    assert cookie is not None and cookie.http_only and cookie.same_site == "Lax"


# ---------------------------------------------------------------- security headers


def answers(app) -> dict[str, Any]:
    """One answer of every kind the app gives."""
    client, out = app.test_client(), {}
    out["sign-in page"] = client.get("/login")
    out["redirect to sign in"] = client.get("/")
    out["CSRF refusal"] = client.post("/login", data={})
    out["static file"] = client.get("/static/style.css")
    out["API reference"] = client.get("/docs")
    out["OpenAPI document"] = client.get("/v1/openapi.json")
    out["API 200"] = client.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}", headers=ADMIN)
    out["API 401"] = client.get("/v1/tokens")
    out["API 404"] = client.get("/v1/nope", headers=ADMIN)
    out["API 405"] = client.put("/v1/tokens", headers=ADMIN)
    out["API 413"] = client.post("/v1/tokens", data=b" " * (2 << 20), headers=ADMIN,
                                 content_type="application/json")  # fmt: skip
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    out["overview"] = client.get("/")
    out["case page"] = client.get(f"/agents/{AGENT}/test-set/cases/case-2")
    out["htmx partial"] = client.get(f"/agents/{AGENT}/test-set/cases?projectId={P1}&kind=hand",
                                     headers={"HX-Request": "true"})  # fmt: skip
    out["page 404"] = client.get("/nope")
    out["add-case form"] = client.get(f"/agents/{AGENT}/test-set/cases/new?projectId={P1}")
    out["page 403"] = client.get(f"/agents/{MULTI}/test-set/cases/new?projectId={P2}")  # no write
    out["tokens page"] = client.get("/tokens")
    return out


def test_every_kind_of_answer_carries_the_csp_nosniff_and_deny_framing(app):
    kinds = answers(app)
    assert kinds["page 403"].status_code == 403 and kinds["API 413"].status_code == 413
    for name, resp in kinds.items():
        csp = resp.headers.get("Content-Security-Policy", "")
        policy = {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}
        assert policy.get("object-src") == ["'none'"], (name, csp)
        assert policy.get("base-uri") == ["'none'"], (name, csp)
        assert policy.get("frame-ancestors") == ["'none'"], (name, csp)
        assert "'unsafe-inline'" not in policy.get("script-src", ["?"]), (name, csp)
        assert "'unsafe-eval'" not in policy.get("script-src", ["?"]), (name, csp)
        assert policy.get("default-src") == ["'self'"], (name, csp)
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", name
        assert resp.headers.get("X-Frame-Options") == "DENY", name
        assert resp.headers.get("X-Request-Id"), name


# ---------------------------------------------------------------- in Chromium


def payload(where: str) -> str:
    """A script payload naming the field it was put in (so a dialog would say which)."""
    return f"\"'><img src=x onerror=alert('{where}')><script>alert('{where}')</script>{{{{7*7}}}}"


PAYLOADS = {name: payload(name) for name in (
    "reason", "shouldSay", "why", "tool", "banned", "args", "key", "output", "input", "version",
    "run-tool", "token", "email", "search",
)}  # fmt: skip


@pytest.fixture(scope="module")
def hostile(databases) -> Iterator[dict[str, Any]]:
    """A live server whose world is full of script payloads, put there through the API."""
    with app_on(databases, databases.clone()) as app:
        api = app.test_client()
        run = api.post(f"/v1/agents/{AGENT}/runs", headers=ADMIN, json={
            "projectId": P1, "version": PAYLOADS["version"][:100], "status": "finished",
            "input": {"q": PAYLOADS["input"]},
            "output": {"answer": PAYLOADS["output"], PAYLOADS["key"]: "pointed at"},
            "calls": [{"tool": PAYLOADS["run-tool"], "args": {"x": PAYLOADS["args"]}}],
        })  # fmt: skip
        assert run.status_code == 201, run.get_json()
        run_id = run.get_json()["id"]
        case = api.post(f"/v1/agents/{AGENT}/test-set/cases", headers=ADMIN, json={
            "runId": run_id, "decisions": "wrong",
            "shouldCall": [{"tool": PAYLOADS["tool"], "args": {"q": PAYLOADS["args"]}}],
            "mustNotCall": [PAYLOADS["banned"]],
            "answer": "wrong", "shouldSay": PAYLOADS["shouldSay"], "why": PAYLOADS["why"],
            "items": [{"key": PAYLOADS["key"], "verdict": "right",
                       "pointer": JsonPointer.from_parts([PAYLOADS["key"]]).path}],
        })  # fmt: skip
        assert case.status_code == 201, case.get_json()
        case_id = case.get_json()["id"]
        retired = api.post(f"/v1/agents/{AGENT}/test-set/cases/{case_id}/retire", headers=ADMIN,
                           json={"reason": PAYLOADS["reason"]})  # fmt: skip
        assert retired.status_code == 200, retired.get_json()
        reader = {"Authorization": f"Bearer {TOKENS['reader']}"}
        named = api.post("/v1/tokens", json={"name": PAYLOADS["token"]}, headers=reader)
        assert named.status_code == 201
        httpd = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield {"base": f"http://127.0.0.1:{httpd.server_port}", "case": case_id,
                   "run": run_id, "app": app}  # fmt: skip
        finally:
            httpd.shutdown()
            with app.app_context():
                db.session.remove()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield browser
        browser.close()


def open_page(browser: Browser, *, bypass_csp: bool) -> tuple[Page, list[str]]:
    context = browser.new_context(bypass_csp=bypass_csp, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    dialogs: list[str] = []

    def on_dialog(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return page, dialogs


def browser_sign_in(page: Page, base: str, email: str, password: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/")


INJECTED = "img[src='x'], script:not([src]), svg[onload], [onerror], iframe"


def assert_inert(page: Page, dialogs: list[str], *expected: str) -> None:
    """No dialog opened, nothing was injected, and every payload shows as the text it is."""
    page.wait_for_timeout(150)  # an onerror handler would have fired by now
    assert dialogs == []
    assert page.locator(INJECTED).count() == 0
    text = page.locator("main").text_content() + " ".join(
        page.locator("main input, main textarea").evaluate_all("els => els.map(e => e.value)")
    )
    for name in expected:
        assert PAYLOADS[name] in text or json.dumps(PAYLOADS[name])[1:-1] in text, (name, text)


def test_payloads_in_every_stored_field_render_as_text_in_chromium(hostile, browser):
    page, dialogs = open_page(browser, bypass_csp=True)
    base = hostile["base"]
    browser_sign_in(page, base, "admin@acme.test", "admin-pass-1")
    page.goto(f"{base}/agents/{AGENT}/test-set/cases/{hostile['case']}")
    assert_inert(page, dialogs, "reason", "shouldSay", "why", "tool", "banned", "key", "output",
                 "input", "run-tool", "args")  # fmt: skip
    page.goto(f"{base}/agents/{AGENT}/test-set/cases?projectId={P1}&include=retired")
    assert_inert(page, dialogs, "tool")
    page.goto(f"{base}/agents/{AGENT}/test-set/cases/new?projectId={P1}")
    assert_inert(page, dialogs)
    assert PAYLOADS["version"][:50] in page.locator("main").inner_text()
    page.goto(f"{base}/")
    assert_inert(page, dialogs)
    page.context.close()

    page, dialogs = open_page(browser, bypass_csp=True)
    browser_sign_in(page, base, "reader@acme.test", "reader-pass-1")
    page.goto(f"{base}/tokens")
    assert_inert(page, dialogs, "token")
    page.context.close()


def test_payloads_typed_into_forms_come_back_as_text_in_chromium(hostile, browser):
    page, dialogs = open_page(browser, bypass_csp=True)
    base = hostile["base"]
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(PAYLOADS["email"])
    page.get_by_label("Password").fill("wrong")
    page.locator("form").evaluate("f => f.noValidate = true")  # the email is not an email
    page.get_by_role("button", name="Sign in").click()
    assert_inert(page, dialogs, "email")

    browser_sign_in(page, base, "admin@acme.test", "admin-pass-1")
    search = f"{base}/agents/{AGENT}/test-set/cases/new?projectId={P1}"
    page.goto(search)
    page.locator("#search").fill(PAYLOADS["search"])
    page.get_by_role("button", name="Find").click()
    assert_inert(page, dialogs, "search")

    page.goto(search)  # a form with an error: everything typed comes back
    page.locator("input[name=decisions][value=wrong]").check()
    page.locator("#shouldCall-0-tool").fill(PAYLOADS["tool"])
    page.locator("#shouldCall-0-args").fill(PAYLOADS["args"])  # not JSON: an error
    page.locator("#items-0-key").fill(PAYLOADS["key"])
    page.locator("#items-0-pointer").fill(PAYLOADS["output"])
    page.locator("input[name=answer][value=wrong]").check()
    page.locator("textarea[name=shouldSay], input[name=shouldSay]").fill(PAYLOADS["shouldSay"])
    page.locator("textarea[name=why], input[name=why]").fill(PAYLOADS["why"])
    page.get_by_role("button", name="Add the case").click()
    assert page.get_by_role("alert").count() >= 1
    assert_inert(page, dialogs, "tool", "args", "key", "output", "shouldSay", "why")

    page.goto(f"{base}/agents/{AGENT}/test-set/cases/case-2")
    page.get_by_label("Why retire it?").fill(PAYLOADS["reason"][:1000])
    page.get_by_role("button", name="Retire this case").click()
    assert_inert(page, dialogs, "reason")

    page.context.close()

    page, dialogs = open_page(browser, bypass_csp=True)
    browser_sign_in(page, base, "reader@acme.test", "reader-pass-1")
    page.goto(f"{base}/tokens")
    page.get_by_label("Name of a new token").fill(PAYLOADS["token"])
    page.get_by_role("button", name="Create token").click()
    assert_inert(page, dialogs, "token")
    page.context.close()


def test_the_tokens_page_shows_an_expired_token_as_expired(app):
    client = app.test_client()
    sign_in(client, "admin@acme.test", "admin-pass-1")  # tok-expired is the admin's
    resp = client.get("/tokens")
    assert resp.status_code == 200, resp.get_data(as_text=True)[:300]
    row = re.search(r"<tr>\s*<td>tok-expired</td>.*?</tr>", resp.get_data(as_text=True), re.S)
    assert row is not None and "expired" in row.group(0).split("</code>")[-1]


def test_chromium_runs_no_inline_script_and_no_other_site_frames_a_page(hostile, browser):
    page, dialogs = open_page(browser, bypass_csp=False)
    base = hostile["base"]
    page.goto(f"{base}/login")
    with contextlib.suppress(Exception):  # Chromium may refuse it outright: so much the better
        page.add_script_tag(content="window.__injected = 1; alert('inline')")
    assert page.evaluate("window.__injected") is None
    assert dialogs == []

    framer, _ = open_page(browser, bypass_csp=False)
    framer.set_content(f'<iframe id="f" src="{base}/login" width="600" height="400"></iframe>')
    framer.wait_for_timeout(1000)
    frame = framer.frame_locator("#f")
    assert frame.locator("form").count() == 0  # Chromium showed its own error instead
    page.context.close()
    framer.context.close()


# ---------------------------------------------------------------- guessing passwords


@pytest.fixture(scope="module")
def live(databases, tmp_path_factory) -> Iterator[str]:
    """gunicorn, 4 worker processes, on a copy of the test world for this module's tests (each
    guesses at emails of its own)."""
    with app_on(databases, databases.clone()) as app:
        log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
        with gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], log) as base:
            yield base


def attempt(base: str, email: str, password: str) -> requests.Response:
    """One sign-in, on its own connection (so gunicorn may hand it to any worker)."""
    with requests.Session() as s:
        page = s.get(f"{base}/login", timeout=30)
        token = CSRF_FIELD.search(page.text).group(1)
        return s.post(f"{base}/login", data={"email": email, "password": password,
                      "csrf_token": token}, allow_redirects=False, timeout=30)  # fmt: skip


def plain(resp: requests.Response, email: str) -> str:
    """A sign-in page with what differs by request taken out."""
    text = resp.text.replace(email, "EMAIL")
    text = re.sub(r'value="[A-Za-z0-9._-]{40,}"', "", text)
    return re.sub(r'"X-CSRFToken": "[^"]+"', "", text)


@pytest.mark.parametrize(
    ("email", "password"),
    [("reader@acme.test", "reader-pass-1"), ("nobody-1@acme.test", "reader-pass-1")],
)
def test_sign_in_stops_after_ten_failures_across_workers_one_after_another(live, email, password):
    statuses = [attempt(live, email, "wrong").status_code for _ in range(12)]
    assert statuses == [401] * 10 + [429] * 2
    right = attempt(live, email, password)
    assert right.status_code == 429 and right.headers["Retry-After"] == "900"
    assert attempt(live, "admin@acme.test", "admin-pass-1").status_code == 302  # others can


def test_simultaneous_guesses_across_workers_get_at_most_ten_tries_per_email(live):
    known, unknown = "writer@acme.test", "nobody-2@acme.test"

    def guess(i: int) -> tuple[str, int]:
        email = known if i % 2 else unknown
        return email, attempt(live, email, f"guess-{i}").status_code

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(guess, range(60), timeout=300))
    for email in (known, unknown):  # (a 503 busy, under this flood, is a refusal too)
        statuses = [status for e, status in results if e == email]
        assert set(statuses) <= {401, 429, 503}
        assert statuses.count(401) <= 10, (email, statuses)
        assert statuses.count(429) >= 10, (email, statuses)
    assert attempt(live, known, "writer-pass-1").status_code == 429


def test_the_throttle_tells_nothing_about_which_emails_exist(live):
    known, unknown = "publisher@acme.test", "nobody-3@acme.test"
    for status in (401, 429):
        for _ in range(10 if status == 401 else 1):
            a, b = attempt(live, known, "wrong"), attempt(live, unknown, "wrong")
        assert a.status_code == b.status_code == status
        assert plain(a, known) == plain(b, unknown)
        assert a.headers.get("Retry-After") == b.headers.get("Retry-After")
