"""Adding a hand case: `POST /v1/agents/{agentId}/test-set/cases`, through HTTP, rule by rule.

Each limit is shown at its boundary (added at the limit, 400 one past it) and every refused
request is shown to change nothing. The contract is `docs/reference/add-case.md`; permissions and
error envelopes are docs/design.md §2-3. Each table row starts with the sentence that names it.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from conftest import AGENT, MULTI, P1, P2, P3, TOKENS, WORLD, error_of, ok
from test_run_pages import statements

PARROT = "🦜"  # one code point, two UTF-16 units, four UTF-8 bytes
RUN_1 = next(run for run in WORLD["runs"] if run["id"] == "run-1")
CONTENT = ("input", "output", "calls")
CASE_FIELDS = {
    "id", "kind", "projectId", "runId", "madeOn", "expect", "addedBy", "addedAt", "updatedAt",
    "revision", "expert",
}  # fmt: skip


def named(*rows: tuple[Any, ...]) -> list[Any]:
    """pytest params from rows whose first element is the sentence naming the row."""
    return [pytest.param(*row[1:], id=row[0]) for row in rows]


def cases_url(agent: str = AGENT) -> str:
    return f"/v1/agents/{agent}/test-set/cases"


def content(snapshot_or_run: dict[str, Any]) -> dict[str, Any]:
    return {k: snapshot_or_run[k] for k in CONTENT}


# ---------------------------------------------------------------- building bodies


def body(run_id: str = "run-1", **fields: Any) -> dict[str, Any]:
    return {"runId": run_id, **fields}


def should_call(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"decisions": "wrong", "shouldCall": list(entries)}


def tools(*tool_names: str) -> dict[str, Any]:
    return should_call(*({"tool": t} for t in tool_names))


def must_not_call(*tool_names: str) -> dict[str, Any]:
    return {"decisions": "wrong", "mustNotCall": list(tool_names)}


def with_args(args: Any) -> dict[str, Any]:
    return should_call({"tool": "search", "args": args})


def item(key: str = "k", **fields: Any) -> dict[str, Any]:
    return {"key": key, "verdict": "right", **fields}


def items(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"items": list(entries)}


def keyed(n: int) -> dict[str, Any]:
    return items(*(item(f"k{i}") for i in range(n)))


def names(n: int) -> list[str]:
    return [f"tool-{i:02d}" for i in range(n)]


def canonical_len(value: Any) -> int:
    """Characters (code points) of the value's canonical JSON (RFC 8785)."""
    return len(rfc8785.dumps(value).decode("utf-8"))


def args_of(chars: int, props: int = 1, fill: str = "x") -> dict[str, str]:
    """Args with `props` properties whose canonical JSON is exactly `chars` characters."""
    args = {f"p{i:03d}": "" for i in range(props)}
    args["p000"] = fill * (chars - canonical_len(args))
    assert canonical_len(args) == chars
    return args


def expected_expect(sent: dict[str, Any]) -> dict[str, Any]:
    """What the reference says a case expects from a body: one part per verdict given."""
    expect: dict[str, Any] = {}
    if "decisions" in sent:
        decisions = {"verdict": sent["decisions"]}
        if "shouldCall" in sent:
            decisions["shouldCall"] = [
                {"tool": c["tool"], "args": c.get("args", {})} for c in sent["shouldCall"]
            ]
        if "mustNotCall" in sent:
            decisions["mustNotCall"] = sent["mustNotCall"]
        expect["decisions"] = decisions
    if "answer" in sent:
        said = {k: sent[k] for k in ("shouldSay", "why") if k in sent}
        expect["answer"] = {"verdict": sent["answer"], **said}
    if "items" in sent:
        expect["items"] = sent["items"]
    return expect


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def add(api):
    """POST a body that must be added: 201 with the expectation the body asks for."""

    def post(payload: dict[str, Any], *, agent: str = AGENT, as_: str = "admin") -> dict:
        resp = api.post(cases_url(agent), json=payload, as_=as_)
        assert resp.status_code == 201, resp.get_json()
        case = resp.get_json()
        assert case["expect"] == expected_expect(payload)
        return case

    return post


