"""Test runs over HTTP (docs/design.md §9): freezing versions, a run's life, grading each part,
duplicates and conflicts, finishing and cancelling, comparing with a baseline, the JUnit report.

The set is acme.drafting in P1: the world's cor-1 (decisions wrong: should call `lookup`) and
case-2 (items: k1 right, no pointer), plus four hand cases on run-1 (whose snapshot called
`search` once and output two matches, m0 and m1) that each test adds: see `the_set`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from math import log2
from typing import Any

import pytest
from conftest import AGENT, P1, P2, ok, refused

from kindgi import grading, world
from kindgi.database import db

V = f"/v1/agents/{AGENT}"
RUNS = f"{V}/test-runs"

EXPECTS = {
    # a greedy matcher gives search(q=x) to the first entry and then fails the second
    "D": {
        "decisions": "wrong",
        "shouldCall": [{"tool": "search"}, {"tool": "search", "args": {"q": "x"}}],
        "mustNotCall": ["send_email"],
    },
    "R": {"decisions": "right"},  # the snapshot called `search`
    "I": {
        "items": [
            {"key": "m0", "pointer": "/matches/0", "verdict": "right"},
            {"key": "m1", "pointer": "/matches/1", "verdict": "wrong"},
        ]
    },
    "A": {"answer": "right"},
}
GOOD_CALLS = [{"tool": "search", "args": {"q": "x"}}, {"tool": "search", "args": {"q": "y"}}]
GOOD_OUTPUT = {"matches": [{"id": "m0"}, {"id": "m1"}]}


def the_set(api) -> dict[str, str]:
    """Add the four hand cases; their ids by name, with the world's two active cases."""
    ids = {"cor-1": "cor-1", "case-2": "case-2"}
    for name, expect in EXPECTS.items():
        ids[name] = ok(api.post(f"{V}/test-set/cases", {"runId": "run-1", **expect}), 201)["id"]
    return ids


def start(api, as_: str = "admin", **body: Any) -> dict[str, Any]:
    return ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0", **body}, as_=as_), 201)


def send(api, run_id: str, results: list[dict[str, Any]], **kw: Any):
    return api.post(f"{RUNS}/{run_id}/results", {"results": results}, **kw)


def result(case_id: str, output: Any = None, calls: Any = None, **more: Any) -> dict[str, Any]:
    return {"caseId": case_id, "output": output, "calls": calls or [], **more}


def passing(ids: dict[str, str]) -> list[dict[str, Any]]:
    """A candidate that passes every case it can: the answer stays ungraded (no judge)."""
    return [
        result(ids["D"], GOOD_OUTPUT, GOOD_CALLS),
        result(ids["R"], GOOD_OUTPUT, [{"tool": "search", "args": {"q": "other"}}]),
        result(ids["I"], GOOD_OUTPUT),
        result(ids["A"], {"answer": "Use clause 7."}),
        result("cor-1", None, [{"tool": "lookup", "args": {}}]),
        result("case-2", None, ranked=["k1"]),
    ]


def outcomes(api, run_id: str) -> dict[str, str]:
    rows = ok(api.get(f"{RUNS}/{run_id}/results?limit=100"))["data"]
    return {row["caseId"]: row["outcome"] for row in rows}


# ---------------------------------------------------------------- versions


