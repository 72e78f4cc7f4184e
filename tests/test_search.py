"""Finding cases: the cases list's full-text search and filters, on both engines.

The contract is docs/reference/list-cases.md. The world (tests/world.json) gives acme.drafting in
P1 cor-1 (run-1: "Draft a lease clause", tool lookup, by u-writer), case-1 (run-1, retired as a
"duplicate", by u-publisher) and case-2 (run-2, item k1); globex has its own acme.drafting with
cor-g on a run that says the same words. Each test adds, through the API, a run in French and two
cases that speak of refunds (`more_cases`).
"""

from __future__ import annotations

import json
import string
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from conftest import AGENT, MULTI, P1, P3, PG, app_on, ok, refused
from databases import ENGINE
from flask_migrate import downgrade, upgrade
from sqlalchemy import event, select, text

from kindgi import world
from kindgi.database import db
from kindgi.models import Case
from kindgi.service import search
from kindgi.service.common import dialect
from kindgi.words import words

T0 = datetime(2026, 12, 1, 12, 0, 0)
H1_BODY = {
    "decisions": "wrong",
    "mustNotCall": ["send_email"],
    "answer": "wrong",
    "shouldSay": "Offer the Refund policy",
}
C1_BODY = {"answer": "wrong", "why": "Mentioned the REFUND too late"}


def cases_url(agent: str = AGENT, project: str = P1, **params: Any) -> str:
    return f"/v1/agents/{agent}/test-set/cases?{urlencode({'projectId': project, **params})}"


def found(api, as_: str = "admin", **params: Any) -> list[str]:
    """The ids the list answers with these filters, all pages, newest first."""
    ids: list[str] = []
    cursor = None
    while True:
        page = ok(api.get(cases_url(**params, **({"cursor": cursor} if cursor else {})), as_=as_))
        ids += [case["id"] for case in page["data"]]
        if not page["hasMore"]:
            return ids
        cursor = page["nextCursor"]


@pytest.fixture
def more_cases(api, set_clock) -> dict[str, str]:
    """A finished run in French, a hand case on it (h1) and a correction by CI's token (c1)."""
    set_clock(T0)
    run = {
        "projectId": P1,
        "version": "1.1.0",
        "status": "finished",
        "input": {"q": "Remboursement du café"},
        "output": {"answer": "Le client veut être remboursé", "matches": [{"id": "m0"}]},
    }
    run_id = ok(api.post(f"/v1/agents/{AGENT}/runs", json=run), 201)["id"]
    body = {"runId": run_id, **H1_BODY}
    h1 = ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", body, as_="publisher"), 201)
    set_clock(T0 + timedelta(minutes=1))
    c1 = ok(
        api.post(f"/v1/agents/{AGENT}/runs/run-2/corrections", C1_BODY, as_="ci"),
        201,
    )
    return {"run": run_id, "h1": h1["id"], "c1": c1["id"]}


# ---------------------------------------------------------------- each filter


def test_words_match_in_the_snapshot_whole_in_any_case_and_all_of_them(api, more_cases, how):
    assert found(api, q="lease") == ["cor-1"]  # only in run-1's input and output
    assert found(api, q="LEASE Clause") == ["cor-1"]
    assert found(api, q="lease two") == []  # every word: "two" is run-2's
    assert found(api, q="leas") == []  # whole words
    assert found(api, q="   lease!  ") == ["cor-1"]


def test_accents_and_case_are_folded_both_ways(api, more_cases, how):
    h1 = more_cases["h1"]
    for q in ("cafe", "CAFÉ", "café", "rembourse", "REMBOURSÉ", "Être"):
        assert found(api, q=q) == [h1], q
    assert found(api, q="rembours") == []