@pytest.fixture
def refuse(api, unchanged):
    """POST a request that must be refused with `status` and `code`, changing nothing.

    `field` is the path `details.fields` must name, or a tuple of paths of which it names one.
    """

    def post(payload=None, *, status=400, code="bad-input", field=None, agent=AGENT, **kw):
        with unchanged():
            resp = api.call("POST", cases_url(agent), json=payload, **kw)
        assert resp.status_code == status, resp.get_json()
        err = error_of(resp)
        assert err["code"] == code, err
        if field is not None:
            wanted = {field} if isinstance(field, str) else set(field)
            assert wanted & set(err["details"]["fields"]), err
        return err

    return post


@pytest.fixture
def fresh_run(api):
    """A finished run of acme.drafting recorded now: no correction or case has seen it yet."""
    run = {
        "projectId": P1, "version": "1.1.0", "status": "finished",
        "input": {"q": "Fresh"}, "calls": [{"tool": "lookup", "args": {"id": 7}}],
        "output": {"k" * 499: "found", "k" * 500: "found too", "a/b~c": [0]},
    }  # fmt: skip
    resp = api.post(f"/v1/agents/{AGENT}/runs", json=run)
    assert resp.status_code == 201, resp.get_json()
    return {**run, "id": resp.get_json()["id"]}


def counts_of(api, agent: str, project: str) -> dict[str, Any]:
    resp = api.get(f"/v1/agents/{agent}/test-set?projectId={project}")
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


# ---------------------------------------------------------------- limits, at and one past


LIMITS = named(
    ("shouldCall holds 50 entries", tools(*names(50)), tools(*names(51)), "shouldCall"),
    ("mustNotCall holds 50 tools", must_not_call(*names(50)), must_not_call(*names(51)),
     "mustNotCall"),
    ("a tool name has a character", tools("t"), tools(""), "shouldCall.0.tool"),
    ("a tool name has 200 characters", tools("t" * 200), tools("t" * 201), "shouldCall.0.tool"),
    ("a tool name counts code points", tools("a", PARROT * 200), tools("a", PARROT * 201),
     "shouldCall.1.tool"),
    ("a tool not to call has a character", must_not_call("t"), must_not_call(""),
     "mustNotCall.0"),
    ("a tool not to call has 200 code points", must_not_call("a", PARROT * 200),
     must_not_call("a", PARROT * 201), "mustNotCall.1"),
    ("args have 100 properties", with_args(args_of(1200, props=100)),
     with_args(args_of(1200, props=101)), "shouldCall.0.args"),
    ("args have 4000 characters of canonical JSON", with_args(args_of(4000)),
     with_args(args_of(4001)), "shouldCall.0.args"),
    ("args at both limits are measured without whitespace", with_args(args_of(4000, props=100)),
     with_args(args_of(4001, props=100)), "shouldCall.0.args"),
    ("args count code points, not bytes", with_args(args_of(4000, fill=PARROT)),
     with_args(args_of(4001, fill=PARROT)), "shouldCall.0.args"),
    ("shouldSay has 4000 characters", {"answer": "wrong", "shouldSay": "s" * 4000},
     {"answer": "wrong", "shouldSay": "s" * 4001}, "shouldSay"),
    ("why has 4000 code points", {"answer": "wrong", "why": PARROT * 4000},
     {"answer": "wrong", "why": PARROT * 4001}, "why"),
    ("items holds 100 entries", keyed(100), keyed(101), "items"),
    ("an item key has a character", items(item("k")), items(item("")), "items.0.key"),
    ("an item key has 200 code points", items(item("a"), item(PARROT * 200)),
     items(item("a"), item(PARROT * 201)), "items.1.key"),
)  # fmt: skip


@pytest.mark.parametrize(("at_limit", "past_limit", "field"), LIMITS)
def test_a_body_at_each_limit_is_added_and_one_past_it_is_refused_naming_the_field(
    add, refuse, at_limit, past_limit, field
):
    refuse(body(**past_limit), field=field)
    add(body(**at_limit))


def test_an_item_pointer_of_500_characters_is_added_and_one_of_501_is_refused(
    add, refuse, fresh_run
):
    refuse(body(fresh_run["id"], **items(item(pointer="/" + "k" * 500))), field="items.0.pointer")
    add(body(fresh_run["id"], **items(item(pointer="/" + "k" * 499))))


# ---------------------------------------------------------------- what a body must say