def test_starting_a_run_freezes_the_set_and_an_unchanged_set_reuses_its_version(api):
    counts = ok(api.get(f"{V}/test-set?projectId={P1}"))
    assert "frozenVersion" not in counts
    ids = the_set(api)
    first = start(api)
    assert first["version"] == "v1" and first["status"] == "open"
    assert first["testSetId"] == f"agent.{AGENT}.{P1}"
    assert first["cases"] == {
        "total": 6, "awaiting": 6, "pass": 0, "fail": 0, "error": 0, "pending": 0, "ungraded": 0
    }  # fmt: skip
    assert start(api, candidate="2.0.1")["version"] == "v1"
    counts = ok(api.get(f"{V}/test-set?projectId={P1}"))
    assert counts["frozenVersion"] == {"testSetId": f"agent.{AGENT}.{P1}", "version": "v1"}
    versions = ok(api.get(f"{V}/test-set/versions?projectId={P1}"))["data"]
    assert [(v["version"], v["cases"]) for v in versions] == [("v1", {"total": 6, "expert": 5})]
    assert versions[0]["frozenBy"] == {"kind": "user", "id": "u-admin"}
    runner = ok(api.get(f"{RUNS}/{first['id']}/cases"))["data"]
    assert sorted(row["caseId"] for row in runner) == sorted(ids.values())


def test_every_change_makes_a_new_version_and_the_diff_names_what_changed(api):
    ids = the_set(api)
    start(api)
    added = ok(api.post(f"{V}/test-set/cases", {"runId": "run-2", "answer": "right"}), 201)["id"]
    assert start(api)["version"] == "v2"
    ok(api.post(f"{V}/test-set/cases/{ids['A']}/retire", {"reason": "stale"}))
    ok(api.post(f"{V}/test-set/cases/{ids['A']}/restore", {}))
    assert start(api)["version"] == "v3"  # the same cases, but the set changed twice
    ok(api.post(f"{V}/test-set/cases/{ids['R']}/retire", {"reason": "stale"}))
    assert start(api)["version"] == "v4"
    diff = ok(api.get(f"{V}/test-set/versions/v4/diff/v1?projectId={P1}"))
    assert diff["counts"] == {"added": 1, "removed": 1, "changed": 0}
    assert diff["data"] == sorted(
        [
            {"caseId": added, "change": "added", "kind": "hand", "expert": True},
            {"caseId": ids["R"], "change": "removed", "kind": "hand", "expert": True},
        ],
        key=lambda row: row["caseId"],
    )
    only_removed = ok(api.get(f"{V}/test-set/versions/v4/diff/v1?projectId={P1}&change=removed"))
    assert [r["caseId"] for r in only_removed["data"]] == [ids["R"]]
    assert only_removed["counts"] == {"added": 1, "removed": 1, "changed": 0}  # never filtered
    versions = ok(api.get(f"{V}/test-set/versions?projectId={P1}&limit=2"))
    assert [v["version"] for v in versions["data"]] == ["v4", "v3"]
    rest = ok(
        api.get(f"{V}/test-set/versions?projectId={P1}&limit=2&cursor={versions['nextCursor']}")
    )
    assert [v["version"] for v in rest["data"]] == ["v2", "v1"] and not rest["hasMore"]
    refused(api.get(f"{V}/test-set/versions/v9/diff/v1?projectId={P1}"), 404, "version-not-found")


# ---------------------------------------------------------------- a run's life


def test_a_runner_gets_each_cases_input_and_parts_and_resumes_with_the_awaiting_ones(api):
    ids = the_set(api)
    run = start(api)
    rows = ok(api.get(f"{RUNS}/{run['id']}/cases?limit=4"))
    assert [row["caseId"] for row in rows["data"]] == sorted(ids.values())[:4]
    rest = ok(api.get(f"{RUNS}/{run['id']}/cases?limit=4&cursor={rows['nextCursor']}"))
    every = {row["caseId"]: row for row in rows["data"] + rest["data"]}
    assert every[ids["D"]] == {
        "caseId": ids["D"],
        "kind": "hand",
        "expert": True,
        "input": {"q": "Draft a lease clause"},
        "parts": ["decisions"],
    }
    assert every["cor-1"]["kind"] == "correction" and every["cor-1"]["expert"] is False
    ok(send(api, run["id"], [result(ids["A"], "x")]))
    awaiting = ok(api.get(f"{RUNS}/{run['id']}/cases?awaiting=true&limit=100"))["data"]
    assert ids["A"] not in {row["caseId"] for row in awaiting} and len(awaiting) == 5