def test_words_of_the_expectation_are_found(api, more_cases):
    h1, c1 = more_cases["h1"], more_cases["c1"]
    assert found(api, q="refund") == [c1, h1]  # shouldSay and why, newest first
    assert found(api, q="policy refund") == [h1]
    assert found(api, q="send_email") == [h1]  # a tool it names
    assert found(api, q="lookup") == ["cor-1"]
    assert found(api, q="k1") == ["case-2"]  # an item's key


def test_a_retired_case_is_found_only_with_include_retired_and_by_its_reason(api, more_cases, how):
    assert found(api, q="duplicate") == []
    assert found(api, q="duplicate", include="retired") == ["case-1"]
    assert found(api, q="lease", include="retired") == ["case-1", "cor-1"]


def test_another_tenants_cases_are_never_found(api, more_cases, how):
    assert found(api, q="clause") == ["cor-1"]
    assert found(api, as_="globex", project=PG, q="clause") == ["cor-g"]
    assert found(api, as_="globex", project=PG, q="refund") == []
    assert found(api, as_="globex", project=PG, tool="lookup") == []


def test_tool_is_exact_among_should_call_and_must_not_call(api, more_cases):
    assert found(api, tool="send_email") == [more_cases["h1"]]
    assert found(api, tool="lookup") == ["cor-1"]
    assert found(api, tool="send") == []
    assert found(api, tool="Lookup") == []


def test_part_any_of_them(api, more_cases):
    h1, c1 = more_cases["h1"], more_cases["c1"]
    assert found(api, part="items") == ["case-2"]
    assert found(api, part="decisions") == [h1, "cor-1"]
    assert found(api, part="answer,items") == [c1, h1, "case-2"]
    assert found(api, part="answer", include="retired") == [c1, h1, "case-1"]


def test_expert_added_by_run_and_dates(api, more_cases):
    h1, c1, run = more_cases["h1"], more_cases["c1"], more_cases["run"]
    assert found(api, expert="true") == [h1, "case-2"]
    assert found(api, expert="false") == [c1, "cor-1"]
    assert found(api, addedBy="u-writer") == ["cor-1"]
    assert found(api, addedBy="tok-ci") == [c1]  # a service's token, by its public id
    assert found(api, addedBy="u-publisher", include="retired") == [h1, "case-2", "case-1"]
    assert found(api, runId="run-1", include="retired") == ["case-1", "cor-1"]
    assert found(api, runId=run) == [h1]
    assert found(api, runId="run-globex") == []
    day = {"addedAfter": "2026-04-16T00:00:00Z", "addedBefore": "2026-04-16T09:30:00+00:00"}
    assert found(api, include="retired", **day) == ["case-1"]
    assert found(api, addedAfter="2026-04-16T10:00:00Z") == [c1, h1, "case-2"]  # at or after
    assert found(api, addedBefore="2026-04-16T10:00:00Z") == ["cor-1"]  # strictly before


def test_filters_combine(api, more_cases, how):
    h1, c1 = more_cases["h1"], more_cases["c1"]
    assert found(api, q="refund", expert="true") == [h1]
    assert found(api, q="refund", kind="correction") == [c1]
    assert found(api, q="refund", tool="send_email", part="answer") == [h1]
    assert found(api, tool="send_email", part="items") == []
    assert found(api, part="answer", addedBy="u-publisher", include="retired") == [h1, "case-1"]
    assert found(api, q="refund", addedAfter="2026-12-01T12:00:30Z") == [c1]
    assert found(api, q="lease", runId="run-1", expert="false", kind="correction") == ["cor-1"]


def test_a_search_pages_newest_first_and_its_cursor_is_bound_to_its_filters(api, more_cases, how):
    h1, c1 = more_cases["h1"], more_cases["c1"]
    first = ok(api.get(cases_url(q="refund", limit=1)))
    assert [c["id"] for c in first["data"]] == [c1] and first["hasMore"]
    cursor = first["nextCursor"]
    second = ok(api.get(cases_url(q="refund", limit=1, cursor=cursor)))
    assert [c["id"] for c in second["data"]] == [h1] and not second["hasMore"]
    for other in ({"q": "policy"}, {"tool": "send_email"}, {"expert": "true"}, {}):
        params = {"q": "refund", **other} if other else {}
        err = refused(api.get(cases_url(limit=1, cursor=cursor, **params)), 400, "bad-input")
        assert err["details"]["reason"] == "cursor-mismatch", other