@pytest.mark.parametrize("fields", named(
    ("decisions right alone", {"decisions": "right"}),
    ("decisions wrong with shouldCall", tools("lookup")),
    ("decisions wrong with mustNotCall", must_not_call("search")),
    ("decisions wrong with both lists", {**tools("lookup"), "mustNotCall": ["search"]}),
    ("answer right alone", {"answer": "right"}),
    ("answer right with why", {"answer": "right", "why": "Clear."}),
    ("answer wrong with shouldSay", {"answer": "wrong", "shouldSay": "Clause 9."}),
    ("answer wrong with why", {"answer": "wrong", "why": "Wrong clause."}),
    ("items without pointers", items(item())),
    ("items at the whole output and an element", items(item("a", pointer=""),
                                                       item("b", pointer="/matches/1", rank=0))),
    ("an item inside an element", items(item(pointer="/matches/0/title", verdict="wrong"))),
))  # fmt: skip
def test_a_body_that_gives_a_verdict_properly_is_added(add, fields):
    add(body(**fields))


def test_an_item_pointer_uses_rfc_6901_escapes(add, fresh_run):
    add(body(fresh_run["id"], **items(item(pointer="/a~1b~0c/0"))))


ANY_VERDICT = ("decisions", "answer", "items", "_body")
A_CALL = ("decisions", "shouldCall", "mustNotCall")


@pytest.mark.parametrize(("fields", "field"), named(
    ("no verdict at all", {}, ANY_VERDICT),
    ("only why, no verdict", {"why": "because"}, (*ANY_VERDICT, "why")),
    ("decisions wrong with no calls", {"decisions": "wrong"}, A_CALL),
    ("decisions wrong with empty lists", {**tools(), "mustNotCall": []}, A_CALL),
    ("shouldCall with decisions right", {**tools("t"), "decisions": "right"}, "shouldCall"),
    ("shouldCall without decisions", {"answer": "right", "shouldCall": [{"tool": "t"}]},
     "shouldCall"),
    ("mustNotCall with decisions right", {"decisions": "right", "mustNotCall": ["t"]},
     "mustNotCall"),
    ("mustNotCall without decisions", {"items": [item()], "mustNotCall": ["t"]}, "mustNotCall"),
    ("a tool in both lists", {**tools("a", "t"), "mustNotCall": ["b", "t"]},
     ("shouldCall", "mustNotCall")),
    ("answer wrong alone", {"answer": "wrong"}, ("answer", "shouldSay", "why")),
    ("shouldSay with answer right", {"answer": "right", "shouldSay": "x"}, "shouldSay"),
    ("shouldSay without answer", {"decisions": "right", "shouldSay": "x"}, "shouldSay"),
    ("an item key twice", items(item("k"), item("k", verdict="wrong")), ("items", "items.1.key")),
    ("decisions not a verdict", {"decisions": "maybe"}, "decisions"),
    ("answer not a verdict", {"answer": "RIGHT"}, "answer"),
    ("an item without a verdict", items({"key": "k"}), "items.0.verdict"),
    ("an item without a key", items({"verdict": "right"}), "items.0.key"),
    ("an item rank as a string", items(item(rank="1")), "items.0.rank"),
    ("a call without a tool", should_call({"args": {}}), "shouldCall.0.tool"),
    ("args not an object", with_args(["q"]), "shouldCall.0.args"),
    ("a pointer without a slash", items(item(pointer="matches/0")), "items.0.pointer"),
    ("a pointer with a stray tilde", items(item(pointer="/matches/~2")), "items.0.pointer"),
    ("an empty runId", {"runId": "", "answer": "right"}, "runId"),
    ("a runId not a string", {"runId": 1, "answer": "right"}, "runId"),
    ("an unknown field", {"answer": "right", "foo": 1}, "foo"),
    ("a response-only field", {"answer": "right", "expert": False}, "expert"),
    ("an unknown field in a call", should_call({"tool": "t", "extra": 1}), "shouldCall.0.extra"),
    ("an unknown field in an item", items(item(), item("k2", note="x")), "items.1.note"),
))  # fmt: skip
def test_a_body_breaking_a_rule_is_refused_naming_the_field(refuse, fields, field):
    refuse(body(**fields), field=field)


def test_a_body_without_a_run_id_is_refused(refuse):
    refuse({"answer": "right"}, field="runId")


