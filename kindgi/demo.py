"""A generated demo world: two agents, three projects, and a realistic mix of cases.

Deterministic for a given size (a seeded generator), so two demos of one size look alike.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from . import service
from .database import db
from .models import Case, RunCase, Snapshot

TENANT = "demo"
EMAIL = "demo@kindgi.test"
USER = "u-demo"
PROJECTS = [
    ("2489e9ad-2ee2-8e00-8ec9-32d5f69181c0", "Drafting — contracts"),
    ("5f0c4e1a-8d7b-4c2e-9a31-7b6e2d9f0c14", "Drafting — letters"),
    ("a3e9d2c7-61f4-4b8a-8e05-c2d17f3b9e68", "Triage"),
]
AGENTS = [
    ("demo.drafting", ["1.0.0", "1.1.0", "1.2.0"], [PROJECTS[0][0], PROJECTS[1][0]]),
    ("demo.triage", ["0.9.0", "1.0.0"], [PROJECTS[2][0]]),
]
# Each agent with each project that serves it: the demo's runs go through them in turn
PAIRS = [(agent, versions, project) for agent, versions, projects in AGENTS for project in projects]
TOOLS = ["search", "lookup", "fetch_clause", "summarise", "send_email", "calendar", "translate"]
QUESTIONS = [
    "Draft a termination clause for a 12-month lease",
    "Which supplier contracts renew in March?",
    "Summarise the indemnity terms in the MSA",
    "Route this ticket: 'printer on floor 3 is offline'",
    "Reply to the landlord about the deposit",
    "Find precedent letters for late payment",
]
OUTPUT = {
    "answer": "Here is a draft.",
    "matches": [{"id": f"m{k}", "title": f"Precedent {k + 1}"} for k in range(3)],
}
# Words to search for, and how often they come: `refund` in 1 % of the runs (so of the cases),
# `urgent` in half of them; either only in the runs' input, which the cases' snapshots keep.
SELECTIVE_WORD, BROAD_WORD = "refund", "urgent"
REFUND = " (the customer asks for a refund)"
REASONS = [
    "duplicate of a newer case",
    "the policy changed",
    "run was mislabelled",
    "tool was renamed",
]


def _body(rng: random.Random, kind: str) -> dict[str, Any]:
    """A correction's body: one to three parts, wrong verdicts with what was expected."""
    body: dict[str, Any] = {}
    parts = rng.sample(["decisions", "answer", "items"], rng.choice([1, 1, 2, 3]))
    if "decisions" in parts:
        if rng.random() < 0.6:
            body["decisions"] = "wrong"
            tool = rng.choice(TOOLS[:4])
            body["shouldCall"] = [{"tool": tool, "args": {"q": rng.choice(QUESTIONS)[:24]}}]
            if rng.random() < 0.5:
                body["mustNotCall"] = [rng.choice(TOOLS[4:])]
        else:
            body["decisions"] = "right"
    if "answer" in parts:
        if rng.random() < 0.5:
            body["answer"] = "wrong"
            body["shouldSay"] = "Cite the clause number and the notice period."
        else:
            body["answer"] = "right"
            if kind == "hand":
                body["why"] = "Matches the approved template."
    if "items" in parts:
        body["items"] = [
            {
                "key": f"m{i}",
                "pointer": f"/matches/{i}",
                "rank": i,
                "verdict": rng.choice(["right", "right", "wrong"]),
            }
            for i in range(rng.randint(1, 3))
        ]
    return body


INBOX_RUNS = 500  # runs no case was made from, beside the cases' own, unless told how many