def test_a_search_pages_through_cases_added_in_one_instant_each_once(
    api, more_cases, set_clock, how
):
    """Cases added in the same instant are one time in the list, told apart by id: a search
    paged one case at a time finds each once, in the list's order (SQLite's band of rows to
    gather matches for starts at the position's time, so at rows before the position too)."""
    set_clock(T0 + timedelta(minutes=2))
    body = {"runId": more_cases["run"], "answer": "wrong"}
    url = f"/v1/agents/{AGENT}/test-set/cases"
    added = [
        ok(api.post(url, {**body, "shouldSay": f"refund {n}"}, as_="publisher"), 201)["id"]
        for n in range(4)
    ]
    newest_first = [*sorted(added, reverse=True), more_cases["c1"], more_cases["h1"]]
    assert found(api, q="refund", limit=1) == newest_first
    assert [i for i in found(api) if i in newest_first] == newest_first


def test_cases_stored_out_of_the_lists_order_are_each_found_in_it(
    api, more_cases, set_clock, monkeypatch, how
):
    """Cases stored in another order than their times (an import, two writers): SQLite's band
    of rows (two here) then holds other rows than the list's next ones, and every case is
    still found once, in the list's order."""
    monkeypatch.setattr(search, "WINDOW", 2)
    monkeypatch.setattr(search, "MARGIN", 0)
    body = {"runId": more_cases["run"], "answer": "wrong"}
    url = f"/v1/agents/{AGENT}/test-set/cases"
    added = {}
    for n, minutes in enumerate([10, 5, 20, 2, 15, 30, 3]):
        set_clock(T0 + timedelta(minutes=minutes))
        added[minutes] = ok(api.post(url, {**body, "shouldSay": f"refund {n}"}), 201)["id"]
    by_time = [added[m] for m in sorted(added, reverse=True)]
    assert found(api, q="refund", limit=2) == [*by_time, more_cases["c1"], more_cases["h1"]]


