"""A generated demo world: two agents, three projects, and a realistic mix of cases.

Deterministic for a given size (a seeded generator), so two demos of one size look alike.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta
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
    """The demo world with about `cases` cases (plus won't-fix and removed corrections)."""
    rng = random.Random(seed)
    now = service.clock()
    pairs = [
        (agent, version, project)
        for agent, versions, projects in AGENTS
        for project in projects
        for version in versions[-1:]
    ]
    runs, corrections, hand = [], [], []
    n_runs = max(6, cases // 4)
    span = timedelta(days=120)
    for i in range(n_runs):
        agent, _, project = pairs[i % len(pairs)]
        versions = next(v for a, v, _ in AGENTS if a == agent)
        at = now - span + span * (i / n_runs)
        runs.append(
            {
                "id": f"run-{i:07d}",
                "agent": agent,
                "project": project,
                "version": rng.choice(versions),
                "status": "finished" if i % 50 else "running",
                "input": {"question": rng.choice(QUESTIONS)},
                "output": {
                    "answer": "Here is a draft.",
                    "matches": [{"id": f"m{k}", "title": f"Precedent {k + 1}"} for k in range(3)],
                },
                "calls": [{"tool": rng.choice(TOOLS[:4]), "args": {"q": "notice period"}}],
                "at": at.isoformat() + "Z",
            }
        )
    finished = [r for r in runs if r["status"] == "finished"]
    extra = cases // 30  # won't-fix and removed corrections: not cases
    for i in range(cases + extra):
        run = finished[min(len(finished) - 1, i * len(finished) // (cases + extra))]
        added = _at(run["at"], i)
        is_hand = i < cases and rng.random() < 0.3
        entry: dict[str, Any] = {
            "run": run["id"],
            "by": USER,
            "at": added,
            "body": _body(rng, "hand" if is_hand else "x"),
        }
        if i < cases and rng.random() < 0.08:
            entry["retired"] = {"reason": rng.choice(REASONS), "by": USER, "at": added}
        if is_hand:
            hand.append({"id": f"case-{uuid.UUID(int=rng.getrandbits(128)).hex[:20]}", **entry})
        else:
            status = (
                ("wont-fix" if i % 2 else "removed")
                if i >= cases
                else rng.choice(["open", "open", "with-the-owner", "fixed", "fixed"])
            )
            corrections.append(
                {
                    "id": f"cor-{uuid.UUID(int=rng.getrandbits(128)).hex[:20]}",
                    "status": status,
                    "group": "grp-experts"
                    if run["agent"] == AGENTS[0][0] and rng.random() < 0.25
                    else None,
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


def _at(run_at: str, i: int) -> str:
    """A case is added a little after its run, in order, each at its own millisecond."""
    base = datetime.fromisoformat(run_at[:-1])
    return (base + timedelta(minutes=5, milliseconds=i % 1000)).isoformat(
        timespec="milliseconds"
    ) + "Z"