@pytest.mark.parametrize(
    "pointer", ["/matches/2", "/matches/-", "/matches/01", "/nope", "/answer/0", "/matches/0/x"]
)
def test_an_item_whose_pointer_resolves_to_nothing_is_refused_as_item_not_found(refuse, pointer):
    sent = body(**items(item("ok", pointer="/matches/0"), item("bad", pointer=pointer)))
    err = refuse(sent, code="item-not-found")
    assert "items.1.pointer" in err["details"]["fields"]


def test_an_item_not_found_on_a_run_never_seen_leaves_no_snapshot_behind(refuse, fresh_run):
    refuse(body(fresh_run["id"], **items(item(pointer="/missing"))), code="item-not-found")


# ---------------------------------------------------------------- the body as a whole


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_is_refused_with_415(refuse, content_type):
    data = json.dumps(body(answer="right"))
    refuse(status=415, code="unsupported-media-type", data=data, content_type=content_type)


ARGS_X = (
    '{"runId": "run-1", "decisions": "wrong", "shouldCall": [{"tool": "t", "args": {"x": %s}}]}'
)


@pytest.mark.parametrize("raw", named(
    ("cut short", '{"runId": "run-1", "answer": "right"'),
    ("an array", "[]"),
    ("null", "null"),
    ("a string", '"run-1"'),
    ("NaN, which JSON lacks", ARGS_X % "NaN"),
    ("a number canonical JSON cannot carry", ARGS_X % "1e400"),
))  # fmt: skip
def test_a_body_that_is_not_a_json_object_is_refused(refuse, raw):
    refuse(data=raw, content_type="application/json")


def test_a_json_content_type_with_a_charset_is_accepted(api):
    data = json.dumps(body(answer="right"))
    resp = api.post(cases_url(), data=data, content_type="application/json; charset=utf-8")
    assert resp.status_code == 201, resp.get_json()


def test_args_are_stored_and_returned_as_given_in_their_order(api, add):
    args = {"zeta": 1, "alpha": {"y": [2, 1], "x": None}, "mid": "é", "b": True}
    case = add(body(**should_call({"tool": "lookup", "args": args}, {"tool": "search"})))
    shown = api.get(f"{cases_url()}/{case['id']}").get_json()
    for answered in (case, shown):
        got = answered["expect"]["decisions"]["shouldCall"]
        assert json.dumps(got[0]["args"]) == json.dumps(args)
        assert got[1] == {"tool": "search", "args": {}}


# ---------------------------------------------------------------- the run


@pytest.mark.parametrize(("as_", "agent", "run_id", "status", "code"), named(
    ("an unknown run", "admin", AGENT, "run-nope", 404, "run-not-found"),
    ("another tenant's run", "admin", AGENT, "run-globex", 404, "run-not-found"),
    ("a run of our agent id, asked by another tenant", "globex", AGENT, "run-1", 404,
     "run-not-found"),
    ("another agent's run", "admin", AGENT, "run-multi", 400, "run-not-of-agent"),
    ("a run of ours under another agent", "admin", MULTI, "run-1", 400, "run-not-of-agent"),
    ("a comparison's replay", "admin", AGENT, "run-replay", 400, "run-is-replay"),
    ("a running run", "admin", AGENT, "run-running", 409, "run-not-finished"),
    ("an erased run", "admin", AGENT, "run-erased", 410, "run-erased"),
    ("an unknown agent", "admin", "acme.nope", "run-1", 404, "agent-not-found"),
))  # fmt: skip
def test_a_case_on_a_run_that_cannot_be_one_is_refused(refuse, as_, agent, run_id, status, code):
    refuse(body(run_id, answer="right"), status=status, code=code, agent=agent, as_=as_)


# ---------------------------------------------------------------- who may add


@pytest.mark.parametrize(("as_", "agent", "run_id", "added_by"), named(
    ("publish and read on a one-project agent", "publisher", AGENT, "run-1", "user:u-publisher"),
    ("publish, read and write on a two-project agent", "expert", MULTI, "run-multi",
     "user:u-expert"),
    ("a tenant admin", "admin", MULTI, "run-multi", "user:u-admin"),
    ("another tenant's admin on its own agent", "globex", AGENT, "run-globex", "user:u-globex"),
    ("a service token, recorded as the token", "ci", AGENT, "run-1", "service:tok-ci"),
))  # fmt: skip
def test_a_caller_with_the_permissions_it_needs_adds_a_case(add, as_, agent, run_id, added_by):
    case = add(body(run_id, answer="right"), agent=agent, as_=as_)
    assert "{kind}:{id}".format(**case["addedBy"]) == added_by


