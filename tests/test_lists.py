"""Reading a test set: its counts, its cases page by page, and the runs to pick cases from.

The contract is the reference pages for `GET …/test-set` and `GET …/test-set/cases`
(docs/reference/test-set-counts.md, docs/reference/list-cases.md), with docs/design.md §1, §2, §4
and §6 for what they leave open. The world is tests/world.json (see conftest).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
from conftest import (
    AGENT,
    MULTI,
    P1,
    P2,
    P3,
    PG,
    WORLD,
    app_on,
    error_of,
    ok,
    refused,
    same_error,
    sign_in,
)
from databases import ENGINE
from sqlalchemy import select, text

from kindgi import cursors, world
from kindgi.database import db
from kindgi.models import Agent, Case
from kindgi.schemas import cases as case_schemas
from kindgi.schemas.common import dump
from kindgi.service import common, counts
from kindgi.service.cases import CASE_COLUMNS

UNKNOWN_PROJECT = "0badcafe-0000-4000-8000-000000000000"
T0 = datetime(2026, 12, 1, 12, 0, 0)
DAY = timedelta(hours=24)


def counts_url(agent: str = AGENT, project: str = P1) -> str:
    return f"/v1/agents/{agent}/test-set?projectId={project}"


def cases_url(agent: str = AGENT, project: str = P1, **params: Any) -> str:
    return f"/v1/agents/{agent}/test-set/cases?{urlencode({'projectId': project, **params})}"


def runs_url(agent: str = AGENT, project: str = P1, **params: Any) -> str:
    return f"/v1/agents/{agent}/runs?{urlencode({'projectId': project, **params})}"


TOKENS_URL = "/v1/tokens"


def tokens_url(**params: Any) -> str:
    return f"{TOKENS_URL}?{urlencode(params)}"


def ids(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["data"]]


def walk(api, url_of, limit: int, as_: str = "admin") -> list[dict[str, Any]]:
    """Every page of a list, following `nextCursor` until `hasMore` is false."""
    pages, cursor = [], None
    for _ in range(200):
        extra = {"cursor": cursor} if cursor else {}
        page = ok(api.get(url_of(limit=limit, **extra), as_=as_))
        pages.append(page)
        if not page["hasMore"]:
            assert "nextCursor" not in page
            return pages
        assert page["nextCursor"] and len(page["data"]) == limit
        cursor = page["nextCursor"]
    raise AssertionError("the cursor never ended")


def first_cursor(api, url: str, as_: str = "admin") -> str:
    page = ok(api.get(url, as_=as_))
    assert page["hasMore"] is True
    return page["nextCursor"]


def bad_cursor_reason(resp) -> str:
    return refused(resp, 400, "bad-input")["details"]["reason"]


@pytest.fixture
def load(app):
    """Load more world entries into the test's database, as `flask kindgi load` would."""

    def _load(extra: dict[str, Any]) -> None:
        with app.app_context():
            world.load(extra)
            db.session.commit()
            db.session.remove()

    return _load


def hand_case(case_id: str, at: str, run: str = "run-2", by: str = "u-publisher", **more: Any):
    """A hand case as a world file gives it."""
    return {"id": case_id, "run": run, "by": by, "at": at, "body": {"answer": "right"}, **more}


