"""Triage from a test run (docs/design.md §9.12) through the Flask client: a run's failing case
is revised (the candidate's calls or answer taken into the form) or retired from the run's page,
as a plain form that goes back to the run or in place (htmx); the run says who did what from it;
the API takes `fromTestRun`; `kindgi check` holds. Refusals change nothing; readers see no
offer and are refused; another tenant's run is not found.

The set is acme.drafting in P1; each test adds a hand case on run-1 expecting a call of
`lookup`, and a run whose candidate calls `search` fails it.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from conftest import AGENT, csrf_of, ok, refused, sign_in
from sqlalchemy import text
from test_revisions import CASES, LOOKUP, RUNS, SEARCHING, add, start

from kindgi.database import db

ANSWER = "The notice period is three months."


def failed(api, output: Any = None, **expect: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A new case (expecting `lookup`, or `expect`) and a finished run that failed it: its
    candidate called `search` and said `output`."""
    case = add(api, **(expect or LOOKUP))
    run = start(api)
    sent = [{"caseId": case["id"], "output": output, "calls": SEARCHING}]
    ok(api.post(f"{RUNS}/{run['id']}/results", {"results": sent}))
    ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    assert ok(api.get(f"{RUNS}/{run['id']}/results/{case['id']}"))["outcome"] == "fail"
    return case, run


def run_page(run: dict[str, Any]) -> str:
    return f"/agents/{AGENT}/test-runs/{run['id']}"


def triage(run: dict[str, Any], case: dict[str, Any], what: str) -> str:
    return f"{run_page(run)}/results/{case['id']}/{what}"


def textarea(page: str, name: str) -> str:
    """A textarea's text as the page shows it."""
    found = re.search(rf'name="{name}"[^>]*>(.*?)</textarea>', page, re.S)
    assert found, page[:500]
    return html.unescape(found.group(1))


def publisher(client) -> str:
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    return csrf_of(client, "/")


def test_a_run_page_offers_a_publisher_to_revise_or_retire_each_failing_case(client, api):
    case, run = failed(api)
    publisher(client)
    page = client.get(run_page(run)).text
    revise, retire = triage(run, case, "revise"), triage(run, case, "retire")
    assert f'href="{revise}" hx-get="{revise}"' in page
    assert f'href="{retire}" hx-get="{retire}"' in page
    assert "data-failure" in page and "triage.js" in page
    assert 'id="triage-done"' in page and "From this run" not in page.split("triage-done")[0]


def test_a_reader_is_offered_nothing_and_refused(client, api, unchanged):
    case, run = failed(api)
    sign_in(client, "reader@acme.test", "reader-pass-1")
    page = client.get(run_page(run)).text
    assert "Revise the expectation" not in page and "/retire" not in page
    token = csrf_of(client, "/")
    with unchanged():
        assert client.get(triage(run, case, "revise")).status_code == 403
        assert client.get(triage(run, case, "retire")).status_code == 403
        form = {"csrf_token": token, "reason": "Wrong.", "note": "x", "action": "save",
                "expect": json.dumps({"decisions": "right"}), "etag": '"r1"'}  # fmt: skip
        assert client.post(triage(run, case, "retire"), data=form).status_code == 403
        assert client.post(triage(run, case, "revise"), data=form).status_code == 403


def test_another_tenants_run_and_case_are_not_found(client, api, unchanged):
    case, run = failed(api)
    sign_in(client, "admin@globex.test", "globex-pass-1")  # globex has an acme.drafting too
    token = csrf_of(client, "/")
    with unchanged():
        for what in ("revise", "retire"):
            assert client.get(triage(run, case, what)).status_code == 404
            form = {"csrf_token": token, "reason": "Mine now.", "note": "x", "action": "save"}
            assert client.post(triage(run, case, what), data=form).status_code == 404
    publisher(client)
    for other in ("case-nope", add(api, **LOOKUP)["id"]):  # none, and one the run did not have
        assert client.get(f"{run_page(run)}/results/{other}/revise").status_code == 404


