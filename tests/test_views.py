"""The pieces of the pages made in Python (kindgi/views.py): what a row of the cases list says,
that everything stored in it is escaped, and the searched words marked."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime

import pytest
from conftest import AGENT, P1, sign_in
from sqlalchemy import select
from test_run_pages import statements

from kindgi import views
from kindgi.database import db
from kindgi.models import Snapshot
from kindgi.schemas.cases import CASE_FIELDS

AT = datetime(2026, 5, 1, 9, 30, 15, 250_000)


@pytest.mark.parametrize(
    ("expect", "said"),
    [
        (
            {"decisions": {"verdict": "wrong", "shouldCall": [{"tool": "a"}, {"tool": "b"}],
                           "mustNotCall": ["c"]}},
            "decisions wrong: call a, b; not c",
        ),
        ({"decisions": {"verdict": "right"}}, "decisions right"),
        ({"answer": {"verdict": "wrong", "why": "Short."}}, "answer wrong: “Short.”"),
        (
            {"answer": {"verdict": "wrong", "shouldSay": "word " * 20, "why": "not this"}},
            "answer wrong: “" + ("word " * 11).strip() + "...”",
        ),
        (
            {"answer": {"verdict": "right"},
             "items": [{"key": "a", "verdict": "right"}, {"key": "b", "verdict": "wrong"}]},
            "answer right · 2 items (1 right)",
        ),
    ],
)  # fmt: skip
def test_a_summary_says_each_part_in_a_line(expect, said):
    assert views.summary(expect) == said


def test_a_moment_is_shown_to_the_minute_with_its_exact_time_for_machines():
    assert views.when(AT) == '<time datetime="2026-05-01T09:30:15.250Z">2026-05-01 09:30</time>'
    aware = AT.replace(tzinfo=UTC)
    assert views.when(aware) == views.when(AT)


def row(asked=None, **fields):
    """A row of the cases page: the list's (its columns in `schemas.cases.CASE_FIELDS`' order),
    its expectation the JSON text stored, then what its run was asked (JSON text, or None)."""
    case = {
        "id": "case-1",
        "kind": "hand",
        "expert": True,
        "made_on": "1.0.0",
        "expect": json.dumps({"answer": {"verdict": "wrong", "why": "It cites the lease"}}),
        "added_by_id": "u-1",
        "added_by_kind": "user",
        "added_at": AT,
        "retired_at": None,
    }
    case = {**case, **fields}
    return (*(case.get(name) for name in CASE_FIELDS), None if asked is None else json.dumps(asked))


def test_a_row_escapes_everything_stored_and_marks_the_words_searched():
    hostile = '<img src=x onerror="alert(1)">'
    html = views.case_rows(
        [row(id=f"case-{hostile}", made_on=hostile, added_by_id=hostile, added_by_kind="service",
             run_id="run-h", tags=f"smoke,{hostile}", asked={"question": hostile},
             expect=json.dumps({"answer": {"verdict": "wrong", "why": f"{hostile} lease"}}))],
        "/agents/a/test-set/cases/",
        {"lease"},
        True,
    )  # fmt: skip
    assert "<img" not in html
    assert (
        html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") == 8
    )  # the id 4 times, version, who, a tag, what the run was asked
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html  # in the summary, marked
    assert "<mark>lease</mark>" in html
    assert '<span class="tag">service</span>' in html
    assert 'aria-label="Select case-&lt;img' in html


def test_the_words_searched_are_marked_as_the_search_cuts_them():
    """docs/design.md §4.1: a word is marked where the search finds it, inside an address or a
    path, in any case, with or without accents, written precomposed or not."""
    text = "Write to wombat@acme.test, /srv/wombat: CAFÉ, e\u0301cole, x² & <refund>"
    marked = views.highlighted(text, {"wombat", "srv", "cafe", "ecole", "x2", "refund"})
    assert marked == (
        "Write to <mark>wombat</mark>@acme.test, /<mark>srv</mark>/<mark>wombat</mark>: "
        "<mark>CAFÉ</mark>, <mark>e\u0301cole</mark>, <mark>x²</mark> &amp; "
        "&lt;<mark>refund</mark>&gt;"
    )


def test_a_row_says_what_the_case_is_and_offers_a_box_only_to_who_may_publish():
    asked = {"question": "Draft a lease clause"}
    shown = views.case_rows([row(run_id="run-1", tags="smoke", asked=asked)],
                            "/agents/a/test-set/cases/", set(), True)  # fmt: skip
    assert (
        '<a href="/agents/a/test-set/cases/case-1">case-1</a> <span class="tag">smoke</span>'
        in shown
    )
    assert '<td class="summary">question: Draft a lease clause</td>' in shown
    assert 'title="An expert\'s case"' in shown and 'name="caseIds"' in shown
    assert "<td>active</td>" in shown and '<tr class="">' in shown
    retired = views.case_rows([row(retired_at=AT, expert=False)], "/c/", set(), False)
    assert '<tr class="retired">' in retired and "tag retired" in retired
    assert "caseIds" not in retired and "expert" not in retired


def test_the_cases_page_says_what_each_cases_run_was_asked_read_with_its_rows(app, api, client):
    """Each row's Asked cell is its run's input in a line, read in the rows' own statement (a
    second one for the inputs was a tenth of the page's time)."""
    listed = api.get(f"/v1/agents/{AGENT}/test-set/cases?projectId={P1}").get_json()["data"]
    with app.app_context():
        inputs = dict(db.session.execute(select(Snapshot.run_id, Snapshot.input)).all())
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    with statements(app) as sent:
        page = client.get(f"/agents/{AGENT}/test-set/cases?projectId={P1}").get_data(as_text=True)
    shown = re.findall(
        r'<a href="[^"]*/test-set/cases/([^"]+)">.*</td>\n  <td>.*</td>\n  <td>.*</td>\n'
        r'  <td class="summary">(.*)</td>',
        page,
    )
    assert shown == [
        (case["id"], html.escape(views.one_line(inputs.get(case["runId"])))) for case in listed
    ]
    assert any(asked for _, asked in shown)
    reading = [s for s in sent if "snapshots" in s]
    assert len(reading) == 1 and "FROM cases" in reading[0], reading


def test_the_cases_page_counts_the_active_cases_by_kind_and_by_expert(api, client):
    """Each box says what the list holds (they once all said 0 but active and retired)."""
    listed = api.get(f"/v1/agents/{AGENT}/test-set/cases?projectId={P1}&limit=100").get_json()
    active = listed["data"]  # retired cases are not listed
    assert not listed["hasMore"] and active
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    page = client.get(f"/agents/{AGENT}/test-set/cases?projectId={P1}").get_data(as_text=True)
    shown = dict(re.findall(r"<dt>(\w[\w ]*)</dt><dd>(\d+)</dd>", page))
    assert shown == {
        "Active": str(len(active)),
        "Retired": str(
            api.get(f"/v1/agents/{AGENT}/test-set?projectId={P1}").get_json()["cases"]["retired"]
        ),
        "Corrections": str(sum(case["kind"] == "correction" for case in active)),
        "By hand": str(sum(case["kind"] == "hand" for case in active)),
        "Expert": str(sum(case.get("expert", False) for case in active)),
    }