def many_hand_cases(n: int, retire_every: int = 0) -> list[dict[str, Any]]:
    """`n` hand cases on run-2, three to each minute, their ids shuffled against their times."""
    base, out = datetime(2026, 3, 1, 8, 0, 0), []
    for i in range(n):
        at = (base + timedelta(minutes=i // 3)).isoformat() + "Z"
        case = hand_case(f"case-m{(i * 37) % n:03d}", at)
        if retire_every and i % retire_every == 0:
            case["retired"] = {"reason": "stale", "by": "u-admin", "at": "2026-05-01T00:00:00Z"}
        out.append(case)
    return out


def add_case(api, run: str = "run-2", as_: str = "publisher") -> dict[str, Any]:
    body = {"runId": run, "answer": "right"}
    return ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", body, as_=as_), 201)


def newest_first(cases: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in sorted(cases, key=lambda c: (c["at"], c["id"]), reverse=True)]


# The world's cases of acme.drafting in P1, as (id, addedAt) and whether retired.
WORLD_P1 = [
    {"id": "case-2", "at": "2026-04-16T10:00:00Z"},
    {"id": "case-1", "at": "2026-04-16T09:00:00Z", "retired": True},
    {"id": "cor-1", "at": "2026-04-15T12:05:00Z"},
]


# ---------------------------------------------------------------- counts


@pytest.mark.parametrize(
    ("agent", "project", "as_", "cases", "last"),
    [
        (AGENT, P1, "admin", {"active": 2, "retired": 1}, "2026-04-16T10:00:00Z"),
        (MULTI, P2, "admin", {"active": 1, "retired": 0}, "2026-04-15T12:07:00Z"),
        (MULTI, P3, "admin", {"active": 0, "retired": 0}, None),
        (AGENT, PG, "globex", {"active": 1, "retired": 0}, "2026-04-15T12:05:00Z"),
        (AGENT, P1.upper(), "reader", {"active": 2, "retired": 1}, "2026-04-16T10:00:00Z"),
    ],
)
def test_each_test_set_counts_exactly_its_cases_in_a_lower_case_project_without_frozen_version(
    api, agent, project, as_, cases, last
):
    body = ok(api.get(counts_url(agent, project), as_=as_))
    expected = {"agentId": agent, "projectId": project.lower(), "cases": cases}
    if last is not None:
        expected["lastAddedAt"] = last
    assert body == expected


@pytest.mark.parametrize(
    ("correction", "status", "active"),
    [
        ("cor-1", "wont-fix", 1),
        ("cor-1", "removed", 1),
        ("cor-1", "fixed", 2),
        ("cor-1", "with-the-owner", 2),
        ("cor-2", "open", 3),
        ("cor-2", "fixed", 3),
        ("cor-2", "with-the-owner", 3),
        ("cor-2", "removed", 2),
    ],
)
def test_a_correction_changing_status_moves_the_counts_at_once(api, correction, status, active):
    ok(api.patch(f"/v1/agents/{AGENT}/corrections/{correction}", {"status": status}, as_="writer"))
    assert ok(api.get(counts_url()))["cases"] == {"active": active, "retired": 1}
    listed = correction in ids(ok(api.get(cases_url(include="retired"))))
    assert listed is (status not in ("wont-fix", "removed"))


def test_a_retired_correction_leaving_and_coming_back_moves_the_retired_count(api):
    retire = f"/v1/agents/{AGENT}/test-set/cases/cor-1/retire"
    ok(api.post(retire, {"reason": "obsolete"}, as_="publisher"))
    assert ok(api.get(counts_url()))["cases"] == {"active": 1, "retired": 2}
    ok(api.patch(f"/v1/agents/{AGENT}/corrections/cor-1", {"status": "wont-fix"}, as_="writer"))
    assert ok(api.get(counts_url()))["cases"] == {"active": 1, "retired": 1}
    ok(api.patch(f"/v1/agents/{AGENT}/corrections/cor-1", {"status": "open"}, as_="writer"))
    assert ok(api.get(counts_url()))["cases"] == {"active": 1, "retired": 2}


def test_the_last_case_leaving_a_set_takes_last_added_at_with_it(api):
    ok(api.patch(f"/v1/agents/{MULTI}/corrections/cor-3", {"status": "wont-fix"}, as_="expert"))
    body = ok(api.get(counts_url(MULTI, P2)))
    assert body == {"agentId": MULTI, "projectId": P2, "cases": {"active": 0, "retired": 0}}


def test_a_case_added_retired_or_restored_moves_the_counts_and_last_added_at(api, set_clock):
    set_clock(datetime(2026, 12, 1, 9, 30, 15, 250000))
    case = add_case(api)
    assert case["expert"] is True and case["addedBy"] == {"kind": "user", "id": "u-publisher"}
    assert ok(api.get(counts_url()))["cases"] == {"active": 3, "retired": 1}
    case_url = f"/v1/agents/{AGENT}/test-set/cases/{case['id']}"
    ok(api.post(f"{case_url}/retire", {"reason": "wrong premise"}, as_="publisher"))
    body = ok(api.get(counts_url()))
    assert body["cases"] == {"active": 2, "retired": 2}
    assert body["lastAddedAt"] == case["addedAt"] == "2026-12-01T09:30:15.250Z"  # retired or not
    ok(api.post(f"{case_url}/restore", {}, as_="publisher"))
    assert ok(api.get(counts_url()))["cases"] == {"active": 3, "retired": 1}


@pytest.mark.skipif(ENGINE != "postgresql", reason="PostgreSQL's plans of prepared statements")
def test_the_cases_pages_counts_are_planned_once_not_on_every_read(databases):
    """The cases page reads its counts on every request: PostgreSQL keeps one plan for that
    statement. With its `LIMIT 1` bound, not written, the planner guessed a tenth of a large
    set read, so it planned every read anew (0.2 ms of the server's time a page)."""
    with app_on(databases, databases.empty()) as app:
        loaded = app.test_cli_runner().invoke(args=["kindgi", "demo", "--cases", "3000", "--json"])
        assert loaded.exit_code == 0, loaded.output
        demo = json.loads(loaded.output.strip().splitlines()[-1])
        with app.app_context():
            db.session.execute(text("ANALYZE"))
            pk = db.session.scalar(select(Agent.pk).where(Agent.id == demo["agentId"]))
            for _ in range(20):  # psycopg prepares it at the 5th; PostgreSQL plans the next 5
                counts.page_counts(pk, demo["agentId"], demo["projectId"])
            generic, custom = db.session.execute(text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%FROM tallies%'"
            )).one()  # fmt: skip
    assert generic >= 5 and custom <= 5


@pytest.mark.parametrize("path", ["/test-set", "/test-set/cases", "/runs"])
def test_an_unknown_agent_and_another_tenants_agent_are_both_not_found(api, path):
    unknown = refused(api.get(f"/v1/agents/acme.no{path}?projectId={P1}"), 404, "agent-not-found")
    theirs = api.get(f"/v1/agents/{MULTI}{path}?projectId={P2}", as_="globex")
    assert same_error(refused(theirs, 404, "agent-not-found"), unknown)


@pytest.mark.parametrize("path", ["/test-set", "/test-set/cases", "/runs"])
@pytest.mark.parametrize("project", [P2, PG, UNKNOWN_PROJECT])
def test_a_project_not_serving_the_agent_is_not_found(api, path, project):
    err = refused(
        api.get(f"/v1/agents/{AGENT}{path}?projectId={project}"), 404, "project-not-found"
    )
    unknown = error_of(api.get(f"/v1/agents/{AGENT}{path}?projectId={UNKNOWN_PROJECT}"))
    assert same_error(err, unknown)


@pytest.mark.parametrize("path", ["/test-set", "/test-set/cases", "/runs"])
@pytest.mark.parametrize(
    ("agent", "project", "as_"), [(AGENT, P1, "nobody"), (MULTI, P3, "reader")]
)
def test_a_caller_without_read_is_forbidden_and_told_what_it_needs(api, path, agent, project, as_):
    err = refused(
        api.get(f"/v1/agents/{agent}{path}?projectId={project}", as_=as_), 403, "forbidden"
    )
    assert err["details"]["needs"] == [{"permission": "read", "project": project}]


# ---------------------------------------------------------------- the cases


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ["case-2", "cor-1"]),
        ({"include": "retired"}, ["case-2", "case-1", "cor-1"]),
        ({"kind": "correction"}, ["cor-1"]),
        ({"kind": "hand"}, ["case-2"]),
        ({"kind": "hand,correction"}, ["case-2", "cor-1"]),
        ({"kind": "hand", "include": "retired"}, ["case-2", "case-1"]),
        ({"kind": "correction,hand", "include": "retired"}, ["case-2", "case-1", "cor-1"]),
    ],
)
def test_cases_are_listed_newest_added_first_with_the_filters_asked_for(api, params, expected):
    body = ok(api.get(cases_url(**params)))
    assert ids(body) == expected
    assert body["hasMore"] is False and "nextCursor" not in body


