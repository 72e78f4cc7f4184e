"""Quick runs over HTTP (docs/design.md §9.9): a test run over a sample of its version's cases,
stratified by the cases' history, with an estimate of the full pass rate once it is done.

The set is acme.drafting in P1: the world's two active cases (cor-1, case-2) and 30 hand cases
on run-1 that each expect a call to `search` (see `the_set`).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import AGENT, P1, ok, refused, sign_in
from sqlalchemy import func

from kindgi import models
from kindgi.database import db
from kindgi.runner import Grader

V = f"/v1/agents/{AGENT}"
RUNS = f"{V}/test-runs"
HAND = 30


def the_set(api) -> list[str]:
    """Add the hand cases; every active case's id."""
    made = [
        ok(api.post(f"{V}/test-set/cases", {"runId": "run-1", "decisions": "right"}), 201)["id"]
        for _ in range(HAND)
    ]
    return ["cor-1", "case-2", *made]


def answer(case_id: str, passes: bool) -> dict[str, Any]:
    """A result that passes or fails the case."""
    if case_id == "cor-1":
        return {"caseId": case_id, "output": None, "calls": [{"tool": "lookup" if passes else "x"}]}
    if case_id == "case-2":
        return {"caseId": case_id, "output": None, "calls": [], "ranked": ["k1" if passes else "z"]}
    calls = [{"tool": "search", "args": {"q": "x"}}] if passes else []
    return {"caseId": case_id, "output": None, "calls": calls}


def start(api, **body: Any) -> dict[str, Any]:
    return ok(api.post(RUNS, {"projectId": P1, "candidate": "2.0.0", **body}), 201)


def cases_of(api, run_id: str) -> list[str]:
    return [row["caseId"] for row in ok(api.get(f"{RUNS}/{run_id}/cases?limit=500"))["data"]]


def grade(api, run_id: str, passing: set[str]) -> dict[str, Any]:
    """Send every case's result (passing the ones named) and finish: the run."""
    results = [answer(c, c in passing) for c in cases_of(api, run_id)]
    ok(api.post(f"{RUNS}/{run_id}/results", {"results": results}))
    return ok(api.get(f"{RUNS}/{run_id}"))


def test_a_quick_run_grades_its_sample_and_estimates_the_full_pass_rate(api):
    ids = the_set(api)
    run = start(api, sample={"size": 10, "seed": 7})
    assert run["sample"] == {"size": 10, "seed": 7, "population": len(ids)}
    assert run["cases"]["total"] == 10 and "estimate" not in run
    drawn = cases_of(api, run["id"])
    assert len(drawn) == 10 and set(drawn) <= set(ids)
    # the same seed draws the same cases (the set unchanged, its version reused)
    assert cases_of(api, start(api, sample={"size": 10, "seed": 7})["id"]) == drawn
    assert cases_of(api, start(api, sample={"size": 10, "seed": 8})["id"]) != drawn
    passing = set(drawn[:7])
    done = grade(api, run["id"], passing)
    assert done["status"] == "done"
    assert done["passRate"]["value"] == 0.7
    got = done["estimate"]
    # no history: a plain random sample, whose estimate is the sample's rate
    assert got["passRate"] == pytest.approx(0.7)
    assert 0.3 < got["low"] < 0.7 < got["high"] < 1


def test_the_run_page_says_a_quick_runs_sample_and_its_estimate(api, client):
    ids = the_set(api)
    run = start(api, sample={"size": 10, "seed": 7})
    sign_in(client, "admin@acme.test", "admin-pass-1")
    page = f"/agents/{AGENT}/test-runs/{run['id']}"
    waiting = client.get(page).get_data(as_text=True)
    assert f"10 of {len(ids)} cases, seed 7; the full pass rate is estimated once" in waiting
    done = grade(api, run["id"], set(cases_of(api, run["id"])[:7]))
    low, high = (f"{done['estimate'][k] * 100:.1f}" for k in ("low", "high"))
    shown = client.get(page).get_data(as_text=True)
    assert f"estimated at 70.0 % (95 % interval {low} to {high} %)" in shown


def test_a_server_picks_the_seed_when_none_is_given(api):
    the_set(api)
    run = start(api, sample={"size": 5})
    assert isinstance(run["sample"]["seed"], int) and run["sample"]["seed"] >= 0


@pytest.mark.parametrize(
    ("sample", "field"),
    [
        ({"size": 0}, "sample.size"),
        ({"size": -3}, "sample.size"),
        ({"size": 32}, "sample.size"),  # the whole set is no sample
        ({"size": 1000}, "sample.size"),
        ({"size": "10"}, "sample.size"),
        ({"size": True}, "sample.size"),
        ({"size": 10.5}, "sample.size"),
        ({"seed": 3}, "sample.size"),
        ({"size": 10, "seed": -1}, "sample.seed"),
        ({"size": 10, "colour": "red"}, "sample.colour"),
        ([10], "sample._body"),
    ],
)
def test_a_sample_not_below_the_set_or_malformed_is_refused_and_changes_nothing(
    api, unchanged, sample, field
):
    the_set(api)
    with unchanged():
        body = refused(
            api.post(RUNS, {"projectId": P1, "candidate": "2.0.0", "sample": sample}),
            400,
            "bad-input",
        )
    assert field in body["details"]["fields"]


def test_a_sample_does_not_go_with_a_rerun(api, unchanged):
    ids = the_set(api)
    full = grade(api, start(api)["id"], set(ids[:20]))
    with unchanged():
        body = refused(
            api.post(
                RUNS,
                {"projectId": P1, "candidate": "x", "rerunOf": full["id"], "sample": {"size": 3}},
            ),
            400,
            "bad-input",
        )
    assert "sample" in body["details"]["fields"]


