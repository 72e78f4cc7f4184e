"""The proof of quick runs (docs/design.md §9.9): how close a quick run's estimate comes to the
full run's pass rate, and how often its 95 % interval covers it.

A simulated history in an item-response world (fixed seed): every case has a difficulty b and a
discrimination a, every candidate an ability θ, and a candidate passes a case with probability
1 / (1 + exp(-a(θ - b))), drawn once (a version's outcome on a case is the same every time it
runs). The past candidates' full runs are graded through the API; then each further candidate
has quick runs of `size` cases through the API (drawn by the server from that history) before
its own full run, and each estimate is held against that full run's `passRate.value`. The same
figures for plain random samples (`kindgi.sampling.draw(plain=True)`, counted here with the
server's estimator on the same outcomes) show what the strata buy.

`simulate` talks to the API through `call(method, path, body) -> (status, json)`, so the bench
(`bench/run.py --only quick`) and the test (`tests/test_quick_bench.py`) drive it alike.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kindgi import sampling

Call = Callable[[str, str, Any], tuple[int, Any]]
AGENT, PROJECT = "acme.drafting", "2489e9ad-2ee2-8e00-8ec9-32d5f69181c0"  # the tests' world
V = f"/v1/agents/{AGENT}"
BATCH = 500


@dataclass
class Figures:
    """Mean absolute error (points) and the intervals' coverage (%), stratified and plain."""

    quick_runs: int
    mae: float
    coverage: float
    plain_mae: float
    plain_coverage: float


def _ok(got: tuple[int, Any], status: int = 200) -> Any:
    if got[0] != status:
        raise RuntimeError(f"the API answered {got[0]}: {got[1]}")
    return got[1]


def _result(case_id: str, passes: bool) -> dict[str, Any]:
    """A result that passes a case expecting a call to `search`, or fails it."""
    return {"caseId": case_id, "output": None, "calls": [{"tool": "search"}] if passes else []}


def _grade(call: Call, run_id: str, outcome: dict[str, bool], ids: list[str]) -> dict[str, Any]:
    """Send the run's results (`ids`, passing as `outcome` says), BATCH at a time: the run."""
    run: dict[str, Any] = {}
    for i in range(0, len(ids), BATCH):
        chunk = [_result(c, outcome[c]) for c in ids[i : i + BATCH]]
        run = _ok(call("POST", f"{V}/test-runs/{run_id}/results", {"results": chunk}))["run"]
    return run


def _start(call: Call, candidate: str, **more: Any) -> dict[str, Any]:
    body = {"projectId": PROJECT, "candidate": candidate, **more}
    return _ok(call("POST", f"{V}/test-runs", body), 201)


def _cases_of(call: Call, run_id: str) -> list[str]:
    ids, cursor = [], ""
    while True:
        page = _ok(call("GET", f"{V}/test-runs/{run_id}/cases?limit=500{cursor}", None))
        ids += [row["caseId"] for row in page["data"]]
        if not page.get("nextCursor"):
            return ids
        cursor = f"&cursor={page['nextCursor']}"


def simulate(
    call: Call,
    *,
    cases: int = 2000,
    history: int = 40,
    candidates: int = 40,
    quick: int = 200,
    size: int = 100,
    seed: int = 2026,
    say: Callable[[str], None] = lambda _: None,
) -> Figures:
    """Make the set (retiring the world's own active cases), grade the history, then the
    further candidates' quick runs and full runs: the figures."""
    rng = random.Random(seed)
    for old in ("cor-1", "case-2"):
        _ok(call("POST", f"{V}/test-set/cases/{old}/retire", {"reason": "the bench's own set"}))
    ids = [
        _ok(call("POST", f"{V}/test-set/cases", {"runId": "run-1", "decisions": "right"}), 201)[
            "id"
        ]
        for _ in range(cases)
    ]
    items = {c: (rng.gauss(0, 2), rng.uniform(2, 4)) for c in ids}  # difficulty, discrimination

    def version(ability: float) -> dict[str, bool]:
        return {
            c: rng.random() < 1 / (1 + math.exp(-a * (ability - b))) for c, (b, a) in items.items()
        }

    passed = dict.fromkeys(ids, 0)
    for n in range(history):
        outcome = version(rng.gauss(0, 1))
        _grade(call, _start(call, f"past-{n}")["id"], outcome, ids)
        for c in ids:
            passed[c] += outcome[c]
    say(f"graded {history} past candidates' full runs of {cases} cases")
    errors: list[float] = []
    plain_errors: list[float] = []
    covered = plain_covered = 0
    for n in range(candidates):
        outcome = version(rng.gauss(0, 1))
        estimates = []
        for _ in range(quick):
            run = _start(call, f"new-{n}", sample={"size": size, "seed": rng.randrange(2**31)})
            estimates.append(
                _grade(call, run["id"], outcome, _cases_of(call, run["id"]))["estimate"]
            )
        full = _grade(call, _start(call, f"new-{n}")["id"], outcome, ids)["passRate"]["value"]
        for got in estimates:
            errors.append(abs(got["passRate"] - full))
            covered += got["low"] <= full <= got["high"]
        # plain random samples of the same size, counted by the same estimator
        units = [sampling.Unit(c, "decisions", None) for c in ids]
        for _ in range(quick):
            drawn = sampling.draw(units, size, rng.randrange(2**31), plain=True)
            wins = sum(outcome[c] for c in drawn.cases)
            got = sampling.estimate([(cases, size, 0.5, wins, size)])
            assert got is not None
            plain_errors.append(abs(got.pass_rate - full))
            plain_covered += got.low <= full <= got.high
        say(f"candidate {n + 1}/{candidates}: full pass rate {full:.3f}")
    runs = len(errors)
    return Figures(
        runs,
        100 * sum(errors) / runs,
        100 * covered / runs,
        100 * sum(plain_errors) / runs,
        100 * plain_covered / runs,
    )