@pytest.mark.parametrize(
    ("url", "params"),
    [
        (cases_url, {"include": "all"}),
        (cases_url, {"include": ""}),
        (cases_url, {"kind": "corrections"}),
        (cases_url, {"kind": "hand,"}),
        (cases_url, {"kind": ""}),
        (cases_url, {"kind": "hand;correction"}),
        (runs_url, {"status": "done"}),
        (runs_url, {"status": "RUNNING"}),
        (runs_url, {"status": ""}),
    ],
)
def test_a_filter_naming_something_else_is_bad_input(api, url, params):
    err = refused(api.get(url(**params)), 400, "bad-input")
    assert set(err["details"]["fields"]) == set(params)


def case_json(case_id, kind, run, made_on, expect, by, added, **more) -> dict[str, Any]:
    """A case as the reference shapes it; `updatedAt` is `addedAt` and `revision` 1 unless
    given."""
    return {
        "id": case_id, "kind": kind, "projectId": more.pop("project", P1), "runId": run,
        "madeOn": made_on, "expect": expect, "addedBy": {"kind": "user", "id": by},
        "addedAt": added, "updatedAt": more.pop("updated", added),
        "revision": more.pop("revision", 1), **more,
    }  # fmt: skip


def test_every_field_of_a_case_is_as_the_reference_describes(api):
    listed = {c["id"]: c for c in ok(api.get(cases_url(include="retired")))["data"]}
    retired = {"reason": "duplicate", "by": {"kind": "user", "id": "u-publisher"}}
    lookup = {"verdict": "wrong", "shouldCall": [{"tool": "lookup", "args": {}}]}
    assert listed == {
        "cor-1": case_json("cor-1", "correction", "run-1", "1.1.0", {"decisions": lookup},
                           "u-writer", "2026-04-15T12:05:00Z"),
        "case-2": case_json("case-2", "hand", "run-2", "1.0.0",
                            {"items": [{"key": "k1", "verdict": "right"}]}, "u-publisher",
                            "2026-04-16T10:00:00Z", expert=True),
        "case-1": case_json("case-1", "hand", "run-1", "1.1.0", {"answer": {"verdict": "right"}},
                            "u-publisher", "2026-04-16T09:00:00Z", updated="2026-04-17T09:00:00Z",
                            retired={**retired, "at": "2026-04-17T09:00:00Z"}, expert=True),
    }  # fmt: skip
    assert ok(api.get(cases_url(MULTI, P2)))["data"] == [
        case_json("cor-3", "correction", "run-multi", "2.0.0",
                  {"answer": {"verdict": "wrong", "why": "Too curt."}}, "u-expert",
                  "2026-04-15T12:07:00Z", project=P2, expert=True)
    ]  # fmt: skip