BAD = [
    ("q", ""),
    ("q", "x" * 201),
    ("q", "?! -- ..."),
    ("q", "€ — © 👍\ufe0f \u0301"),  # symbols, a dash, an emoji, a mark alone: no word
    ("tool", ""),
    ("tool", "t" * 201),
    ("part", "decisions,bogus"),
    ("part", ""),
    ("expert", "yes"),
    ("expert", "1"),
    ("addedBy", ""),
    ("runId", ""),
    ("addedAfter", "2026-04-16"),
    ("addedAfter", "2026-04-16T10:00:00"),  # no time zone
    ("addedBefore", "yesterday"),
    ("addedBefore", "2026-13-01T00:00:00Z"),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_each_bad_value_is_refused_naming_it(api, unchanged, name, value):
    with unchanged():
        err = refused(api.get(cases_url(**{name: value})), 400, "bad-input")
    assert list(err["details"]["fields"]) == [name]


# ---------------------------------------------------------------- the same words on both engines

# 33 words, each followed by one of ASCII's 32 punctuation characters
NATO = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
]
PUNCTUATION = "".join(a + b for a, b in zip(NATO, string.punctuation + " ", strict=True))
MAIL = (
    "write to wombat@acme.test, see https://kb.acme.test/wombat-policy, /srv/wombat and "
    "wombat.rules"
)
TEXTS = {  # each a hand case's `why`, in acme.multi's project P3 (where nothing else is)
    "mail": MAIL,
    "refund": "Offer the refund",
    "punctuation": PUNCTUATION,
    "accents": "Le café CRÈME, naïve Ærø: Straße, \u212bngström, ﬁnal",
    "digits": "Order 4711 costs 12,50 € on 2026-12-02 (v2.3.1), 3rd try, x²",
    "scripts": "退款政策、请查看。返金ポリシー 환불 Возврат средств استرداد Επιστροφή ΣΊΣΥΦΟΣ",
    "apostrophes": "Don't refund the customer's order; l\u2019été, O'Brien",
    "hyphens": "a well-known e-mail, re\u2010sent and non\u2011breaking",
    "code": "send_email(to=x); fetch_clause -> kgi::Lookup",
    "snapshot": "Seen in the run",  # its run's output says MAIL
}
BOTH = {"mail", "snapshot"}
REFUNDS = {"refund", "apostrophes"}
SEARCHES = [  # what a search finds, by the texts above: the same on either engine
    # issue 27: an address, a URL, a path and a dotted name are words like any others
    *((q, BOTH) for q in ("wombat", "policy", "rules", "srv", "acme", "test", "https", "kb")),
    *((q, BOTH) for q in ("wombat@acme.test", "https://kb.acme.test/wombat-policy")),
    *((q, BOTH) for q in ("/srv/wombat", "wombat.rules", "WOMBAT-Policy", "kb.acme")),
    ("seen", {"snapshot"}),
    # punctuation around a word is no syntax of either engine's: the word is found
    *((q, REFUNDS) for q in ("~refund", "<refund>", "/refund", "'refund'", '"refund"', "refund:*")),
    *(
        (q, REFUNDS)
        for q in ("(refund)!", "-refund", "+refund", "#refund;", "\\refund", "[refund]")
    ),
    *((q, REFUNDS) for q in ("{refund}", "`refund`", "^refund$", "%refund|", "@refund", "refund.")),
    *((q, REFUNDS) for q in ("_refund_", "refund?", "refund=", "refund,", "!refund&", "*refund")),
    ("refund OR offer", set()),  # every word, "or" too (FTS5's OR is a word here)
    ("refund & !offer", {"refund"}),  # and tsquery's operators are not syntax either
    ("NOT offer", set()),
    ("refund offer", {"refund"}),
    ("refund customer", {"apostrophes"}),
    *((q, {"punctuation"}) for q in NATO),
    *(
        (a + b + c, {"punctuation"})
        for a, b, c in zip(NATO[:-1], string.punctuation, NATO[1:], strict=True)
    ),
    ("alphabravo", set()),
    # accents, case and compatibility forms fold; letters of their own don't
    *((q, {"accents"}) for q in ("cafe", "CAFÉ", "cafe\u0301", "crème", "NAIVE", "naïve")),
    *((q, {"accents"}) for q in ("strasse", "STRASSE", "straße", "angstrom", "Ångström")),
    *((q, {"accents"}) for q in ("final", "ﬁnal", "ærø", "ÆRØ")),
    ("aero", set()),
    # digits are words, whole
    *((q, {"digits"}) for q in ("4711", "12", "50", "12,50", "2026-12-02", "v2.3.1", "v2")),
    *((q, {"digits"}) for q in ("3rd", "x2", "x²", "1", "02")),
    ("2", set()),
    ("471", set()),
    ("1250", set()),
    # other scripts: a run of letters is a word, case folded
    *((q, {"scripts"}) for q in ("退款政策", "请查看", "返金ポリシー", "환불", "возврат")),
    *(
        (q, {"scripts"})
        for q in ("возврат".upper(), "средств", "استرداد", "επιστροφη", "ΕΠΙΣΤΡΟΦΉ")
    ),
    ("σίσυφος", {"scripts"}),  # its final sigma and the capital's sigma are one letter
    ("退款", set()),  # part of a run is not a word
    # apostrophes and hyphens cut words
    *((q, {"apostrophes"}) for q in ("don't", "don", "t", "customer's", "customer", "ete")),
    *((q, {"apostrophes"}) for q in ("l'été", "O'Brien", "o\u2019brien", "brien")),
    ("dont", set()),
    ("customers", set()),
    ("obrien", set()),
    *((q, {"hyphens"}) for q in ("well-known", "known", "e-mail", "mail", "re-sent", "sent")),
    *((q, {"hyphens"}) for q in ("non-breaking", "breaking", "re\u2010sent")),
    ("wellknown", set()),
    ("email", {"code"}),
    *((q, {"code"}) for q in ("send_email", "send", "fetch_clause", "kgi::lookup", "Lookup")),
]