def world(
    cases: int, password: str, token: str, seed: int = 7, runs: int | None = None
) -> dict[str, Any]:
    """The demo world with `cases` cases, plus a few won't-fix and removed corrections, and
    `runs` runs in all (by default the cases' own and INBOX_RUNS more): the cases are made from
    a tenth as many runs, and the rest are the runs inbox's, no case made from them yet.

    Bodies come from a pool and times are datetimes, so a million cases build in seconds.
    """
    rng = random.Random(seed)
    now = service.clock()
    hand_bodies = [_body(rng, "hand") for _ in range(97)]
    correction_bodies = [_body(rng, "correction") for _ in range(101)]
    statuses = ["open", "open", "with-the-owner", "fixed", "fixed"]
    n_runs = max(6, cases // 10)
    span = timedelta(days=120)
    # the runs' inputs and calls come from pools too: the loader works out each object's
    # words, key and JSON once for all the runs sharing it
    questions = {
        (question, refund, urgent): {
            "question": question + (REFUND if refund else ""),
            "priority": "urgent" if urgent else "routine",
        }
        for question in QUESTIONS
        for refund in (False, True)
        for urgent in (False, True)
    }
    calls = [[{"tool": tool, "args": {"q": "notice period"}}] for tool in TOOLS[:4]]
    made_from = []
    for i in range(n_runs):
        versions = PAIRS[i % len(PAIRS)][1]
        # i % 100 == 1: a finished run (every 50th is still running)
        question = questions[QUESTIONS[i % len(QUESTIONS)], i % 100 == 1, i % 2 == 1]
        made_from.append(
            _run(f"run-{i:07d}", i, versions[i % len(versions)], i % 50 != 0, question,
                 calls[i % 4], now - span + span * (i / n_runs))
        )  # fmt: skip
    finished = [r for r in made_from if r["status"] == "finished"]
    total_runs = n_runs + INBOX_RUNS if runs is None else runs
    if total_runs < n_runs:
        raise ValueError(f"{cases} cases are made from {n_runs} runs: ask for that many at least")
    extra = cases // 30  # won't-fix and removed corrections: not cases
    total = cases + extra
    corrections, hand = [], []
    extras = 0
    after = [timedelta(minutes=5, milliseconds=ms) for ms in range(997)]  # made once, not 1M times
    draw, half, n_finished, experts = rng.random, total // 2, len(finished), AGENTS[0][0]
    for i in range(total):
        # The won't-fix and removed ones are spread evenly through time, as they happen: all
        # at the newest end, they made every newest-first query step over them first.
        is_case = ((i + 1) * extra + half) // total == extras
        extras += not is_case
        run = finished[i * n_finished // total]
        added = run["at"] + after[i % 997]
        r = draw()
        # each entry made whole at once: grown after, its dict was resized (0.1 s of a million)
        if is_case and r > 0.7:
            entry: dict[str, Any] = {
                "id": f"case-{i:012d}", "body": hand_bodies[i % 97], "run": run["id"],
                "by": USER, "at": added,
            }  # fmt: skip
            hand.append(entry)
        else:
            entry = {
                "id": f"cor-{i:012d}",
                "body": correction_bodies[i % 101],
                "status": statuses[i % 5] if is_case else ("wont-fix", "removed")[extras % 2],
                "group": "grp-experts" if run["agent"] == experts and r < 0.2 else None,
                "run": run["id"],
                "by": USER,
                "at": added,
            }
            corrections.append(entry)
        if is_case and r < 0.08:
            entry["retired"] = {"reason": REASONS[i % len(REASONS)], "by": USER, "at": added}
    return {
        "tenants": [{"id": TENANT, "name": "Demo organisation"}],
        "users": [
            {
                "id": USER,
                "tenant": TENANT,
                "email": EMAIL,
                "name": "Dana Demo",
                "password": password,
                "admin": True,
            }
        ],
        "services": [{"id": "svc-ci", "tenant": TENANT, "name": "CI"}],
        "tokens": [{"id": "tok-demo", "principal": USER, "secret": token, "name": "demo"}],
        "projects": [{"id": pid, "tenant": TENANT, "name": name} for pid, name in PROJECTS],
        "agents": [{"id": a, "tenant": TENANT, "versions": v, "projects": p} for a, v, p in AGENTS],
        "groups": [{"id": "grp-experts", "agent": AGENTS[0][0], "restricted": True}],
        "runs": made_from + _inbox_runs(total_runs - n_runs, now - span, span),
        "corrections": corrections,
        "cases": hand,
    }


def _inbox_runs(n: int, start: datetime, span: timedelta) -> list[dict[str, Any]]:
    """`n` runs spread over `span` from `start`, through the pairs of agent and project in
    turn, no case made from them: what the runs inbox lists (a fiftieth still running, a few
    tools called, the demo's words to search for as often as in the cases' runs). Their input,
    output and calls come from pools, so a million build in seconds."""
    inputs = [
        {"question": q + refund, "priority": priority}
        for q in QUESTIONS
        for refund in ("", REFUND)
        for priority in ("routine", "urgent")
    ]
    calls = [
        [{"tool": TOOLS[(k + j) % len(TOOLS)], "args": {"q": QUESTIONS[k][:24]}} for j in range(m)]
        for k in range(len(QUESTIONS))
        for m in range(4)
    ]
    step = span / max(n, 1)
    out = []
    for i in range(n):
        versions = PAIRS[i % len(PAIRS)][1]
        k = i // len(PAIRS)  # its place among the pair's runs, so each pair gets every mix
        question = k % len(QUESTIONS)
        out.append(
            _run(
                f"run-inbox-{i:07d}",
                i,
                versions[k % len(versions)],
                k % 50 != 0,
                # the refund in one run of a hundred, urgency in half of them
                inputs[question * 4 + (k % 100 == 1) * 2 + k % 2],
                calls[question * 4 + k // len(QUESTIONS) % 4],
                start + step * (i + 0.5),
            )
        )
    return out


def _run(
    run_id: str, i: int, version: str, finished: bool, input_: Any, calls: Any, at: datetime
) -> dict[str, Any]:
    """The `i`th run of the demo's, of the pairs of agent and project in turn."""
    agent, _, project = PAIRS[i % len(PAIRS)]
    return {
        "id": run_id,
        "agent": agent,
        "project": project,
        "version": version,
        "status": "finished" if finished else "running",
        "input": input_,
        "output": OUTPUT,
        "calls": calls,
        "at": at,
    }


# Candidate versions graded in turn against the triage test set, each against the one before:
# how often each behaves as the experts asked, so the pass rate moves and cases flip.
CANDIDATES = [("1.1.0", 0.72), ("1.2.0", 0.86), ("1.3.0", 0.8)]
MAX_RUN_CASES = 5_000  # larger demos are for benchmarks: their test runs would take minutes


def test_runs(caller: service.Principal) -> int:
    """A few test runs of successive candidate versions of demo.triage, with regressions and
    fixes: started, fed and finished through the service, as a runner would. How many made."""
    agent, _, (project,) = AGENTS[1]
    if service.test_set(caller, agent, project).active > MAX_RUN_CASES:
        return 0
    baseline = None
    for candidate, skill in CANDIDATES:
        body = {"projectId": project, "candidate": candidate, "label": f"nightly {candidate}"}
        if baseline:
            body["baseline"] = baseline
        view = service.start_test_run(caller, agent, body)
        rows = _cases_of(view.run.pk)
        for first in range(0, len(rows), 500):
            batch = [_result(row, candidate, skill) for row in rows[first : first + 500]]
            service.send_results(caller, agent, view.run.id, batch)
        baseline = view.run.id
    return len(CANDIDATES)


def _cases_of(run_pk: int) -> list[Any]:
    """A run's cases with what a candidate needs to answer them well: the expectation and the
    corrected run's calls and output."""
    return db.session.execute(
        select(RunCase.case_id, Case.expect, Snapshot.calls, Snapshot.output)
        .join(Case, Case.id == RunCase.case_id)
        .join(Snapshot, Snapshot.run_id == Case.run_id)
        .where(RunCase.run_pk == run_pk)
        .order_by(RunCase.case_id)
    ).all()


def _result(row: Any, candidate: str, skill: float) -> dict[str, Any]:
    """A candidate's result for one case: as the experts asked with probability `skill`, else
    the old mistakes; now and then a crash. Seeded by the case and candidate."""
    rng = random.Random(f"{row.case_id}/{candidate}")
    if rng.random() < 0.02:
        return {"caseId": row.case_id, "error": "the agent timed out after 30 s"}
    good = rng.random() < skill
    expect, calls = row.expect, list(row.calls or [])
    decisions = expect.get("decisions", {})
    if decisions.get("verdict") == "wrong":
        wanted = [{"tool": c["tool"], "args": c["args"]} for c in decisions.get("shouldCall", [])]
        banned = [{"tool": t, "args": {}} for t in decisions.get("mustNotCall", [])]
        calls = wanted if good else calls + banned
    elif decisions and not good:
        calls = [{"tool": "translate", "args": {}}]
    ranked = None
    if "items" in expect:
        right = [i["key"] for i in expect["items"] if i["verdict"] == "right"]
        wrong = [i["key"] for i in expect["items"] if i["verdict"] == "wrong"]
        ranked = right + wrong if good else wrong + right
    result: dict[str, Any] = {"caseId": row.case_id, "output": row.output, "calls": calls}
    if ranked is not None:
        result["ranked"] = ranked
    return result