def test_updated_at_is_added_at_until_the_case_is_retired(api, load):
    load({"cases": many_hand_cases(12, retire_every=4)})
    for case in ok(api.get(cases_url(include="retired", limit=100)))["data"]:
        if "retired" in case:
            assert case["updatedAt"] == case["retired"]["at"] != case["addedAt"]
        else:
            assert case["updatedAt"] == case["addedAt"]
        assert case.get("expert", True) is True  # present only when true
        assert "expert" in case or case["kind"] == "correction"


@pytest.mark.parametrize(
    ("limit", "size", "more"), [(None, 25, True), (1, 1, True), (100, 32, False)]
)
def test_limit_defaults_to_25_and_accepts_1_to_100(api, load, limit, size, more):
    load({"cases": many_hand_cases(30)})
    body = ok(api.get(cases_url(**({} if limit is None else {"limit": limit}))))
    assert len(body["data"]) == size and body["hasMore"] is more
    assert ("nextCursor" in body) is more


@pytest.mark.parametrize("limit", ["0", "101", "abc", "-1", "1.5", "", "1e2", "true"])
def test_a_limit_outside_1_to_100_is_refused_not_clamped(api, limit):
    for url in (cases_url(limit=limit), runs_url(limit=limit)):
        assert "limit" in refused(api.get(url), 400, "bad-input")["details"]["fields"]


# ---------------------------------------------------------------- cursors


