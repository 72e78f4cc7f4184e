"""Tagging cases over HTTP (docs/design.md §4.5): one case or several at once (all or nothing),
the tags on a case, the cases list's `tag` filter bound into its cursor, and refusals that each
change nothing.

The set is acme.drafting in P1: the world's cor-1 and case-2 active, case-1 retired.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import AGENT, P1, ok, refused, sign_in

from kindgi.service.search import telling_words

V = f"/v1/agents/{AGENT}"
CASES = f"{V}/test-set/cases"


def tag(api, case_id: str, as_: str = "admin", **body: Any):
    return api.post(f"{CASES}/{case_id}/tags", body, as_=as_)


def tag_many(api, case_ids: list[str], **body: Any):
    return api.post(f"{CASES}/tags", {"projectId": P1, "caseIds": case_ids, **body})


def listed(api, tags: str, **more: Any) -> list[str]:
    query = "&".join(f"{k}={v}" for k, v in {"projectId": P1, "tag": tags, **more}.items())
    return [case["id"] for case in ok(api.get(f"{CASES}?{query}"))["data"]]


def test_a_case_shows_its_tags_sorted_and_none_when_it_has_none(api):
    assert "tags" not in ok(api.get(f"{CASES}/case-2"))
    resp = tag(api, "case-2", add=["smoke", "billing", "from-march-2"])
    assert ok(resp)["tags"] == ["billing", "from-march-2", "smoke"]
    assert resp.headers["ETag"] == '"r1"'  # tags are not the expectation
    assert ok(api.get(f"{CASES}/case-2"))["tags"] == ["billing", "from-march-2", "smoke"]
    assert ok(tag(api, "case-2", remove=["smoke"], add=["billing"]))["tags"] == [
        "billing",
        "from-march-2",
    ]
    assert "tags" not in ok(tag(api, "case-2", remove=["billing", "from-march-2"]))
    assert "tags" not in ok(api.get(f"{CASES}/case-2"))


def test_a_retired_case_keeps_and_takes_tags(api):
    assert ok(tag(api, "case-1", add=["old"]))["tags"] == ["old"]
    assert listed(api, "old", include="retired") == ["case-1"]
    assert listed(api, "old") == []


def test_the_list_filters_by_any_of_the_tags_and_binds_them_into_its_cursor(api):
    ok(tag(api, "case-2", add=["billing"]))
    ok(tag(api, "cor-1", add=["smoke"]))
    assert listed(api, "billing") == ["case-2"]
    assert listed(api, "smoke") == ["cor-1"]
    assert sorted(listed(api, "smoke,billing")) == ["case-2", "cor-1"]
    assert listed(api, "nothing-here") == []
    first = ok(api.get(f"{CASES}?projectId={P1}&tag=smoke,billing&limit=1"))
    assert first["hasMore"]
    rest = ok(
        api.get(f"{CASES}?projectId={P1}&tag=smoke,billing&limit=1&cursor={first['nextCursor']}")
    )
    assert [c["id"] for c in first["data"] + rest["data"]] == listed(api, "smoke,billing")
    other = api.get(f"{CASES}?projectId={P1}&tag=smoke&limit=1&cursor={first['nextCursor']}")
    assert refused(other, 400, "bad-input")["details"]["reason"] == "cursor-mismatch"


def test_several_cases_are_tagged_at_once(api):
    both = ok(tag_many(api, ["cor-1", "case-2"], add=["smoke"]))["data"]
    assert [(c["id"], c["tags"]) for c in both] == [("case-2", ["smoke"]), ("cor-1", ["smoke"])]
    assert sorted(listed(api, "smoke")) == ["case-2", "cor-1"]
    ok(tag_many(api, ["cor-1"], remove=["smoke"]))
    assert listed(api, "smoke") == ["case-2"]


def test_every_tag_comes_off_many_cases_at_once(api):
    """60 cases of 20 tags each: taken off by one statement, not an OR of 1,200 pairs (past SQLite's
    expression depth of 1,000, which was a 500)."""
    body = {"runId": "run-2", "answer": "right"}
    ids = [ok(api.post(CASES, body, as_="publisher"), 201)["id"] for _ in range(60)]
    tags = [f"t{i}" for i in range(20)]
    assert all(c["tags"] == sorted(tags) for c in ok(tag_many(api, ids, add=tags))["data"])
    assert all("tags" not in c for c in ok(tag_many(api, ids, remove=tags))["data"])
    assert listed(api, ",".join(tags)) == []


def test_a_tag_never_makes_a_new_version(api):
    first = ok(api.post(f"{V}/test-runs", {"projectId": P1, "candidate": "2"}), 201)
    ok(tag(api, "case-2", add=["smoke"]))
    again = ok(api.post(f"{V}/test-runs", {"projectId": P1, "candidate": "2"}), 201)
    assert again["version"] == first["version"]


TWENTY = [f"t{n:02d}" for n in range(20)]


@pytest.mark.parametrize(
    ("why", "call", "status", "code", "named"),
    [
        ("an upper-case tag", lambda api: tag(api, "case-2", add=["Billing"]), 400,
         "bad-input", "'Billing'"),
        ("a tag starting with a hyphen", lambda api: tag(api, "case-2", add=["ok", "-x"]), 400,
         "bad-input", "'-x'"),
        ("a tag of 41 characters", lambda api: tag(api, "case-2", add=["a" * 41]), 400,
         "bad-input", "a" * 41),
        ("a 21st tag", lambda api: tag(api, "cor-1", add=["t20"]), 400, "bad-input", "'t20'"),
        ("21 tags at once", lambda api: tag(api, "case-2", add=[*TWENTY, "u"]), 400,
         "bad-input", "add"),
        ("nothing to do", lambda api: tag(api, "case-2"), 400, "bad-input", "add"),
        ("a tag added and removed", lambda api: tag(api, "case-2", add=["x"], remove=["x"]),
         400, "bad-input", "Both added and removed: x."),
        ("a reader", lambda api: tag(api, "case-2", as_="reader", add=["x"]), 403, "forbidden",
         ""),
        ("another tenant", lambda api: tag(api, "case-2", as_="globex", add=["x"]), 404,
         "case-not-found", ""),
        ("another tenant's case", lambda api: tag(api, "cor-g", add=["x"]), 404,
         "case-not-found", ""),
        ("an unknown case among several", lambda api: tag_many(api, ["case-2", "case-nope"],
                                                               add=["x"]), 404,
         "case-not-found", "case-nope"),
        ("a bad tag among several", lambda api: tag_many(api, ["case-2"], add=["x", "Y"]), 400,
         "bad-input", "'Y'"),
        ("a 21st tag on one of several", lambda api: tag_many(api, ["case-2", "cor-1"],
                                                              add=["t20"]), 400,
         "bad-input", "cor-1"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)  # fmt: skip
def test_a_refused_tagging_changes_nothing(api, unchanged, why, call, status, code, named):
    ok(tag(api, "cor-1", add=TWENTY))
    with unchanged():
        err = refused(call(api), status, code)
    assert named in str(err.get("details", ""))


def test_a_bad_tag_in_the_filter_is_named(api):
    err = refused(api.get(f"{CASES}?projectId={P1}&tag=ok,No"), 400, "bad-input")
    assert "'No'" in str(err["details"]["fields"]["tag"])


# ---------------------------------------------------------------- test runs on tags

RUNS = f"{V}/test-runs"


def start(api, **body: Any):
    return api.post(RUNS, {"projectId": P1, "candidate": "2.0.0", **body})


def done(api, run: dict[str, Any], calls: dict[str, list[dict[str, Any]]]) -> None:
    """The run finished with the candidate calling `calls[caseId]` (or nothing) for each case."""
    cases = ok(api.get(f"{RUNS}/{run['id']}/cases?limit=100"))["data"]
    sent = [{"caseId": c["caseId"], "output": None, "calls": calls.get(c["caseId"], [])}
            for c in cases]  # fmt: skip
    if ok(api.post(f"{RUNS}/{run['id']}/results", {"results": sent}))["run"]["status"] == "open":
        ok(api.post(f"{RUNS}/{run['id']}/finish", {}))


def test_a_run_on_tags_grades_the_cases_with_any_of_them_in_the_whole_sets_version(api, client):
    whole = ok(start(api), 201)
    ok(tag(api, "cor-1", add=["smoke"]))
    ok(tag(api, "case-1", add=["smoke"]))  # retired: in no version
    some = ok(start(api, tags=["smoke", "billing"]), 201)
    assert some["tags"] == ["billing", "smoke"] and "tags" not in whole
    assert some["version"] == whole["version"]
    assert some["cases"]["total"] == 1
    cases = ok(api.get(f"{RUNS}/{some['id']}/cases?limit=100"))["data"]
    assert [c["caseId"] for c in cases] == ["cor-1"]
    refused(start(api, tags=["nobody-has-it"]), 409, "nothing-to-grade")
    sign_in(client, "admin@acme.test", "admin-pass-1")
    page = client.get(f"/agents/{AGENT}/test-runs/{some['id']}").get_data(as_text=True)
    assert "only the cases tagged billing or smoke" in page
    assert (
        "only the cases tagged" not in client.get(f"/agents/{AGENT}/test-runs/{whole['id']}").text
    )


def test_comparing_runs_on_different_tags_pairs_only_the_cases_both_had(api):
    lookup = {"cor-1": [{"tool": "lookup", "args": {}}]}
    whole = ok(start(api), 201)
    done(api, whole, {})
    ok(tag(api, "cor-1", add=["smoke"]))
    some = ok(start(api, tags=["smoke"], baseline=whole["id"]), 201)
    done(api, some, lookup)
    found = ok(api.get(f"{RUNS}/{some['id']}/compare/{whole['id']}?limit=100"))
    assert found["sharedOnly"] is True
    assert [(p["caseId"], p["change"]) for p in found["data"]] == [("cor-1", "fixed")]
    assert found["counts"]["gone"] == 0 and found["counts"]["new"] == 0
    assert found["counts"]["fixed"] == 1
    same = ok(api.get(f"{RUNS}/{whole['id']}/compare/{whole['id']}"))
    assert "sharedOnly" not in same


def test_a_bad_tag_starts_no_run(api, unchanged):
    with unchanged():
        err = refused(start(api, tags=["ok", "Not-ok"]), 400, "bad-input")
    assert "'Not-ok'" in str(err["details"]["fields"])
    with unchanged():
        refused(start(api, tags=[f"t{n}" for n in range(21)]), 400, "bad-input")


# ---------------------------------------------------------------- look-alikes on the add-case form


def test_the_add_case_form_shows_the_cases_that_look_alike(client, api):
    """Issue 24: the active cases of the run picked, and those expecting a tool typed, each a
    link; retired ones never."""
    ok(api.post(CASES, {"runId": "run-2", "decisions": "wrong", "mustNotCall": ["x"],
                        "shouldCall": [{"tool": "search"}]}), 201)  # fmt: skip
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    form = f"/agents/{AGENT}/test-set/cases/new?projectId={P1}"
    nothing = client.get(form).text
    assert "Cases that look alike" not in nothing
    picked = client.get(f"{form}&runId=run-1").text
    assert "Cases that look alike" in picked
    assert f'href="/agents/{AGENT}/test-set/cases/cor-1"' in picked
    assert '/test-set/cases/case-1"' not in picked  # retired
    typed = client.get(f"{form}&shouldCall-0-tool=search").text
    assert "decisions wrong: call search" in typed


def test_a_case_asked_much_the_same_and_expecting_the_same_tools_looks_alike_first(client, api):
    """Issue 24: past the run's own, the cases that expect the tools typed and whose run was
    asked the picked run's most telling words (run-1 was asked "Draft a lease clause") come
    before those that only expect the same tools."""
    search = {"decisions": "wrong", "shouldCall": [{"tool": "search"}]}
    asked = {"q": "Please draft the lease CLAUSE for a tenant"}
    alike_run = ok(api.post(f"/v1/agents/{AGENT}/runs", {"projectId": P1, "version": "1.0.0",
                                                          "status": "finished", "input": asked}),
                   201)["id"]  # fmt: skip
    alike = ok(api.post(CASES, {"runId": alike_run, **search}), 201)["id"]
    other = ok(api.post(CASES, {"runId": "run-2", **search}), 201)["id"]  # asked "Second"
    elsewhere = ok(api.post(CASES, {"runId": alike_run, "decisions": "right"}), 201)["id"]
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    form = f"/agents/{AGENT}/test-set/cases/new?projectId={P1}&runId=run-1"
    shown = client.get(f"{form}&shouldCall-0-tool=search").text
    listed = re.findall(r'<li><a href="/agents/[^/]+/test-set/cases/([^"]+)"', shown)
    own = [case for case in listed if case in ("cor-1", "case-2")]
    assert listed.index(alike) == len(own) < listed.index(other)  # right after the run's own
    assert elsewhere not in listed  # asked alike, expecting no `search`
    assert telling_words({"q": "Draft a lease clause"}, 3) == ["clause", "draft", "lease"]