def test_results_are_graded_exactly_and_the_run_is_done_when_the_last_one_arrives(api):
    ids = the_set(api)
    run = start(api)
    sent = ok(send(api, run["id"], passing(ids)[:3]))
    assert (sent["accepted"], sent["duplicates"], sent["run"]["status"]) == (3, 0, "open")
    done = ok(send(api, run["id"], passing(ids)[3:]))["run"]
    assert done["status"] == "done" and done["finishedAt"]
    assert outcomes(api, run["id"]) == {
        ids["D"]: "pass", ids["R"]: "pass", ids["I"]: "pass", ids["A"]: "ungraded",
        "cor-1": "pass", "case-2": "pass",
    }  # fmt: skip
    assert done["cases"] == {
        "total": 6, "awaiting": 0, "pass": 5, "fail": 0, "error": 0, "pending": 0, "ungraded": 1
    }  # fmt: skip
    assert done["parts"] == {
        "decisions": {"pass": 3, "fail": 0, "error": 0},
        "answer": {"pass": 0, "fail": 0, "error": 0, "pending": 0, "ungraded": 1},
        # I ranks m0 (right) then m1 (wrong): its score is its ideal, 1 / (1 + 1/log2(3))
        "items": {"pass": 2, "fail": 0, "error": 0, "meanScore": (1 / (1 + 1 / log2(3)) + 1) / 2},
    }
    low, high = grading.wilson(5, 5)
    assert done["passRate"] == {"value": 1.0, "low": low, "high": high}
    assert ok(api.get(f"{RUNS}/{run['id']}")) == done


@pytest.mark.parametrize(
    ("name", "sent", "part", "explained"),
    [
        (  # one call of search, not two distinct ones; and a banned call
            "D",
            result("", GOOD_OUTPUT, [{"tool": "search", "args": {"q": "x"}},
                                     {"tool": "send_email", "args": {}}]),
            "decisions",
            {"forbidden": ["send_email"], "extra": []},
        ),
        (  # true is not 1: no call matches the entry with args
            "D",
            result("", GOOD_OUTPUT, [{"tool": "search", "args": {"q": True}},
                                     {"tool": "search", "args": {"q": "y"}}]),
            "decisions",
            {"forbidden": []},
        ),
        ("R", result("", None, [{"tool": "lookup", "args": {}}]), "decisions",
         {"expected": ["search"], "missing": ["search"], "extra": ["lookup"]}),
        # m1 (wrong) first: score 0.387 < 0.8 of the ideal 0.613
        ("I", result("", {"matches": [{"id": "m1"}, {"id": "m0"}]}), "items",
         {"k": 2, "unjudged": []}),
        # K is the expectation's 2: a right item third in a longer list does not count
        ("I", result("", None, ranked=["zz", "m1", "m0"]), "items", {"k": 2, "unjudged": ["zz"]}),
    ],
)  # fmt: skip
def test_a_failing_result_is_explained_part_by_part(api, name, sent, part, explained):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], [{**sent, "caseId": ids[name]}]))
    shown = ok(api.get(f"{RUNS}/{run['id']}/results/{ids[name]}"))
    assert shown["outcome"] == "fail"
    assert shown["parts"][part]["outcome"] == "fail"
    assert explained.items() <= shown["parts"][part].items()
    assert shown["expect"] == ok(api.get(f"{V}/test-set/cases/{ids[name]}"))["expect"]
    assert shown["snapshot"]["input"] == {"q": "Draft a lease clause"}
    assert shown["calls"] == sent["calls"]