@pytest.mark.parametrize(
    "params", [{}, {"include": "retired"}, {"kind": "hand"}, {"kind": "correction,hand"}]
)
def test_paging_by_7_lists_every_case_once_newest_first(api, load, params):
    extra = many_hand_cases(60, retire_every=5)
    load({"cases": extra})
    wanted = [
        c
        for c in WORLD_P1 + extra
        if (params.get("include") or not c.get("retired"))
        and (params.get("kind") != "hand" or c["id"].startswith("case-"))
    ]
    pages = walk(api, lambda **q: cases_url(**params, **q), 7)
    seen = [i for page in pages for i in ids(page)]
    assert seen == newest_first(wanted)
    assert len(seen) == len(set(seen))
    assert seen == ids(ok(api.get(cases_url(**params, limit=100))))


def test_cases_added_or_retired_while_paging_are_not_seen_twice_nor_others_skipped(api, load):
    extra = many_hand_cases(40)
    load({"cases": extra})
    before = newest_first([c for c in WORLD_P1 if "retired" not in c] + extra)
    first = ok(api.get(cases_url(limit=7)))
    seen = ids(first)
    for _ in range(3):
        add_case(api, "run-1")
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases/{seen[0]}/retire", {"reason": "x"}))
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases/{seen[1]}/retire", {"reason": "x"}))
    cursor = first["nextCursor"]
    while cursor:
        page = ok(api.get(cases_url(limit=7, cursor=cursor)))
        seen += ids(page)
        cursor = page.get("nextCursor")
    assert seen == before


def test_a_cursor_is_opaque(api):
    cursor = first_cursor(api, cases_url(limit=1))
    padded = cursor + "=" * (-len(cursor) % 4)
    blobs = [cursor.encode()]
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        with contextlib.suppress(binascii.Error, ValueError):
            blobs.append(decode(padded))
    for blob in blobs:
        for plain in ("case-2", "cor-1", "case-", P1, P1.replace("-", ""), AGENT, "u-admin"):
            assert plain.encode() not in blob
        with pytest.raises(ValueError):
            json.loads(blob)


@pytest.mark.parametrize(
    ("origin", "elsewhere"),
    [
        (cases_url(limit=1), cases_url(limit=1, kind="hand")),
        (cases_url(limit=1), cases_url(limit=1, kind="correction")),
        (cases_url(limit=1), cases_url(limit=1, include="retired")),
        (cases_url(limit=1, kind="hand", include="retired"), cases_url(limit=1, kind="hand")),
        (cases_url(limit=1), cases_url(MULTI, P2, limit=1)),
        (cases_url(MULTI, P2, limit=1), cases_url(MULTI, P3, limit=1)),
        (cases_url(limit=1), runs_url(limit=1)),
        (runs_url(limit=1), cases_url(limit=1)),
        (runs_url(limit=1), runs_url(limit=1, status="finished")),
        (cases_url(limit=1), TOKENS_URL + "?limit=1"),
        (TOKENS_URL + "?limit=1", cases_url(limit=1)),
    ],
)
def test_a_cursor_used_on_another_list_or_filter_is_a_mismatch(api, load, origin, elsewhere):
    load({"cases": [hand_case("case-p2", "2026-04-20T00:00:00Z", "run-multi", "u-expert")]})
    cursor = first_cursor(api, origin)
    assert bad_cursor_reason(api.get(f"{elsewhere}&{urlencode({'cursor': cursor})}")) == (
        "cursor-mismatch"
    )


@pytest.mark.parametrize(
    ("issuer", "user"),
    [("admin", "reader"), ("reader", "publisher"), ("publisher", "ci"), ("admin", "globex")],
)
def test_a_cursor_used_by_another_caller_is_a_mismatch(api, issuer, user):
    cursor = first_cursor(api, cases_url(limit=1), as_=issuer)
    project = PG if user == "globex" else P1
    resp = api.get(cases_url(project=project, limit=1, cursor=cursor), as_=user)
    assert bad_cursor_reason(resp) == "cursor-mismatch"