@pytest.mark.parametrize(("as_", "agent", "run_id", "needs"), named(
    ("a publisher without write on a two-project agent", "publisher", MULTI, "run-multi",
     {("write", P2)}),
    ("a writer", "writer", AGENT, "run-1", {("publish", AGENT)}),
    ("a reader", "reader", AGENT, "run-1", {("publish", AGENT)}),
    ("a reader of a two-project agent", "reader", MULTI, "run-multi",
     {("publish", MULTI), ("write", P2)}),
    ("a user with no grants", "nobody", AGENT, "run-1", {("publish", AGENT), ("read", P1)}),
))  # fmt: skip
def test_a_caller_lacking_a_permission_is_refused_with_what_it_needs(
    refuse, as_, agent, run_id, needs
):
    err = refuse(body(run_id, answer="right"), status=403, code="forbidden", agent=agent, as_=as_)
    got = {(n["permission"], n.get("project") or n.get("agent")) for n in err["details"]["needs"]}
    assert got == needs


@pytest.mark.parametrize("token", [None, "kgi_expired", "kgi_revoked", "kgi_unknown"])
def test_a_caller_without_a_valid_token_is_refused_with_401(refuse, token):
    refuse(body(answer="right"), status=401, code="unauthenticated", as_=token)


# ---------------------------------------------------------------- what an added case is


FULL = body(
    **should_call({"tool": "lookup", "args": {"id": "m1", "exact": True}}, {"tool": "cite"}),
    mustNotCall=["search"], answer="wrong", shouldSay="Use clause 9.", why="Clause 7 is gone.",
    items=[item("m1", pointer="/matches/1", rank=0),
           item("m0", pointer="/matches/0", rank=1, verdict="wrong")],
)  # fmt: skip


def test_an_added_case_answers_201_with_the_fields_of_the_reference(add):
    started = datetime.now(UTC) - timedelta(seconds=1)
    case = add(FULL)
    assert set(case) == CASE_FIELDS  # no `retired`
    assert case["id"].startswith("case-") and len(case["id"]) > len("case-")
    assert (case["kind"], case["expert"]) == ("hand", True)
    assert (case["projectId"], case["runId"], case["madeOn"]) == (P1, "run-1", "1.1.0")
    assert case["addedBy"] == {"kind": "user", "id": "u-admin"}
    assert case["addedAt"].endswith("Z") and case["updatedAt"] == case["addedAt"]
    assert started <= datetime.fromisoformat(case["addedAt"]) <= datetime.now(UTC)


def test_the_location_header_points_at_the_new_case_and_get_returns_it_with_the_snapshot(api):
    resp = api.post(cases_url(), json=FULL)
    assert resp.status_code == 201, resp.get_json()
    case = resp.get_json()
    location = resp.headers["Location"].removeprefix("http://localhost")
    assert location == f"{cases_url()}/{case['id']}"
    got = api.get(location)
    assert got.status_code == 200, got.get_json()
    shown = got.get_json()
    assert {k: v for k, v in shown.items() if k != "snapshot"} == case
    assert content(shown["snapshot"]) == content(RUN_1)


@pytest.mark.parametrize(("as_", "agent", "run_id", "project", "other"), named(
    ("on a one-project agent", "publisher", AGENT, "run-1", P1, None),
    ("in its run's project only", "expert", MULTI, "run-multi", P2, P3),
))  # fmt: skip
def test_an_added_case_counts_at_once_and_is_listed_first(
    api, add, as_, agent, run_id, project, other
):
    before = {p: counts_of(api, agent, p)["cases"] for p in (project, other) if p}
    case = add(body(run_id, answer="right"), agent=agent, as_=as_)
    assert case["projectId"] == project
    after = {p: counts_of(api, agent, p) for p in before}
    assert after[project]["cases"] == {**before[project], "active": before[project]["active"] + 1}
    assert after[project]["lastAddedAt"] == case["addedAt"]
    if other:
        assert after[other]["cases"] == before[other]
    listed = api.get(f"{cases_url(agent)}?projectId={project}").get_json()["data"]
    assert listed[0] == case


