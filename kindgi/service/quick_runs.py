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
from collections import defaultdict
from typing import Any

from sqlalchemy import Float, Select, cast, func, literal, select

from .. import sampling
from ..errors import bad_input
from ..models import CaseRecord, RunCase, TestRun, VersionMember
from ..stance import PARTS_NAMED
from .common import dialect, sql

SEED_BOUND = 2**31


SEPARATOR = "\x1f"  # between the case ids a pool's row of `_pooled` joins


def _pooled(members: Select[Any]) -> dict[tuple[str, str], sampling.Pool]:
    """The cases of `members` (a query of version members) pooled by parts and band
    (`sampling.pools`), read as the database groups them by their member's parts (bits,
    stored when frozen) and their record's passes and fails, each group's ids joined in one
    string: a few rows, no JSON, nothing done in Python a case but splitting its id out. (Only
    should an id hold SEPARATOR are the cases read a row each.)"""
    joined = (func.group_concat if dialect() == "sqlite" else func.string_agg)(
        VersionMember.case_id, literal(SEPARATOR)
    )
    columns = (VersionMember.parts, CaseRecord.passed, CaseRecord.failed)
    rows = sql().execute(
        members.with_only_columns(*columns, func.count(), joined)
        .outerjoin(CaseRecord, CaseRecord.case_id == VersionMember.case_id)
        .group_by(*columns)
    )
    pooled: dict[tuple[str, str], sampling.Pool] = defaultdict(sampling.Pool)
    for code, wins, losses, n, ids in rows:
        prior = wins / (wins + losses) if wins or losses else None
        split = ids.split(SEPARATOR)
        if len(split) != n:
            return _pooled_by_row(members)
        pool = pooled[PARTS_NAMED[code], sampling.band(prior)]
        pool.ids += split
        if prior is not None:
            pool.total += prior * n
            pool.known += n
    return pooled


def _pooled_by_row(members: Select[Any]) -> dict[tuple[str, str], sampling.Pool]:
    """`_pooled`, reading a row a case."""
    prior = cast(CaseRecord.passed, Float) / func.nullif(CaseRecord.passed + CaseRecord.failed, 0)
    rows = sql().execute(
        members.with_only_columns(VersionMember.case_id, VersionMember.parts, prior).outerjoin(
            CaseRecord, CaseRecord.case_id == VersionMember.case_id
        )
    )
    return {
        (PARTS_NAMED[code], named): pool
        for (code, named), pool in sampling.pools(rows.all()).items()
    }


def draw_sample(run: TestRun, members: Select[Any], asked: dict[str, Any]) -> int:
    """Draw the run's sample from `members` (a query of the version's members it would otherwise
    have) and give the run its cases; the sample's size. A size not below the cases is 400,
    which leaves the run unmade."""
    pooled = _pooled(members)
    population = sum(len(pool.ids) for pool in pooled.values())
    size = asked["size"]
    if size >= population:
        raise bad_input({"sample.size": [f"Must be less than the {population} cases."]})
    seed = asked["seed"] if "seed" in asked else secrets.randbelow(SEED_BOUND)
    drawn = sampling.draw_pools(pooled, size, seed)
    run.sample = {
        "size": size,
        "seed": seed,
        "population": population,
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