@pytest.fixture
def texts(api) -> dict[str, str]:
    """A hand case for each of TEXTS, in P3: made through the API, as a user makes them."""
    made = {}
    for name, said in TEXTS.items():
        run = {"projectId": P3, "version": "2.0.0", "status": "finished"}
        if name == "snapshot":
            run["output"] = {"answer": MAIL}
        run_id = ok(api.post(f"/v1/agents/{MULTI}/runs", json=run), 201)["id"]
        body = {"runId": run_id, "answer": "right", "why": said}
        made[ok(api.post(f"/v1/agents/{MULTI}/test-set/cases", body), 201)["id"]] = name
    return made


def test_both_engines_cut_the_same_words_from_any_text(api, texts, how):
    """docs/design.md §4.1: a search finds the same cases on SQLite and PostgreSQL, whatever
    the text's punctuation, script, case or accents (issue 27: PostgreSQL's parser kept an
    address, a URL and a path whole, and found nothing for `~refund`, `<refund>`, `/refund`)."""
    for q, expected in SEARCHES:
        said = {texts[case_id] for case_id in found(api, agent=MULTI, project=P3, q=q)}
        assert said == expected, q


# ---------------------------------------------------------------- the index stays exact


def assert_index_exact(app) -> None:
    """For every word of every case (and one of none), the index finds exactly the cases whose
    words or retire reason's words have it; and each case's words are what `search.document`
    makes of its expectation and snapshot now, its retire reason's what `kindgi.words` makes of
    it."""
    with app.app_context():
        rows = db.session.execute(
            text(
                "SELECT cases.id, cases.search_text, cases.retired_reason, cases.retired_words, "
                "cases.expect, snapshots.input, snapshots.output FROM cases "
                "JOIN snapshots ON snapshots.run_id = cases.run_id"
            )
        ).all()
        docs = {}
        for case_id, said, reason, reason_said, expect, input_, output in rows:
            expect, input_, output = (
                json.loads(v) if isinstance(v, str) else v for v in (expect, input_, output)
            )
            made = search.document(search.expect_words(expect), search.run_words(input_, output))
            assert said == made, case_id
            assert reason_said == (
                None if reason is None else " ".join(dict.fromkeys(words(reason)))
            )
            docs[case_id] = set(said.split()) | set(words(reason or ""))
        name = dialect()
        query = select(Case.id).where(search.condition(name, None))
        for word in set().union(*docs.values()) | {"nowhere"}:
            hits = set(db.session.scalars(query, search.parameters(name, word, [], [])))
            assert hits == {case_id for case_id, said in docs.items() if word in said}, word


def test_the_loaded_world_is_indexed_exactly(app):
    assert_index_exact(app)