def test_the_first_case_of_a_run_stores_its_snapshot_and_later_cases_share_it(api, add, fresh_run):
    first = add(body(fresh_run["id"], **items(item(pointer="/a~1b~0c"))))
    second = add(body(fresh_run["id"], answer="right"))
    shown = [api.get(f"{cases_url()}/{c['id']}").get_json() for c in (first, second)]
    assert content(shown[0]["snapshot"]) == content(fresh_run)
    assert shown[1]["snapshot"] == shown[0]["snapshot"]


def test_only_a_runs_first_case_marks_it_and_takes_its_snapshot(app, api, add, fresh_run):
    """A later case reads the snapshot its run has: it sends neither the mark nor the
    snapshot's INSERT, which would change nothing (two statements an add, under the lock)."""
    with statements(app) as first:
        add(body(fresh_run["id"], answer="right"))
    with statements(app) as later:
        add(body(fresh_run["id"], **tools("lookup")))

    def taking(sent: list[str]) -> list[str]:
        return [s for s in sent if s.startswith(("UPDATE runs", "INSERT INTO snapshots"))]

    assert len(taking(first)) == 2
    assert taking(later) == []
    listed = api.get(f"/v1/agents/{AGENT}/runs?projectId={P1}&hasCase=true").get_json()["data"]
    assert fresh_run["id"] in [run["id"] for run in listed]


def test_first_cases_of_a_run_added_at_once_all_succeed_and_share_one_snapshot(app, api, fresh_run):
    """The snapshot is taken by whichever case comes first; the others, waiting on it, keep it
    (on PostgreSQL these transactions really overlap)."""
    n = 8
    barrier = threading.Barrier(n)

    def send(i: int):
        client = app.test_client()
        barrier.wait(timeout=10)
        headers = {"Authorization": f"Bearer {TOKENS['admin']}"}
        return client.post(cases_url(), json=body(fresh_run["id"], answer="right"), headers=headers)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(send, range(n), timeout=60))
    assert [a.status_code for a in answers] == [201] * n, [a.get_json() for a in answers]
    shown = [api.get(f"{cases_url()}/{a.get_json()['id']}").get_json() for a in answers]
    assert len({json.dumps(s["snapshot"], sort_keys=True) for s in shown}) == 1
    assert content(shown[0]["snapshot"]) == content(fresh_run)


def test_a_duplicate_is_added_and_names_the_active_cases_of_its_run_it_duplicates(api):
    """docs/reference/add-case.md: `duplicates` names the other active cases of the same run
    whose current expectation is the same; retired ones never count, nor another run's."""
    first = ok(api.post(cases_url(), body(answer="right", why="Fine.")), 201)
    assert "duplicates" not in first
    other_run = ok(api.post(cases_url(), body("run-2", answer="right", why="Fine.")), 201)
    assert "duplicates" not in other_run
    second = ok(api.post(cases_url(), body(answer="right", why="Fine.")), 201)
    assert second["duplicates"] == [first["id"]]
    third = ok(api.post(cases_url(), body(answer="right", why="Fine.")), 201)
    assert third["duplicates"] == sorted([first["id"], second["id"]])
    retire = {"reason": "dup"}
    for case in (first, second):
        ok(api.post(f"{cases_url()}/{case['id']}/retire", retire))
    assert ok(api.post(cases_url(), body(answer="right", why="Fine.")), 201)["duplicates"] == [
        third["id"]
    ]
    assert "duplicates" not in ok(api.post(cases_url(), body(answer="right")), 201)


def test_a_duplicate_is_found_whatever_the_order_of_its_arguments(api):
    """The same expectation as JSON values: arguments given in another order duplicate."""
    call = {"tool": "search", "args": {"q": "lease", "limit": 3}}
    first = ok(api.post(cases_url(), body(**should_call(call))), 201)
    call["args"] = {"limit": 3, "q": "lease"}
    assert ok(api.post(cases_url(), body(**should_call(call))), 201)["duplicates"] == [first["id"]]
    call["args"] = {"limit": 3.5, "q": "lease"}
    assert "duplicates" not in ok(api.post(cases_url(), body(**should_call(call))), 201)


def test_an_answer_names_the_first_hundred_duplicates_by_id(api):
    made = [ok(api.post(cases_url(), body(answer="right")), 201)["id"] for _ in range(101)]
    again = ok(api.post(cases_url(), body(answer="right")), 201)
    assert again["duplicates"] == sorted(made)[:100]
