"""A generated demo world: two agents, three projects, and a realistic mix of cases.

Deterministic for a given size (a seeded generator), so two demos of one size look alike.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from . import service

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


def world(cases: int, password: str, token: str, seed: int = 7) -> dict[str, Any]:
    """The demo world with `cases` cases, plus a few won't-fix and removed corrections.

    Bodies come from a pool and times are datetimes, so a million cases build in seconds.
    """
    rng = random.Random(seed)
    now = service.clock()
    hand_bodies = [_body(rng, "hand") for _ in range(97)]
    correction_bodies = [_body(rng, "correction") for _ in range(101)]
    statuses = ["open", "open", "with-the-owner", "fixed", "fixed"]
    pairs = [
        (agent, versions, project) for agent, versions, projects in AGENTS for project in projects
    ]
    n_runs = max(6, cases // 10)
    span = timedelta(days=120)
    runs = []
    for i in range(n_runs):
        agent, versions, project = pairs[i % len(pairs)]
        runs.append(
            {
                "id": f"run-{i:07d}",
                "agent": agent,
                "project": project,
                "version": versions[i % len(versions)],
                "status": "finished" if i % 50 else "running",
                "input": {"question": QUESTIONS[i % len(QUESTIONS)]},
                "output": OUTPUT,
                "calls": [{"tool": TOOLS[i % 4], "args": {"q": "notice period"}}],
                "at": now - span + span * (i / n_runs),
            }
        )
    finished = [r for r in runs if r["status"] == "finished"]
    extra = cases // 30  # won't-fix and removed corrections: not cases
    total = cases + extra
    corrections, hand = [], []
    extras = 0
    for i in range(total):
        # The won't-fix and removed ones are spread evenly through time, as they happen: all
        # at the newest end, they made every newest-first query step over them first.
        is_case = ((i + 1) * extra + total // 2) // total == extras
        extras += not is_case
        run = finished[i * len(finished) // total]
        added = run["at"] + timedelta(minutes=5, milliseconds=i % 997)
        r = rng.random()
        entry: dict[str, Any] = {"run": run["id"], "by": USER, "at": added}
        if is_case and r < 0.08:
            entry["retired"] = {"reason": REASONS[i % len(REASONS)], "by": USER, "at": added}
        if is_case and r > 0.7:
            hand.append({"id": f"case-{i:012d}", "body": hand_bodies[i % 97], **entry})
        else:
            corrections.append(
                {
                    "id": f"cor-{i:012d}",
                    "body": correction_bodies[i % 101],
                    "status": statuses[i % 5] if is_case else ("wont-fix", "removed")[extras % 2],
                    "group": "grp-experts" if run["agent"] == AGENTS[0][0] and r < 0.2 else None,
                    **entry,
                }
            )
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
        "runs": runs,
        "corrections": corrections,
        "cases": hand,
    }
