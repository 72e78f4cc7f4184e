"""A test set's health over HTTP (docs/design.md §9.11): always-failing, flaky, never-run and
contradicting cases, and the histogram of pass rates, from the cases' records.

The set is acme.drafting in P1: the world's cor-1 and case-2, and hand cases on run-1 (whose
snapshot called `search`) that each test adds.
"""

from __future__ import annotations

from conftest import AGENT, P1, ok, refused
from test_case_records import full_run

V = f"/v1/agents/{AGENT}"
HEALTH = f"{V}/test-set/health?projectId={P1}"


def add(api, **expect) -> str:
    return ok(api.post(f"{V}/test-set/cases", {"runId": "run-1", **expect}), 201)["id"]


def test_health_names_failing_flaky_never_run_and_contradicting_cases(api):
    wrong = add(api, decisions="right")  # every candidate fails it below
    flaky = add(api, decisions="right")
    for n in range(5):
        full_run(api, "1.0" if n < 2 else f"2.{n}", {wrong: "fail", flaky: "fail" if n else "pass"})
    late = add(api, decisions="right")  # no run has had it
    forbids = add(api, decisions="wrong", mustNotCall=["search"])  # run-1's own call
    says_right = add(api, answer="right")
    says_wrong = add(api, answer="wrong", why="It names the wrong clause.")
    got = ok(api.get(HEALTH))
    assert got["testSetId"] == f"agent.{AGENT}.{P1}"
    assert got["alwaysFailing"] == {"count": 1, "caseIds": [wrong]}
    assert got["flaky"] == {"count": 1, "caseIds": [flaky]}  # 1.0 passed it, then failed it
    assert got["neverRun"] == {
        "count": 4,
        "caseIds": sorted([late, forbids, says_right, says_wrong]),
    }
    contradicting = got["contradicting"]
    pairs = {tuple(pair) for pair in contradicting["pairs"]}
    # decisions right on run-1 expects its `search`, which `forbids` forbids, and it also gives
    # run-1's decisions the opposite verdict; the two answers disagree on the same answer
    assert tuple(sorted([says_right, says_wrong])) in pairs
    assert all(tuple(sorted([c, forbids])) in pairs for c in (wrong, flaky, late))
    # and the world's cor-1 says run-1's decisions were wrong, which the three say were right
    assert all(tuple(sorted([c, "cor-1"])) in pairs for c in (wrong, flaky, late))
    assert contradicting["count"] == 7 and set(contradicting["caseIds"]) == {
        wrong,
        flaky,
        late,
        forbids,
        says_right,
        says_wrong,
        "cor-1",
    }
    bins = {(b["from"], b["to"]): b["count"] for b in got["histogram"]}
    assert len(bins) == 10 and sum(bins.values()) == 4  # cor-1, case-2, wrong, flaky
    assert bins[(0.0, 0.1)] == 1 and bins[(0.2, 0.3)] == 1 and bins[(0.9, 1.0)] == 2


def test_health_is_kept_until_a_case_or_a_run_changes_the_set(api):
    first = ok(api.get(HEALTH))
    assert ok(api.get(HEALTH)) == first
    made = add(api, decisions="right")
    assert made in ok(api.get(HEALTH))["neverRun"]["caseIds"]
    full_run(api, "3.0", {})
    assert made not in ok(api.get(HEALTH))["neverRun"]["caseIds"]
    ok(api.post(f"{V}/test-set/cases/{made}/retire", {"reason": "gone"}))
    after = ok(api.get(HEALTH))
    assert sum(b["count"] for b in after["histogram"]) == 2  # cor-1 and case-2 again


def test_health_needs_a_project(api):
    refused(api.get(f"{V}/test-set/health"), 400, "bad-input")