def test_a_candidates_error_and_a_missing_ranked_list_are_errors_with_their_reason(api):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], [{"caseId": ids["D"], "error": "timed out after 30 s"},
                             result("case-2", {"no": "list"})]))  # fmt: skip
    rows = {r["caseId"]: r for r in ok(api.get(f"{RUNS}/{run['id']}/results"))["data"]}
    assert (rows[ids["D"]]["outcome"], rows[ids["D"]]["reason"]) == (
        "error",
        "timed out after 30 s",
    )
    assert rows[ids["D"]]["parts"] == {}
    assert (rows["case-2"]["outcome"], rows["case-2"]["reason"]) == ("error", "no-ranked-list")
    shown = ok(api.get(f"{RUNS}/{run['id']}"))
    assert shown["cases"]["error"] == 2
    assert shown["parts"]["items"]["error"] == 1 and shown["parts"]["decisions"]["error"] == 0
    assert "passRate" not in shown  # nothing passed or failed yet
    awaiting = ok(api.get(f"{RUNS}/{run['id']}/results/{ids['A']}"))
    assert awaiting["outcome"] == "awaiting"


def test_a_repeated_batch_is_a_no_op_even_once_the_run_is_done(api, unchanged):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)))
    again = [dict(r, calls=r["calls"]) for r in passing(ids)]
    again[0]["output"] = {"matches": [{"id": "m0"}, {"id": "m1"}]}  # the same JSON value
    with unchanged():
        replay = ok(send(api, run["id"], again))
    assert (replay["accepted"], replay["duplicates"], replay["run"]["status"]) == (0, 6, "done")
    with unchanged():
        refused(send(api, run["id"], [result(ids["A"], "else")]), 409, "test-run-closed")


def test_a_result_that_differs_from_the_kept_one_is_a_conflict_and_changes_nothing(api, unchanged):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], [result(ids["A"], "first")]))
    with unchanged():
        err = refused(
            send(api, run["id"], [result(ids["R"], "new"), result(ids["A"], "second")]),
            409,
            "result-conflict",
        )
    assert err["details"] == {"caseIds": [ids["A"]]}
    assert ok(api.get(f"{RUNS}/{run['id']}"))["cases"]["awaiting"] == 5


def test_a_batch_naming_a_case_not_in_the_run_is_refused_whole(api, unchanged):
    ids = the_set(api)
    run = start(api)
    with unchanged():
        err = refused(
            send(api, run["id"], [result(ids["A"], "x"), result("case-1", "x")]), 400, "bad-input"
        )  # case-1 is retired: in no version
    assert err["details"]["fields"] == {"results.1.caseId": ["Not a case of this test run."]}


def test_finishing_makes_the_awaiting_cases_errors_and_closes_the_run(api, unchanged):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)[:2]))
    done = ok(api.post(f"{RUNS}/{run['id']}/finish", {}))
    assert done["status"] == "done"
    assert done["cases"] == {
        "total": 6, "awaiting": 0, "pass": 2, "fail": 0, "error": 4, "pending": 0, "ungraded": 0
    }  # fmt: skip
    reasons = {
        r["caseId"]: r.get("reason") for r in ok(api.get(f"{RUNS}/{run['id']}/results"))["data"]
    }
    assert reasons["cor-1"] == "no-result"
    with unchanged():
        refused(api.post(f"{RUNS}/{run['id']}/finish", {}), 409, "test-run-closed")
        err = refused(api.post(f"{RUNS}/{run['id']}/cancel", {}), 409, "test-run-closed")
    assert err["details"] == {"status": "done"}


def test_a_canceled_run_takes_no_more_results(api):
    ids = the_set(api)
    run = start(api)
    canceled = ok(api.post(f"{RUNS}/{run['id']}/cancel", {}))
    assert canceled["status"] == "canceled" and canceled["finishedAt"]
    refused(send(api, run["id"], passing(ids)[:1]), 409, "test-run-closed")
    refused(api.post(f"{RUNS}/{run['id']}/finish", {}), 409, "test-run-closed")


