"""Quick runs: a test run over a sample of its version's cases, which estimates the full pass rate
(docs/design.md §9.9; the rules in `kindgi.sampling`).

The sample is drawn when the run starts, from the cases the run would otherwise have had,
stratified by their parts and by their pass rate in the set's last 50 done full runs (their
records); the run keeps the sample's strata, and each of its cases the stratum it came from.
When the run is done its estimate is counted from its own cases (as many as the sample) and kept
in its tallies.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import Select, func, select

from .. import sampling
from ..errors import bad_input
from ..models import CaseRecord, RunCase, TestRun, VersionMember
from ..stance import PARTS_NAMED
from .common import sql

SEED_BOUND = 2**31


def draw_sample(run: TestRun, members: Select[Any], asked: dict[str, Any]) -> int:
    """Draw the run's sample from `members` (a query of the version's members it would otherwise
    have) and give the run its cases; the sample's size. Each case is read as its member's
    parts (stored when frozen) and its record's passes and fails (one narrow row each, no JSON).
    A size not below the cases is 400, which leaves the run unmade."""
    population = sql().execute(
        members.with_only_columns(
            VersionMember.case_id, VersionMember.parts, CaseRecord.passed, CaseRecord.failed
        ).outerjoin(CaseRecord, CaseRecord.case_id == VersionMember.case_id)
    )
    units = [
        sampling.Unit(c, PARTS_NAMED[code], wins / (wins + losses) if wins or losses else None)
        for c, code, wins, losses in population
    ]
    size = asked["size"]
    if size >= len(units):
        raise bad_input({"sample.size": [f"Must be less than the {len(units)} cases."]})
    seed = asked["seed"] if "seed" in asked else secrets.randbelow(SEED_BOUND)
    drawn = sampling.draw(units, size, seed)
    run.sample = {
        "size": size,
        "seed": seed,
        "population": len(units),
        "strata": [[s.key, s.population, s.drawn, s.prior] for s in drawn.strata],
    }
    sql().execute(
        RunCase.__table__.insert(),
        [
            {"run_pk": run.pk, "case_id": c, "outcome": "awaiting", "stratum": h}
            for c, h in sorted(drawn.cases.items())
        ],
    )
    return size


def estimate(run: TestRun) -> dict[str, float] | None:
    """A quick run's estimate of the full pass rate, from its cases' outcomes by stratum: what
    its tallies keep once it is done (None when no case passed or failed)."""
    sample = run.sample
    assert sample is not None
    counts = [[0, 0] for _ in sample["strata"]]
    for stratum, outcome, n in sql().execute(
        select(RunCase.stratum, RunCase.outcome, func.count())
        .where(RunCase.run_pk == run.pk, RunCase.outcome.in_(("pass", "fail")))
        .group_by(RunCase.stratum, RunCase.outcome)
    ):
        counts[stratum][0] += n if outcome == "pass" else 0
        counts[stratum][1] += n
    got = sampling.estimate(
        [
            (population, drawn, prior, passed, graded)
            for (_, population, drawn, prior), (passed, graded) in zip(
                sample["strata"], counts, strict=True
            )
        ]
    )
    if got is None:
        return None
    return {"passRate": got.pass_rate, "low": got.low, "high": got.high}