def test_a_cursor_outlives_another_spelling_of_its_filters_another_limit_or_token(api):
    cursor = first_cursor(api, cases_url(limit=1, kind="hand,correction"), as_="reader")
    token = ok(api.post("/v1/tokens", {"name": "second"}, as_="reader"), 201)["secret"]
    for params, as_ in [
        ({}, "reader"),
        ({"kind": "correction,hand"}, "reader"),
        ({"project": P1.upper()}, "reader"),
        ({"limit": 5}, "reader"),
        ({}, token),
    ]:
        page = ok(api.get(cases_url(**{"limit": 1, "cursor": cursor, **params}), as_=as_))
        assert ids(page) == ["cor-1"]


def _flip(text: str, at: int) -> str:
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]


def _another_key(_: str) -> str:
    """A cursor sealed like ours but with another secret key."""
    binding = {"list": "cases", "project": P1, "include": "", "kind": ["correction", "hand"]}
    now = datetime.now().timestamp()
    return cursors.seal("another-secret", binding, ["2026-04-16T10:00:00", "case-2"], now)


SPOILERS = {
    "truncated": lambda c: c[:-6],
    "halved": lambda c: c[: len(c) // 2],
    "tampered": lambda c: _flip(c, len(c) // 2),
    "tampered-head": lambda c: _flip(c, 5),
    "extended": lambda c: c + "A",
    "garbage": lambda c: "not-a-cursor",
    "10KB": lambda c: "A" * 10240,
    "non-ascii": lambda c: c[:-4] + "é" * 4,
    "forged-json": lambda c: base64.urlsafe_b64encode(b'["2026-04-16T10:00:00","case-2"]').decode(),
    "another-key": _another_key,
}


@pytest.mark.parametrize("spoil", SPOILERS)
def test_a_spoilt_cursor_is_invalid(api, spoil):
    cursor = SPOILERS[spoil](first_cursor(api, cases_url(limit=1)))
    assert bad_cursor_reason(api.get(cases_url(limit=1, cursor=cursor))) == "cursor-invalid"


@pytest.mark.parametrize(
    ("after", "works"), [(DAY - timedelta(seconds=1), True), (DAY + timedelta(seconds=1), False)]
)
def test_a_cursor_works_for_a_day_after_it_was_sealed(api, set_clock, after, works):
    set_clock(T0)
    cursor = first_cursor(api, cases_url(limit=1))
    set_clock(T0 + after)
    resp = api.get(cases_url(limit=1, cursor=cursor))
    if works:
        assert ids(ok(resp)) == ["cor-1"]
    else:
        assert bad_cursor_reason(resp) == "cursor-expired"


# ---------------------------------------------------------------- runs


RUNS_P1 = ["run-replay", "run-erased", "run-running", "run-2", "run-1"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, RUNS_P1),
        ("running", ["run-running"]),
        ("finished", [r for r in RUNS_P1 if r != "run-running"]),
    ],
)
def test_runs_are_listed_newest_first_and_by_status(api, status, expected):
    params = {} if status is None else {"status": status}
    assert ids(ok(api.get(runs_url(**params), as_="reader"))) == expected
    pages = walk(api, lambda **q: runs_url(**params, **q), 2, as_="reader")
    assert [i for page in pages for i in ids(page)] == expected


def test_each_run_is_shown_with_its_content(api):
    shown = {r["id"]: r for r in ok(api.get(runs_url()))["data"]}
    for run in (r for r in WORLD["runs"] if r["id"] in RUNS_P1):
        fields = {k: run[k] for k in ("id", "version", "status", "input", "output", "calls", "at")}
        replay = {"replayOf": run["replayOf"]} if run.get("replayOf") else {}
        erased = bool(run.get("erased"))
        cased = any(c["run"] == run["id"] for c in WORLD["corrections"] + WORLD["cases"])
        expected = {**fields, "projectId": P1, "erased": erased, "hasCase": cased, **replay}
        assert shown[run["id"]] == expected


def test_another_tenants_runs_are_never_listed(api):
    assert ids(ok(api.get(runs_url(AGENT, PG), as_="globex"))) == ["run-globex"]