def test_with_history_the_sample_is_stratified_by_past_pass_rate(app, api):
    ids = the_set(api)
    always, never = set(ids[:16]), set(ids[16:])
    for _ in range(2):
        grade(api, start(api)["id"], always)
    # a quick run that passes everything is no history: its cases keep their bands
    grade(api, start(api, sample={"size": 20, "seed": 2})["id"], set(ids))
    run = start(api, sample={"size": 8, "seed": 1})
    with app.app_context():
        strata = db.session.query(models.TestRun).filter_by(id=run["id"]).one().sample["strata"]
    # every case passed always or never: strata by part and band (cor-1 is graded on its
    # decisions, case-2 on its items), each with two cases at least when it has them
    assert {name: population for name, population, _, _ in strata} == {
        "decisions|0": 16,
        "decisions|≤1": 15,
        "items|≤1": 1,
    }
    assert sum(drawn for _, _, drawn, _ in strata) == 8
    assert all(drawn >= min(2, population) for _, population, drawn, _ in strata)
    drawn = cases_of(api, run["id"])
    assert len(set(drawn) & never) >= 2 and len(set(drawn) & always) >= 2


def test_comparing_a_quick_run_with_a_full_one_pairs_only_the_cases_they_share(api):
    ids = the_set(api)
    full = grade(api, start(api)["id"], set(ids[:20]))
    quick = start(api, sample={"size": 6, "seed": 3}, baseline=full["id"])
    assert "comparison" not in quick  # counted when asked: a sample's pairs are few
    drawn = cases_of(api, quick["id"])
    grade(api, quick["id"], set(ids))  # the candidate passes all
    both = ok(api.get(f"{RUNS}/{quick['id']}/compare/{full['id']}?limit=100"))
    assert both["sharedOnly"] is True
    assert sorted(row["caseId"] for row in both["data"]) == sorted(drawn)
    counts = both["counts"]
    assert counts["new"] == counts["gone"] == 0
    assert counts["fixed"] == len(set(drawn) - set(ids[:20]))
    assert counts["fixed"] + counts["stillPassing"] == 6
    # the other way round too; and two full runs still count what only one had
    back = ok(api.get(f"{RUNS}/{full['id']}/compare/{quick['id']}?change=gone,fixed"))
    assert back["sharedOnly"] is True and back["counts"]["gone"] == 0
    assert all(row["change"] != "gone" for row in back["data"])
    other = ok(api.get(f"{RUNS}/{full['id']}/compare/{full['id']}"))
    assert "sharedOnly" not in other


@pytest.mark.parametrize(
    ("low", "high", "failed", "unsure"),
    [(0.82, 0.9, [], None), (0.6, 0.79, ["estimated"], None), (0.7, 0.9, [], "estimated")],
)
def test_the_commands_gate_on_a_quick_run_reads_the_interval(low, high, failed, unsure):
    """`kindgi test-run --sample N --min-pass-rate 0.8`: passes, fails (exit 1) or can't tell
    (exit 3), from the estimate's interval."""
    said: list[str] = []
    run = {"sample": {}, "estimate": {"passRate": (low + high) / 2, "low": low, "high": high}}
    got = Grader.quick_gate(run, 0.8, said)
    assert [line.split()[0] for line in said] == failed
    assert (got or "").split(" ")[0] == (unsure or "")
    missing: list[str] = []
    assert Grader.quick_gate({"sample": {}}, 0.8, missing) is None
    assert missing == ["no estimated pass rate (at least 80.0%)"]


def test_the_database_pools_the_cases_as_a_row_a_case_would(app, api):
    """The draw reads the version's cases grouped by the database (`_pooled`): the same pools
    as read a row each and pooled by `sampling.pools`, priors at the bands' edges included
    (1 in 10 is 0.1, in band ≤0.1); and a case id holding the separator is read a row each."""
    from sqlalchemy import select, text
    from test_case_records import full_run

    from kindgi.service import quick_runs

    ids = the_set(api)
    for n in range(10):  # ids[2] passes once in ten: 0.1; ids[3] half; cor-1 never
        failing = {ids[0]: "fail", **({ids[2]: "fail"} if n else {}),
                   **({ids[3]: "fail"} if n % 2 else {})}  # fmt: skip
        full_run(api, f"c{n}", failing)

    def pooled(row_each: bool) -> dict:
        with app.app_context():
            version = db.session.scalar(select(func.max(models.TestSetVersion.pk)))
            members = select(models.VersionMember.case_id).where(
                models.VersionMember.version_pk == version
            )
            read = quick_runs._pooled_by_row if row_each else quick_runs._pooled
            got = read(members)
            return {key: (sorted(p.ids), p.known, round(p.total, 9)) for key, p in got.items()}

    grouped = pooled(False)
    assert grouped == pooled(True)
    assert grouped[("decisions", "≤0.1")][0] == [ids[2]]
    assert grouped[("decisions", "0")][0] == ["cor-1"]
    assert grouped[("decisions", "≤0.5")][0] == [ids[3]]
    with app.app_context():
        db.session.execute(
            text("UPDATE version_members SET case_id = :odd WHERE case_id = :id"),
            {"odd": f"odd{quick_runs.SEPARATOR}id", "id": ids[4]},
        )
        db.session.commit()
    odd = pooled(False)
    assert odd == pooled(True)
    assert odd[("decisions", "new")][0] == [f"odd{quick_runs.SEPARATOR}id"]  # no record by it
