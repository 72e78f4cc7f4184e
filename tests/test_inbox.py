"""The runs inbox (docs/design.md §4.2): an agent's runs in a project, newest first, filtered by
status, version, a tool called, whether a case was made from them, time and words, a page at a
time; the same filters on `GET /v1/agents/{agentId}/runs`; and one run's page with its calls and
the cases made from it, through HTTP on the engine the suite runs on.

Every filter and their combinations are checked against a model of the runs (the test world's
and a few recorded here), on the API and on the page alike; `q` also against a table of texts
and searches, the same answers on either engine, and each way a search is answered.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from html import unescape as html_unescape
from typing import Any
from urllib.parse import urlencode

import pytest
from conftest import AGENT, MULTI, P1, PG, WORLD, error_of, ok, refused, sign_in

from kindgi.words import words

T0 = datetime(2026, 11, 1, 12, 0)
HOUR = timedelta(hours=1)
RUNS = f"/v1/agents/{AGENT}/runs"
INBOX = f"/agents/{AGENT}/runs"
# Runs recorded here, in this order, an hour apart: (name, version, status, calls, input, output)
RECORDED = [
    ("refund", "1.1.0", "finished", [("search", {"q": "refund"}), ("lookup", {"id": 7})],
     {"q": "Refund my order"}, {"answer": "Done"}),
    ("percent", "2.0.0", "finished", [("lookup", {"id": 1}), ("lookup", {"id": 2})],
     {"q": "Lease"}, {"answer": "50% off_now"}),
    ("running", "2.0.0", "running", [], {"q": "Café, still going"}, None),
    ("quoted", "1.1.0", "finished", [("send_email", {"to": "ana"})],
     {"q": 'say "hi"'}, {"answer": "REFUND issued"}),
    ("plain", "2.0.0", "finished", [("search", {})], "just a string", ["a", "list"]),
]  # fmt: skip
CASED = {c["run"] for c in WORLD["corrections"] + WORLD["cases"]}


def runs_url(agent: str = AGENT, project: str = P1, **params: Any) -> str:
    return f"/v1/agents/{agent}/runs?{urlencode({'projectId': project, **params})}"


def inbox_url(agent: str = AGENT, project: str = P1, **params: Any) -> str:
    return f"/agents/{agent}/runs?{urlencode({'projectId': project, **params})}"


def ids(body: dict[str, Any]) -> list[str]:
    return [run["id"] for run in body["data"]]


def listed(html: str) -> list[str]:
    """The runs a page of the inbox lists, in order."""
    return re.findall(r"data-run-link>([^<]+)</a>", html)


@pytest.fixture
def recorded(api, set_clock) -> dict[str, dict[str, Any]]:
    """The runs of RECORDED, by name, as the model knows them (with the world's in P1)."""
    made = {}
    for i, (name, version, status, calls, input_, output) in enumerate(RECORDED):
        set_clock(T0 + i * HOUR)
        body = {"projectId": P1, "version": version, "status": status, "input": input_,
                "output": output, "calls": [{"tool": t, "args": a} for t, a in calls]}  # fmt: skip
        made[name] = ok(api.post(RUNS, body, as_="writer"), 201)
    set_clock(T0 + 10 * HOUR)
    return made


def model(recorded: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run of AGENT in P1 as the filters see it, newest first."""
    runs = []
    for r in WORLD["runs"]:
        if r["agent"] == AGENT and r["project"].lower() == P1:
            at = datetime.fromisoformat(r["at"].replace("Z", "+00:00")).replace(tzinfo=None)
            runs.append({**r, "status": r.get("status", "finished"), "at": at,
                         "hasCase": r["id"] in CASED})  # fmt: skip
    for r in recorded.values():
        runs.append({**r, "at": datetime.fromisoformat(r["at"].replace("Z", "+00:00"))})
        runs[-1]["at"] = runs[-1]["at"].replace(tzinfo=None)
    return sorted(runs, key=lambda r: (r["at"], r["id"]), reverse=True)


def said(value: Any) -> set[str]:
    """The words of the text in a run's input or output: its strings at any depth, never its
    keys, numbers or booleans."""
    if isinstance(value, str):
        return set(words(value))
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return set().union(*map(said, items))


def matches(run: dict[str, Any], filters: dict[str, str]) -> bool:
    """Whether the model's run passes the filters, as docs/design.md §4.2 says."""
    checks = {
        "status": lambda v: run["status"] == v,
        "version": lambda v: run["version"] == v,
        "tool": lambda v: any(c["tool"] == v for c in run.get("calls") or []),
        "hasCase": lambda v: run["hasCase"] == (v == "true"),
        "after": lambda v: run["at"] >= datetime.fromisoformat(v[:-1]),
        "before": lambda v: run["at"] < datetime.fromisoformat(v[:-1]),
        # every word of it, whole, in the text of the input or output
        "q": lambda v: set(words(v)) <= said(run.get("input")) | said(run.get("output")),
    }
    return all(checks[name](value) for name, value in filters.items())


FILTERS = [
    {},
    {"status": "running"},
    {"status": "finished"},
    {"version": "1.1.0"},
    {"version": "2.0.0"},
    {"version": "9.9.9"},
    {"tool": "lookup"},
    {"tool": "search"},
    {"tool": "send_email"},
    {"tool": "never-called"},
    {"hasCase": "true"},
    {"hasCase": "false"},
    {"after": "2026-11-01T13:00:00Z"},
    {"before": "2026-11-01T13:00:00Z"},
    {"after": "2026-04-15T13:00:00Z", "before": "2026-11-01T14:00:00Z"},
    {"q": "refund"},
    {"q": "50%"},
    {"q": "off_now"},
    {"q": 'say "hi"'},
    {"q": "Café"},
    {"q": "CAFÉ"},
    {"q": "cafe"},
    {"q": "  lease  "},
    {"q": "lease clause"},  # both words
    {"q": "lease refund"},  # in no one run
    {"q": "refun"},  # no whole word
    {"q": "answer"},  # a key
    {"q": "7"},  # in run-1's answer; a call's arguments are never searched
    {"version": "1.1.0", "tool": "search"},
    {"hasCase": "false", "status": "finished", "tool": "lookup"},
    {"q": "refund", "version": "1.1.0"},
    {"tool": "lookup", "after": "2026-11-01T12:30:00Z", "before": "2026-11-01T15:00:00Z"},
    {"hasCase": "true", "tool": "search"},
    {"hasCase": "false", "version": "1.1.0", "before": "2026-11-01T12:00:00Z"},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: urlencode(f) or "none")
def test_each_filter_and_combination_lists_exactly_its_runs_newest_first(
    api, client, recorded, filters
):
    expected = [r["id"] for r in model(recorded) if matches(r, filters)]
    assert ids(ok(api.get(runs_url(**filters), as_="reader"))) == expected
    sign_in(client, "reader@acme.test", "reader-pass-1")
    page = client.get(inbox_url(**filters))
    assert page.status_code == 200
    assert listed(page.get_data(as_text=True)) == expected


PAGED = [
    {},
    {"tool": "lookup"},
    {"hasCase": "false"},
    {"after": "2026-01-01T00:00:00Z", "before": "2026-11-01T15:00:00Z"},
    {"version": "1.1.0"},
    {"q": "lease"},
    {"q": "clause", "status": "finished"},
]


@pytest.mark.parametrize("filters", PAGED, ids=lambda f: urlencode(f) or "none")
def test_a_filtered_list_pages_by_cursor_never_twice_never_skipping(api, recorded, filters):
    expected = [r["id"] for r in model(recorded) if matches(r, filters)]
    assert every_page(api, 2, filters) == expected


def every_page(api, limit: int, filters: dict[str, str]) -> list[str]:
    """The runs of every page of the list, `limit` a page, each page after the last's cursor."""
    seen, cursor = [], None
    for _ in range(20):
        page = ok(
            api.get(runs_url(limit=limit, **filters, **({"cursor": cursor} if cursor else {})))
        )
        seen += ids(page)
        if not page["hasMore"]:
            return seen
        cursor = page["nextCursor"]
    raise AssertionError("more than 20 pages")


# Texts a run says (its input, its output) and what `q` finds among them: the same on either
# engine, as docs/design.md §4.1 cuts words
SAID = {
    "french": ({"message": "Le CAFÉ est crème, l\u2019été", "to": ["Zoë"]}, {"answer": "Ça va"}),
    "email": ({"to": "wombat@acme.test", "path": "/srv/wombat-policy"}, "send_email done"),
    "forms": ("Straße ﬁnal x² e\u0301cole", None),
    "greek": ({"q": "ΣΊΣΥΦΟΣ"}, ["退款政策"]),
    "keys": ({"refundable": "no", "nested": {"deeper": ["yes", 42, True, None]}}, {"n": 3.5}),
}
SEARCHED = [
    ("café", {"french"}),
    ("CAFE creme", {"french"}),
    ("ete ça zoe", {"french"}),  # an accent, the other case, a list's string
    ("l", {"french"}),  # the apostrophe cuts
    ("caf", set()),  # whole words only
    ("cafés", set()),
    ("wombat", {"email"}),
    ("wombat@acme.test", {"email"}),  # cut into its words, each in the text
    ("test acme WOMBAT", {"email"}),  # in any order
    ("send_email", {"email"}),
    ("policy srv", {"email"}),
    ("strasse final x2 ecole", {"forms"}),  # compatibility forms, a combining accent
    ("σίσυφος", {"greek"}),
    ("退款政策", {"greek"}),
    ("退款", set()),  # a run of letters without spaces is one word
    ("refundable", set()),  # keys are never searched
    ("nested deeper", set()),
    ("yes no", {"keys"}),
    ("42", set()),  # nor numbers, booleans or null
    ("true", set()),
    ("null", set()),
    ("3", set()),
    ("cafe wombat", set()),  # every word, in one run
    ("refund OR wombat", set()),  # no query language: `or` is a word
    ("wombat -policy", {"email"}),
]


@pytest.fixture
def spoken(api, set_clock) -> dict[str, str]:
    """The runs of SAID, by name: their ids."""
    made = {}
    for i, (name, (input_, output)) in enumerate(SAID.items()):
        set_clock(T0 + i * HOUR)
        body = {"projectId": P1, "version": "1.1.0", "status": "finished", "input": input_,
                "output": output}  # fmt: skip
        made[name] = ok(api.post(RUNS, body, as_="writer"), 201)["id"]
    return made


def test_q_finds_the_runs_saying_every_word_whole_any_case_accents_ignored(api, spoken, how):
    names = {run_id: name for name, run_id in spoken.items()}
    for q, found in SEARCHED:
        listed_ids = ids(ok(api.get(runs_url(q=q, limit=100), as_="reader")))
        assert {names[i] for i in listed_ids if i in names} == found, q
        assert len(listed_ids) == len(found), (q, listed_ids)  # and none of the world's


@pytest.mark.parametrize("filters", PAGED[-2:], ids=lambda f: urlencode(f))
def test_a_search_pages_alike_whichever_way_it_is_answered(api, recorded, how, filters):
    expected = [r["id"] for r in model(recorded) if matches(r, filters)]
    assert len(expected) >= 2  # pages of one
    assert every_page(api, 1, filters) == expected


def test_a_search_with_another_filter_is_every_one_of_them(api, recorded, how):
    for filters in (
        {"q": "lease", "tool": "lookup"},
        {"q": "refund", "version": "1.1.0"},
        {"q": "lease", "hasCase": "true"},
        {"q": "lease", "before": "2026-11-01T00:00:00Z"},
    ):
        expected = [r["id"] for r in model(recorded) if matches(r, filters)]
        assert ids(ok(api.get(runs_url(**filters)))) == expected, filters


def test_a_cursor_is_good_only_for_the_filters_it_came_with(api, recorded, unchanged):
    cursor = ok(api.get(runs_url(limit=1, tool="lookup")))["nextCursor"]
    assert ok(api.get(runs_url(limit=1, tool="lookup", cursor=cursor)))["data"]
    with unchanged():
        for other in ({"tool": "search"}, {}, {"tool": "lookup", "hasCase": "false"}):
            err = refused(api.get(runs_url(limit=1, cursor=cursor, **other)), 400, "bad-input")
            assert err["details"]["reason"] == "cursor-mismatch"


BAD = [
    ("status", "done"),
    ("version", ""),
    ("version", "v" * 101),
    ("tool", ""),
    ("tool", "t" * 201),
    ("hasCase", "yes"),
    ("hasCase", "1"),
    ("after", "2026-11-01T12:00:00"),  # no time zone
    ("before", "yesterday"),
    ("q", ""),
    ("q", "   "),
    ("q", "x" * 201),
    ("q", "a\x00b"),
    ("q", "_"),  # no word at all
    ("q", "?! € —"),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v[:12]!r}" for n, v in BAD])
def test_a_bad_filter_is_400_naming_it_and_changes_nothing(api, client, name, value, unchanged):
    with unchanged():
        err = refused(api.get(runs_url(**{name: value})), 400, "bad-input")
        assert name in err["details"]["fields"], err
        if value.strip():  # the page leaves an empty field out, as no filter
            sign_in(client, "admin@acme.test", "admin-pass-1")
            page = client.get(inbox_url(**{name: value}))
            assert page.status_code == 400
            assert "bad-input" in page.get_data(as_text=True)


def test_another_tenants_runs_are_never_listed_nor_shown(api, client, recorded):
    assert ids(ok(api.get(runs_url(AGENT, PG), as_="globex"))) == ["run-globex"]
    assert ids(ok(api.get(runs_url(AGENT, PG, q="globex"), as_="globex"))) == ["run-globex"]
    assert ids(ok(api.get(runs_url(AGENT, P1, q="globex")))) == []
    unknown_project = refused(api.get(runs_url(AGENT, PG)), 404, "project-not-found")
    sign_in(client, "admin@globex.test", "globex-pass-1")
    assert listed(client.get(inbox_url(AGENT, PG)).get_data(as_text=True)) == ["run-globex"]
    for run_id in ("run-1", recorded["refund"]["id"]):
        gone = client.get(f"{INBOX}/{run_id}")
        assert gone.status_code == 404 and "run-not-found" in gone.get_data(as_text=True)
    assert client.get(inbox_url(AGENT, P1)).status_code == 404
    assert unknown_project["code"] == "project-not-found"


@pytest.mark.parametrize(
    ("who", "path", "status", "code"),
    [
        ("admin@acme.test", f"{INBOX}/run-globex", 404, "run-not-found"),  # another tenant's
        ("admin@acme.test", f"{INBOX}/run-multi", 404, "run-not-found"),  # another agent's
        ("admin@acme.test", f"{INBOX}/run-nope", 404, "run-not-found"),
        ("admin@acme.test", "/agents/acme.nope/runs/run-1", 404, "agent-not-found"),
        ("admin@acme.test", f"/agents/acme.nope/runs?projectId={P1}", 404, "agent-not-found"),
        ("admin@acme.test", f"/agents/{MULTI}/runs?projectId={P1}", 404, "project-not-found"),
        ("nobody@acme.test", f"{INBOX}/run-1", 403, "forbidden"),
        ("nobody@acme.test", f"{INBOX}?projectId={P1}", 403, "forbidden"),
    ],
)
def test_pages_not_to_be_seen_answer_as_the_api_does(client, who, path, status, code):
    sign_in(client, who, f"{who.split('@')[0]}-pass-1")
    page = client.get(path)
    assert page.status_code == status
    assert code in page.get_data(as_text=True)


def test_the_pages_need_a_sign_in(client):
    for path in (inbox_url(), f"{INBOX}/run-1"):
        assert client.get(path).status_code == 302


def test_a_run_page_shows_what_it_was_given_each_call_in_order_and_its_answer(client, recorded):
    run = recorded["refund"]
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    html = client.get(f"{INBOX}/{run['id']}").get_data(as_text=True)
    assert "Refund my order" in html and "Done" in html and "1.1.0" in html
    assert "2026-11-01 12:00" in html and ">finished<" in html
    calls = re.findall(r"<li><code>([^<]+)</code>\s*<pre[^>]*>([^<]*)</pre>", html)
    assert [(tool, json.loads(html_unescape(args))) for tool, args in calls] == [
        ("search", {"q": "refund"}),
        ("lookup", {"id": 7}),
    ]
    assert "None yet." in html  # no case made from it


def test_a_run_page_lists_the_cases_made_from_it(client):
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    html = client.get(f"{INBOX}/run-1").get_data(as_text=True)
    made = html.split("Cases made from it")[1]
    assert f'href="/agents/{AGENT}/test-set/cases/case-1"' in made
    assert f'href="/agents/{AGENT}/test-set/cases/cor-1"' in made
    assert "<code>cor-2</code>" in made and "(wont-fix)" in made  # no case: no page
    assert 'href="/agents/acme.drafting/test-set/cases/cor-2"' not in made


def test_add_a_case_from_a_run_opens_the_form_with_the_run_picked(client, recorded):
    run_id = recorded["quoted"]["id"]
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    html = client.get(f"{INBOX}/{run_id}").get_data(as_text=True)
    link = re.search(r'<a class="button" id="add-case" href="([^"]+)"', html).group(1)
    form = client.get(link.replace("&amp;", "&")).get_data(as_text=True)
    assert re.search(rf'value="{run_id}" id="pick-{run_id}" checked', form)
    assert f"Run <code>{run_id}</code>" in form  # shown: its input, output and calls
    row = re.search(rf"<tr data-run>(?:(?!</tr>).)*{run_id}(?:(?!</tr>).)*</tr>",
                    client.get(inbox_url()).get_data(as_text=True), re.S).group(0)  # fmt: skip
    assert "data-add-case" in row and f"runId={run_id}" in row


@pytest.mark.parametrize(
    ("who", "run", "offered"),
    [
        ("publisher@acme.test", "refund", True),
        ("reader@acme.test", "refund", False),  # no publish
        ("publisher@acme.test", "running", False),  # not finished
        ("publisher@acme.test", "run-replay", False),
        ("publisher@acme.test", "run-erased", False),
    ],
)
def test_a_case_is_offered_only_where_it_would_be_allowed(client, recorded, who, run, offered):
    run_id = recorded[run]["id"] if run in recorded else run
    sign_in(client, who, f"{who.split('@')[0]}-pass-1")
    html = client.get(f"{INBOX}/{run_id}").get_data(as_text=True)
    assert ('id="add-case"' in html) == offered
    if not offered and who.startswith("publisher"):
        assert "No case can be made from this run" in html
    rows = client.get(inbox_url()).get_data(as_text=True).split("<tr data-run>")
    row = next(r for r in rows if f">{run_id}</a>" in r)
    assert ("data-add-case" in row) == offered


def test_a_case_made_from_a_run_shows_in_the_list_and_its_filter(api, client, recorded):
    run_id = recorded["plain"]["id"]
    assert not next(r for r in ok(api.get(runs_url()))["data"] if r["id"] == run_id)["hasCase"]
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", {"runId": run_id, "answer": "right"}), 201)
    listed_run = next(r for r in ok(api.get(runs_url()))["data"] if r["id"] == run_id)
    assert listed_run["hasCase"] is True
    assert run_id in ids(ok(api.get(runs_url(hasCase="true"))))
    assert run_id not in ids(ok(api.get(runs_url(hasCase="false"))))
    sign_in(client, "admin@acme.test", "admin-pass-1")
    html = client.get(f"{INBOX}/{run_id}").get_data(as_text=True)
    assert "case made" in html and "None yet." not in html


def test_the_tools_to_filter_by_are_those_the_runs_called(client, api, recorded):
    sign_in(client, "reader@acme.test", "reader-pass-1")
    html = client.get(inbox_url()).get_data(as_text=True)
    tools = re.search(r'<select name="tool">(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', tools) == [
        "", "lookup", "search", "send_email",
    ]  # fmt: skip
    ok(api.post(RUNS, {"projectId": P1, "version": "3.0.0", "status": "finished",
                       "calls": [{"tool": "a_new_tool"}]}, as_="writer"), 201)  # fmt: skip
    html = client.get(inbox_url()).get_data(as_text=True)
    assert '<option value="a_new_tool"' in html and '<option value="3.0.0"' in html


def test_load_more_brings_the_next_rows_alone_and_a_stale_cursor_starts_again(
    client, api, recorded, set_clock
):
    sign_in(client, "reader@acme.test", "reader-pass-1")
    expected = [r["id"] for r in model(recorded)]
    more = ok(api.get(runs_url(limit=3), as_="reader"))["nextCursor"]
    rows = client.get(inbox_url(limit=3, cursor=more), headers={"HX-Request": "true"})
    assert "HX-Request" in rows.headers["Vary"]
    html = rows.get_data(as_text=True)
    assert "<html" not in html and listed(html) == expected[3:6]
    assert 'id="more-row"' in html
    set_clock(T0 + timedelta(days=2))  # the cursor is a day and more old
    stale = client.get(inbox_url(limit=3, cursor=more))
    assert stale.status_code == 303
    assert "cursor" not in stale.headers["Location"]
    assert "out of date" in client.get(stale.headers["Location"]).get_data(as_text=True)


def test_the_inbox_is_linked_from_the_overview_and_the_cases_page(client):
    sign_in(client, "reader@acme.test", "reader-pass-1")
    link = f'href="/agents/{AGENT}/runs?projectId={P1}"'
    assert link in client.get("/").get_data(as_text=True)
    assert link in client.get(f"/agents/{AGENT}/test-set/cases?projectId={P1}").get_data(
        as_text=True
    )


def test_the_page_takes_days_for_its_dates_both_days_included(client, recorded):
    sign_in(client, "reader@acme.test", "reader-pass-1")
    html = client.get(inbox_url(after="2026-11-01", before="2026-11-01")).get_data(as_text=True)
    assert listed(html) == [r["id"] for r in reversed(recorded.values())]
    html = client.get(inbox_url(before="2026-10-31")).get_data(as_text=True)
    assert listed(html) == ["run-replay", "run-erased", "run-running", "run-2", "run-1"]


def test_the_runs_list_answer_is_the_schema_s_dump(api, recorded):
    """The JSON list carries `hasCase` beside what it carried (docs/design.md §6)."""
    data = ok(api.get(runs_url(limit=100)))["data"]
    assert {r["id"]: r["hasCase"] for r in data} == {r["id"]: r["hasCase"] for r in model(recorded)}
    assert error_of(api.get(runs_url(hasCase="maybe")))["details"]["fields"]["hasCase"]


def test_a_world_loaded_onto_stored_runs_marks_those_it_makes_cases_from(app, api):
    """The loader marks a run made a case as the service does (docs/design.md §4.2)."""
    from kindgi import world
    from kindgi.database import db

    entry = {"id": "case-loaded", "run": "run-erased", "by": "u-publisher",
             "at": "2026-05-01T00:00:00Z", "body": {"answer": "right"}}  # fmt: skip
    with app.app_context():
        world.load({"cases": [entry]})
        db.session.commit()
    assert run_of(api, "run-erased")["hasCase"] is True
    check = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert check.exit_code == 0, check.output


def run_of(api, run_id: str) -> dict[str, Any]:
    return next(r for r in ok(api.get(runs_url(limit=100)))["data"] if r["id"] == run_id)


def test_the_demo_holds_the_runs_asked_for_most_no_case_made_from(databases):
    from conftest import app_on

    with app_on(databases, databases.empty()) as app:
        runner = app.test_cli_runner()
        few = runner.invoke(args=["kindgi", "demo", "--cases", "300", "--runs", "10"])
        assert few.exit_code == 1 and "300 cases are made from 30 runs" in few.output
        made = runner.invoke(args=["kindgi", "demo", "--cases", "300", "--runs", "900", "--json"])
        assert made.exit_code == 0, made.output
        creds = json.loads(made.stdout)
        auth = {"Authorization": f"Bearer {creds['token']}"}
        client, counts = app.test_client(), {}
        for cased in ("true", "false"):
            url = runs_url(creds["agentId"], creds["projectId"], hasCase=cased, limit=100)
            while url:
                page = client.get(url, headers=auth).get_json()
                counts[cased] = counts.get(cased, 0) + len(page["data"])
                url = (
                    page.get("nextCursor")
                    and f"{url.split('&cursor=')[0]}&cursor={page['nextCursor']}"
                )
        # a third of the 900 are this pair's: 10 of the cases' 30 runs (the first still
        # running, so no case), the rest the inbox's
        assert counts == {"true": 9, "false": 291}