def test_a_plain_form_takes_the_candidates_calls_saves_and_goes_back_to_the_run(client, api):
    case, run = failed(api)
    token = publisher(client)
    url = triage(run, case, "revise")
    page = html.unescape(client.get(url).text)
    assert "What the candidate answered" in page and '"search"' in page
    assert json.loads(textarea(page, "expect")) == {
        "decisions": "wrong",
        "shouldCall": [{"tool": "lookup", "args": {}}],
    }
    form = {"csrf_token": token, "etag": '"r1"', "expect": textarea(page, "expect"), "note": ""}
    taken = client.post(url, data={**form, "action": "take-calls"})
    assert taken.status_code == 200
    assert json.loads(textarea(taken.text, "expect")) == {
        "decisions": "wrong",
        "shouldCall": SEARCHING,
    }
    assert 'class="add"' in taken.text and "Save the revision" in taken.text  # the change
    saved = client.post(url, data={**form, "expect": textarea(taken.text, "expect"),
                                   "note": "It searches now.", "action": "save"})  # fmt: skip
    assert saved.status_code == 303 and saved.headers["Location"].endswith(run_page(run))
    now = ok(api.get(f"{CASES}/{case['id']}"))
    assert now["revision"] == 2 and now["expect"]["decisions"]["shouldCall"][0]["tool"] == "search"
    newest = ok(api.get(f"{CASES}/{case['id']}/revisions"))["data"][0]
    assert newest["fromTestRun"] == run["id"] and newest["note"] == "It searches now."
    back = client.get(run_page(run)).text
    assert f"{case['id']} is revised" in back
    assert re.search(r"From this run:\s*1 revised by u-publisher", back)


def test_the_candidates_answer_is_taken_as_what_the_case_should_say(client, api):
    case, run = failed(api, output=ANSWER)
    token = publisher(client)
    url = triage(run, case, "revise")
    typed = json.dumps({**LOOKUP, "answer": "right"})  # taken into what was typed
    taken = client.post(url, data={"csrf_token": token, "etag": '"r1"', "expect": typed,
                                   "note": "", "action": "take-answer"})  # fmt: skip
    assert json.loads(textarea(taken.text, "expect")) == {
        **LOOKUP,
        "answer": "wrong",
        "shouldSay": ANSWER,
    }


def test_a_plain_form_retires_the_case_from_the_run(client, api):
    case, run = failed(api)
    token = publisher(client)
    listed = f"{run_page(run)}?outcome=fail"  # the run page as it was: the triage keeps it
    assert f'href="{triage(run, case, "retire")}?outcome=fail"' in client.get(listed).text
    url = f"{triage(run, case, 'retire')}?outcome=fail"
    form = client.get(url).text
    assert 'name="reason"' in form and f'action="{url}"' in form and f'href="{listed}"' in form
    done = client.post(url, data={"csrf_token": token, "reason": "  Obsolete: no lookups.  "})
    assert done.status_code == 303 and done.headers["Location"].endswith(listed)
    retired = ok(api.get(f"{CASES}/{case['id']}"))["retired"]
    assert retired["reason"] == "Obsolete: no lookups." and retired["fromTestRun"] == run["id"]
    back = client.get(run_page(run)).text
    assert re.search(r"From this run:\s*1 retired by u-publisher", back)
    assert url not in back  # a retired case is offered nothing more
    restored = ok(api.post(f"{CASES}/{case['id']}/restore", {}))
    assert "retired" not in restored
    assert "From this run:" not in client.get(run_page(run)).text  # it no longer counts


def test_refused_forms_say_why_and_change_nothing(client, api, unchanged):
    case, run = failed(api)
    token = publisher(client)
    same = json.dumps(LOOKUP)
    with unchanged():
        no_reason = client.post(triage(run, case, "retire"), data={"csrf_token": token,
                                                                    "reason": "   "})  # fmt: skip
        assert no_reason.status_code == 400 and 'aria-invalid="true"' in no_reason.text
        no_change = client.post(triage(run, case, "revise"), data={
            "csrf_token": token, "etag": '"r1"', "expect": same, "note": "Same.",
            "action": "save"})  # fmt: skip
        assert (
            no_change.status_code == 409
            and "expects exactly what the case expects now" in no_change.text
        )
        no_note = client.post(triage(run, case, "revise"), data={
            "csrf_token": token, "etag": '"r1"', "expect": json.dumps({"decisions": "right"}),
            "note": "", "action": "save"})  # fmt: skip
        assert no_note.status_code == 400 and 'id="t-' in no_note.text
        no_csrf = client.post(triage(run, case, "retire"), data={"reason": "Obsolete."})
        assert no_csrf.status_code == 400
    assert ok(api.get(f"{CASES}/{case['id']}"))["revision"] == 1