def test_every_case_answers_exactly_what_its_documented_schema_dumps(app, api):
    """`schemas.cases.case_json`, which writes a case out by hand for speed, agrees with `CaseOut`
    (the schema the OpenAPI document shows) for every case of the world, read as a model and
    as a list's row, retired and expert ones included."""
    with app.app_context():
        cases = db.session.scalars(select(Case).order_by(Case.id)).all()
        rows = db.session.execute(select(*CASE_COLUMNS).order_by(Case.id)).all()
        assert any(c.retired_at for c in cases) and any(c.expert for c in cases)
        assert any(not c.expert for c in cases) and any(c.retired_at is None for c in cases)
        for case, row in zip(cases, rows, strict=True):
            documented = dump(case_schemas.CaseOut, case)
            assert json.dumps(case_schemas.case_json(case)) == json.dumps(documented), case.id
            # a row's expectation is its stored text, written out as it is
            assert orjson.loads(orjson.dumps(case_schemas.case_json(row))) == documented, case.id


# ---------------------------------------------------------------- the caller's tokens


def test_tokens_are_listed_newest_first_a_page_at_a_time_each_once_without_secrets(api, set_clock):
    # the world's tokens were made when it was loaded, at the real time: these come after
    start = common.clock() + timedelta(hours=1)
    made = []
    for i in range(30):
        set_clock(start + timedelta(minutes=i // 2))  # two to a minute: ties go by id
        made.append(ok(api.post(TOKENS_URL, {"name": f"t{i}"}, as_="reader"), 201))
    world_tokens = [t["id"] for t in WORLD["tokens"] if t["principal"] == "u-reader"]
    pages = walk(api, tokens_url, 7, as_="reader")
    seen = [token for page in pages for token in page["data"]]
    newest = sorted(made, key=lambda t: (t["createdAt"], t["id"]), reverse=True)
    assert [t["id"] for t in seen] == [t["id"] for t in newest] + world_tokens
    assert all(set(t) <= {"id", "name", "createdAt", "expiresAt", "revokedAt"} for t in seen)
    assert ids(ok(api.get(tokens_url(limit=100), as_="reader"))) == [t["id"] for t in seen]


def test_revoked_and_expired_tokens_are_listed_with_their_state(api):
    listed = {t["id"]: t for t in ok(api.get(tokens_url(limit=100)))["data"]}
    assert {"tok-admin", "tok-expired", "tok-revoked"} <= set(listed)
    assert "revokedAt" in listed["tok-revoked"] and "revokedAt" not in listed["tok-admin"]
    assert listed["tok-expired"]["expiresAt"] is not None


@pytest.mark.parametrize("limit", ["0", "101", "abc", ""])
def test_a_tokens_limit_outside_1_to_100_is_refused(api, limit):
    assert (
        "limit" in refused(api.get(tokens_url(limit=limit)), 400, "bad-input")["details"]["fields"]
    )


def test_a_tokens_cursor_used_by_another_user_is_a_mismatch(api):
    cursor = first_cursor(api, tokens_url(limit=1))
    resp = api.get(tokens_url(limit=1, cursor=cursor), as_="reader")
    assert bad_cursor_reason(resp) == "cursor-mismatch"


# ---------------------------------------------------------------- the pages' lists


@pytest.mark.parametrize(
    ("path", "restarted"),
    [
        (f"/agents/{AGENT}/test-set/cases?projectId={P1}&kind=hand&cursor=spoilt",
         f"/agents/{AGENT}/test-set/cases?projectId={P1}&kind=hand"),
        ("/tokens?cursor=spoilt", "/tokens"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("htmx", [False, True], ids=["link", "htmx"])
def test_a_page_asked_for_with_a_spoilt_cursor_restarts_its_list(app, path, restarted, htmx):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    headers = {"HX-Request": "true"} if htmx else {}
    resp = client.get(path, headers=headers)
    if htmx:  # htmx is told to load the restarted list as a whole page
        assert (resp.status_code, resp.headers["HX-Redirect"]) == (204, restarted)
    else:
        assert (resp.status_code, resp.headers["Location"]) == (303, restarted)
    shown = client.get(restarted).get_data(as_text=True)
    assert "out of date; here are the newest" in shown


def test_a_page_asked_for_with_a_bad_filter_is_still_a_400(app):
    client = app.test_client()
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    assert client.get(f"/agents/{AGENT}/test-set/cases?projectId={P1}&kind=x").status_code == 400
    assert client.get("/tokens?limit=0").status_code == 400