def test_the_results_list_filters_by_outcome_and_part_and_pages_by_case_id(api):
    ids = the_set(api)
    run = start(api)
    results = passing(ids)
    results[0] = result(ids["D"], None, [])  # fails
    ok(send(api, run["id"], results))
    url = f"{RUNS}/{run['id']}/results"
    assert [r["caseId"] for r in ok(api.get(f"{url}?outcome=fail"))["data"]] == [ids["D"]]
    assert {r["caseId"] for r in ok(api.get(f"{url}?outcome=ungraded,fail"))["data"]} == {
        ids["D"],
        ids["A"],
    }
    items = ok(api.get(f"{url}?part=items"))["data"]
    assert {r["caseId"] for r in items} == {ids["I"], "case-2"}
    assert ok(api.get(f"{url}?part=decisions&outcome=pass"))["data"][0]["caseId"] in {
        ids["R"],
        "cor-1",
    }
    seen, cursor = [], None
    while True:
        page = ok(api.get(f"{url}?limit=2" + (f"&cursor={cursor}" if cursor else "")))
        seen += [r["caseId"] for r in page["data"]]
        if not page["hasMore"]:
            break
        cursor = page["nextCursor"]
    assert seen == sorted(ids.values())
    other = start(api)
    refused(api.get(f"{RUNS}/{other['id']}/results?cursor={cursor}"), 400, "bad-input")


# ---------------------------------------------------------------- comparing


def test_a_run_compared_with_its_baseline_counts_regressions_and_fixes_with_a_p_value(api):
    ids = the_set(api)
    base = start(api, candidate="1.0.0")
    first = passing(ids)
    first[1] = result(ids["R"], None, [])  # R fails in the baseline
    ok(send(api, base["id"], first))
    run = start(api, candidate="2.0.0", baseline=base["id"])
    assert run["comparison"] == {
        "baseline": base["id"], "regressed": 0, "fixed": 0, "stillFailing": 0, "stillPassing": 0,
        "new": 0, "gone": 0, "errored": 0, "ungraded": 6,
    }  # fmt: skip
    second = passing(ids)
    second[0] = result(ids["D"], None, [])  # D regresses; R is fixed
    second[4] = {"caseId": "cor-1", "error": "crashed"}
    done = ok(send(api, run["id"], second))["run"]
    want = {"regressed": 1, "fixed": 1, "stillFailing": 0, "stillPassing": 2, "new": 0,
            "gone": 0, "errored": 1, "ungraded": 1}  # fmt: skip
    assert done["comparison"] == {"baseline": base["id"], **want}
    compared = ok(api.get(f"{RUNS}/{run['id']}/compare/{base['id']}"))
    assert compared["counts"] == want
    assert compared["pValue"] == 1.0  # one each way: nothing to tell from noise
    changes = {row["caseId"]: row["change"] for row in compared["data"]}
    assert changes[ids["D"]] == "regressed" and changes[ids["R"]] == "fixed"
    assert changes["cor-1"] == "errored" and changes[ids["A"]] == "ungraded"
    row = next(r for r in compared["data"] if r["caseId"] == ids["D"])
    assert (row["outcome"], row["baselineOutcome"]) == ("fail", "pass")
    items = next(r for r in compared["data"] if r["caseId"] == ids["I"])
    assert items["itemsDelta"] == 0
    only = ok(api.get(f"{RUNS}/{run['id']}/compare/{base['id']}?change=regressed,fixed"))
    assert {r["caseId"] for r in only["data"]} == {ids["D"], ids["R"]}
    assert only["counts"] == want  # never filtered
    back = ok(api.get(f"{RUNS}/{base['id']}/compare/{run['id']}"))  # no kept comparison
    assert (back["counts"]["regressed"], back["counts"]["fixed"]) == (1, 1)