def test_every_kind_of_write_keeps_the_index_exact(app, api, more_cases):
    h1, c1 = more_cases["h1"], more_cases["c1"]
    assert_index_exact(app)
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases/{h1}/retire", {"reason": "Politique changée"}))
    assert found(api, q="politique changee", include="retired") == [h1]
    assert_index_exact(app)
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases/{h1}/restore", {}))
    assert found(api, q="politique", include="retired") == []
    assert found(api, q="cafe") == [h1]
    assert_index_exact(app)
    ok(api.patch(f"/v1/agents/{AGENT}/corrections/{c1}", {"status": "wont-fix"}, as_="writer"))
    assert found(api, q="refund", include="retired") == [h1]
    assert_index_exact(app)
    ok(api.patch(f"/v1/agents/{AGENT}/corrections/{c1}", {"status": "open"}, as_="writer"))
    assert found(api, q="refund") == [c1, h1]
    assert_index_exact(app)
    bulk = {"projectId": P1, "caseIds": [h1, c1]}
    reason = {"reason": "See wombat.rules/policy"}
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases/retire", {**bulk, **reason}, as_="publisher"))
    assert found(api, q="wombat", include="retired") == [c1, h1]
    assert_index_exact(app)
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases/restore", bulk, as_="publisher"))
    assert found(api, q="wombat", include="retired") == []
    assert_index_exact(app)


def test_the_demos_bulk_load_is_indexed_exactly(databases):
    with app_on(databases, databases.empty()) as app:
        loaded = app.test_cli_runner().invoke(args=["kindgi", "demo", "--cases", "300", "--json"])
        assert loaded.exit_code == 0, loaded.output
        assert_index_exact(app)


def test_the_migration_indexes_the_cases_already_stored(app):
    with app.app_context():
        downgrade(revision="0005")
        upgrade()
    assert_index_exact(app)
    with app.test_client() as client:
        resp = client.get(cases_url(q="lease"), headers={"Authorization": "Bearer kgi_admin"})
        assert [c["id"] for c in ok(resp)["data"]] == ["cor-1"]


def test_migration_0008_cuts_the_words_of_the_cases_already_stored(app):
    """Cases stored before 0008 had their text as each database cut it (0006): 0008 writes
    every case's words and its retire reason's, and indexes them."""
    with app.app_context():
        downgrade(revision="0007")
        db.session.execute(text("UPDATE cases SET search_text = 'Texts cut by the database'"))
        db.session.commit()
        upgrade()
    assert_index_exact(app)
    with app.test_client() as client:
        for q, ids in (("lease", ["case-1", "cor-1"]), ("DUPLICATE!", ["case-1"]), ("cut", [])):
            resp = client.get(
                cases_url(q=q, include="retired"), headers={"Authorization": "Bearer kgi_admin"}
            )
            assert [c["id"] for c in ok(resp)["data"]] == ids, q


@pytest.mark.skipif(ENGINE != "postgresql", reason="PostgreSQL's planner statistics")
def test_postgresql_knows_a_common_word_from_its_statistics_without_counting_it(app):
    """A word ANALYZE counted in most cases is walked at once, with no count of its matches in
    the GIN index (a bitmap of them all); a word in no case is driven from the index. The way
    taken is the one the statistics say, whatever the bounds' counting would."""
    cases = [
        {
            "id": f"case-common-{i:03d}",
            "run": "run-2",
            "by": "u-publisher",
            "at": f"2026-05-01T10:{i // 60:02d}:{i % 60:02d}Z",
            "body": {"answer": "wrong", "shouldSay": "Escalate the ticket"},
        }
        for i in range(300)
    ]
    with app.app_context():
        world.load({"cases": cases})
        db.session.commit()
        db.session.execute(text("ANALYZE cases"))
        said: list[str] = []
        listen = lambda *a: said.append(a[2])  # noqa: E731  (the statement's text)
        event.listen(db.engine, "before_cursor_execute", listen)
        try:
            ways = {}
            for word in ("escalate", "nowhere"):
                search._ways.clear()
                params = search.parameters("postgresql", word, [], [])
                ways[word] = search.strategy("postgresql", params)
        finally:
            event.remove(db.engine, "before_cursor_execute", listen)
    assert ways == {"escalate": search.WALK, "nowhere": search.DRIVE}
    assert not [s for s in said if "count(" in s], said  # neither was counted
