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

from sqlalchemy import Select, case, func, literal, select

from .. import sampling
from ..errors import bad_input
from ..grading import PARTS
from ..models import Case, CaseRecord, RunCase, TestRun
from .common import dialect, sql

SEED_BOUND = 2**31


def prior_rates(agent_pk: int, project_id: str) -> dict[str, float]:
    """Each case's pass rate (pass over pass and fail) in the test set's last 50 done full runs,
    from the cases' records (`service.records`), for the cases that passed or failed there."""
    rows = sql().execute(
        select(CaseRecord.case_id, CaseRecord.passed, CaseRecord.failed).where(
            CaseRecord.agent_pk == agent_pk,
            CaseRecord.project_id == project_id,
            CaseRecord.passed + CaseRecord.failed > 0,
        )
    )
    return {case_id: wins / (wins + losses) for case_id, wins, losses in rows}


# The parts a case is graded on, as a stratum names them ("decisions+answer"), by the bits of
# `_parts_code`: a part's bit is 2 ** its place in PARTS
PARTS_NAMED = [
    "+".join(part for i, part in enumerate(PARTS) if code >> i & 1)
    for code in range(2 ** len(PARTS))
]


def _parts_code() -> Any:
    """Which parts a case's expectation has, as bits, read by the database (decoding every
    expectation's JSON in Python cost most of a large draw's time)."""
    if dialect() == "sqlite":
        has = [func.json_type(Case.expect, f"$.{part}").is_not(None) for part in PARTS]
    else:
        has = [Case.expect.op("->")(literal(part)).is_not(None) for part in PARTS]
    return sum((case((h, 2**i), else_=0) for i, h in enumerate(has)), literal(0))


def draw_sample(run: TestRun, members: Select[Any], asked: dict[str, Any]) -> int:
    """Draw the run's sample from `members` (a query of the case ids it would otherwise have)
    and give the run its cases; the sample's size. A size not below the cases is 400, which
    leaves the run unmade."""
    ids = members.subquery()
    population = sql().execute(select(Case.id, _parts_code()).where(Case.id.in_(select(ids)))).all()
    size = asked["size"]
    if size >= len(population):
        raise bad_input({"sample.size": [f"Must be less than the {len(population)} cases."]})
    seed = asked["seed"] if "seed" in asked else secrets.randbelow(SEED_BOUND)
    prior = prior_rates(run.agent_pk, run.project_id)
    units = [sampling.Unit(c, PARTS_NAMED[code], prior.get(c)) for c, code in population]
    drawn = sampling.draw(units, size, seed)
    run.sample = {
        "size": size,
        "seed": seed,
        "population": len(population),
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