def test_cases_only_in_one_run_are_new_or_gone(api):
    ids = the_set(api)
    base = start(api, candidate="1.0.0")
    ok(send(api, base["id"], passing(ids)))
    ok(api.post(f"{V}/test-set/cases/{ids['A']}/retire", {"reason": "stale"}))
    added = ok(api.post(f"{V}/test-set/cases", {"runId": "run-2", "answer": "right"}), 201)["id"]
    run = start(api, baseline=base["id"])
    assert (run["comparison"]["new"], run["comparison"]["gone"]) == (1, 1)
    compared = ok(api.get(f"{RUNS}/{run['id']}/compare/{base['id']}?change=new,gone"))
    assert {(r["caseId"], r["change"]) for r in compared["data"]} == {
        (added, "new"),
        (ids["A"], "gone"),
    }
    gone = next(r for r in compared["data"] if r["change"] == "gone")
    assert (gone["outcome"], gone["baselineOutcome"]) == (None, "ungraded")


def test_a_baseline_must_be_a_done_run_of_the_same_test_set(api, unchanged):
    the_set(api)
    open_run = start(api)
    with unchanged():
        refused(api.post(RUNS, {"projectId": P1, "candidate": "x", "baseline": open_run["id"]}),
                409, "test-runs-not-comparable")  # fmt: skip
        refused(api.post(RUNS, {"projectId": P1, "candidate": "x", "baseline": "trun-nope"}),
                404, "test-run-not-found")  # fmt: skip
        refused(api.get(f"{RUNS}/{open_run['id']}/compare/trun-nope"), 404, "test-run-not-found")


# ---------------------------------------------------------------- narrowing a run


def test_a_rerun_grades_the_failed_cases_again_on_the_same_version(api):
    ids = the_set(api)
    base = start(api)
    results = passing(ids)
    results[0] = result(ids["D"], None, [])
    results[4] = {"caseId": "cor-1", "error": "crashed"}
    ok(send(api, base["id"], results))
    ok(api.post(f"{V}/test-set/cases", {"runId": "run-2", "answer": "right"}), 201)
    failed = start(api, rerunOf=base["id"], only="failed")
    assert (failed["version"], failed["cases"]["total"], failed["only"]) == ("v1", 1, ["failed"])
    both = start(api, rerunOf=base["id"])
    assert both["cases"]["total"] == 2 and both["only"] == ["errored", "failed"]
    runner = ok(api.get(f"{RUNS}/{both['id']}/cases"))["data"]
    assert {row["caseId"] for row in runner} == {ids["D"], "cor-1"}
    experts = start(api, rerunOf=base["id"], weighting="experts-only")
    assert experts["cases"]["total"] == 1  # cor-1 is no expert case


def test_a_run_with_nothing_to_grade_is_refused_and_leaves_no_version(api, unchanged):
    ids = the_set(api)
    base = start(api)
    ok(send(api, base["id"], passing(ids)))
    with unchanged():
        refused(api.post(RUNS, {"projectId": P1, "candidate": "x", "rerunOf": base["id"],
                                "only": "errored"}), 409, "nothing-to-grade")  # fmt: skip
        refused(api.post(RUNS, {"projectId": P1, "candidate": "x", "only": "failed"}),
                400, "bad-input")  # fmt: skip


def test_an_experts_only_run_takes_the_expert_cases_alone(api):
    ids = the_set(api)
    run = start(api, weighting="experts-only")
    runner = ok(api.get(f"{RUNS}/{run['id']}/cases?limit=100"))["data"]
    assert {row["caseId"] for row in runner} == set(ids.values()) - {"cor-1"}


# ---------------------------------------------------------------- reading runs, reports, access


def test_runs_are_listed_newest_first_and_by_candidate(api):
    the_set(api)
    first, second = start(api, candidate="1.0.0"), start(api, candidate="2.0.0")
    listed = ok(api.get(f"{RUNS}?projectId={P1}"))["data"]
    assert [run["id"] for run in listed] == [second["id"], first["id"]]
    only = ok(api.get(f"{RUNS}?projectId={P1}&candidate=1.0.0"))["data"]
    assert [run["id"] for run in only] == [first["id"]]