def test_in_place_a_triage_answers_a_fragment_with_the_runs_triage_again(client, api):
    case, run = failed(api)
    token = publisher(client)
    htmx = {"HX-Request": "true"}
    form = client.get(triage(run, case, "retire"), headers=htmx).text
    assert "<html" not in form and 'hx-post="' in form and "data-triage-close" in form
    refused_ = client.post(triage(run, case, "retire"), headers=htmx,
                           data={"csrf_token": token, "reason": ""})  # fmt: skip
    assert refused_.status_code == 400 and "<html" not in refused_.text
    done = client.post(triage(run, case, "retire"), headers=htmx,
                       data={"csrf_token": token, "reason": "Obsolete."})  # fmt: skip
    assert done.status_code == 200 and "<html" not in done.text
    assert f"{case['id']} is retired" in done.text
    assert 'id="triage-done" class="triage-done" hx-swap-oob="true"' in done.text
    assert "1 retired by u-publisher" in done.text
    assert f'id="t-{case["id"]}-actions" hx-swap-oob="true"' in done.text


def test_the_api_names_the_run_a_revision_or_retirement_was_made_from(api, unchanged):
    case, run = failed(api)
    later = add(api, **LOOKUP)  # added after the run started: the run never graded it
    body = {"note": "It searches now.", "decisions": "right"}
    with unchanged():
        err = refused(
            api.post(f"{CASES}/{case['id']}/revise", {**body, "fromTestRun": "trun-nope"},
                     headers={"If-Match": '"r1"'}),
            404, "test-run-not-found",
        )  # fmt: skip
        assert err
        err = refused(
            api.post(f"{CASES}/{later['id']}/retire", {"reason": "x", "fromTestRun": run["id"]}),
            400, "bad-input",
        )  # fmt: skip
        assert "fromTestRun" in err["details"]["fields"]
        refused(
            api.post(f"{CASES}/{case['id']}/retire", {"reason": "x", "fromTestRun": run["id"]},
                     as_="globex"),
            404, "case-not-found",
        )  # fmt: skip
    revised = ok(api.post(f"{CASES}/{case['id']}/revise", {**body, "fromTestRun": run["id"]},
                          headers={"If-Match": '"r1"'}))  # fmt: skip
    assert revised["revision"] == 2
    listed = ok(api.get(f"{CASES}/{case['id']}/revisions"))["data"]
    assert listed[0]["fromTestRun"] == run["id"] and "fromTestRun" not in listed[1]
    retired = ok(
        api.post(f"{CASES}/{case['id']}/retire", {"reason": "x", "fromTestRun": run["id"]})
    )
    assert retired["retired"]["fromTestRun"] == run["id"]
    plain = ok(api.post(f"{CASES}/{later['id']}/retire", {"reason": "x"}))
    assert "fromTestRun" not in plain["retired"]


def test_kindgi_check_holds_for_triage_and_names_a_run_that_did_not_grade_the_case(app, api):
    case, run = failed(api)
    ok(api.post(f"{CASES}/{case['id']}/retire", {"reason": "x", "fromTestRun": run["id"]}))
    checked = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert checked.exit_code == 0 and "triage from test runs: ok" in checked.output
    with app.app_context():
        db.session.execute(text("UPDATE cases SET retired_from_test_run = 'trun-gone' "
                                "WHERE id = :id"), {"id": case["id"]})  # fmt: skip
        db.session.commit()
    checked = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert checked.exit_code != 0
    assert f"case {case['id']} names test run trun-gone as retired from it" in checked.output