def test_the_junit_report_counts_as_the_run_does(api):
    ids = the_set(api)
    run = start(api)
    results = passing(ids)
    results[0] = result(ids["D"], None, [{"tool": "send_email", "args": {}}])
    results[4] = {"caseId": "cor-1", "error": 'crashed <badly> & "loudly"'}
    ok(send(api, run["id"], results))
    resp = api.get(f"{RUNS}/{run['id']}/report.xml")
    assert resp.status_code == 200 and resp.mimetype == "application/xml"
    suite = ET.fromstring(resp.data)
    counted = [suite.get(name) for name in ("tests", "failures", "errors", "skipped")]
    assert counted == ["6", "1", "1", "1"]
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == set(ids.values())
    assert {case.get("classname") for case in cases.values()} == {f"agent.{AGENT}.{P1}"}
    assert "send_email" in cases[ids["D"]].find("failure").get("message")
    assert cases["cor-1"].find("error").get("message") == 'crashed <badly> & "loudly"'
    assert cases[ids["A"]].find("skipped") is not None and len(cases[ids["R"]]) == 0


def test_a_run_is_read_by_readers_started_by_writers_and_hidden_from_other_tenants(api):
    the_set(api)
    refused(api.post(RUNS, {"projectId": P1, "candidate": "x"}, as_="reader"), 403, "forbidden")
    run = start(api, as_="writer")
    assert ok(api.get(f"{RUNS}/{run['id']}", as_="reader"))["id"] == run["id"]
    refused(api.get(f"{RUNS}/{run['id']}", as_="globex"), 404, "test-run-not-found")
    refused(api.post(RUNS, {"projectId": P2, "candidate": "x"}), 404, "project-not-found")


def test_starting_a_run_again_with_its_idempotency_key_answers_the_same_run(api):
    the_set(api)
    body = {"projectId": P1, "candidate": "2.0.0"}
    first = api.post(RUNS, body, headers={"Idempotency-Key": "start-1"})
    again = api.post(RUNS, body, headers={"Idempotency-Key": "start-1"})
    assert again.data == first.data and again.headers["Idempotent-Replayed"] == "true"
    assert len(ok(api.get(f"{RUNS}?projectId={P1}"))["data"]) == 1


def test_a_world_file_loads_test_runs_as_a_runner_makes_them(app, api):
    results = [
        {"caseId": "cor-1", "output": None, "calls": [{"tool": "lookup"}]},
        {"caseId": "case-2", "output": None, "calls": [], "ranked": ["nope"]},
    ]
    runs = [
        {"id": "trun-w1", "agent": AGENT, "project": P1, "candidate": "1.0.0", "by": "u-writer",
         "at": "2026-11-01T10:00:00Z", "results": results},
        {"id": "trun-w2", "agent": AGENT, "project": P1, "candidate": "1.1.0", "by": "u-writer",
         "baseline": "trun-w1", "results": results[:1], "finished": True},
    ]  # fmt: skip
    with app.app_context():
        assert world.load({"testRuns": runs})["test runs"] == 2
        db.session.commit()
    first = ok(api.get(f"{RUNS}/trun-w1"))
    assert (first["status"], first["createdAt"], first["createdBy"]) == (
        "done",
        "2026-11-01T10:00:00Z",
        {"kind": "user", "id": "u-writer"},
    )
    assert outcomes(api, "trun-w1") == {"cor-1": "pass", "case-2": "fail"}
    second = ok(api.get(f"{RUNS}/trun-w2"))
    assert second["comparison"]["stillPassing"] == 1 and second["comparison"]["errored"] == 1
    retired = [{"caseId": "case-1", "output": 1, "calls": []}]  # in no version
    with app.app_context(), pytest.raises(world.WorldError, match=r"testRuns\[0\].*caseId"):
        world.load({"testRuns": [{**runs[0], "id": "trun-w3", "results": retired}]})
