"""The quick runs' rules (kindgi.sampling): the stratified draw, the estimate and the gate."""

from __future__ import annotations

import math
import random

import pytest

from kindgi.sampling import Estimate, Unit, allocate, band, draw, estimate, verdict


def _units(n: int = 400, *, history: bool = True) -> list[Unit]:
    rng = random.Random(5)
    parts = ("decisions", "answer+decisions", "items")
    return [
        Unit(
            f"case-{i:04d}",
            parts[i % 3],
            rng.choice((0.0, 0.2, 0.5, 0.8, 1.0)) if history else None,
        )
        for i in range(n)
    ]


def test_bands_of_prior_rates() -> None:
    assert [band(p) for p in (None, 0.0, 0.05, 0.1, 0.11, 0.5, 0.95, 1.0)] == [
        "new", "0", "≤0.1", "≤0.1", "≤0.3", "≤0.5", "≤1", "≤1",
    ]  # fmt: skip


def test_a_draw_is_reproducible_from_its_seed_and_stratified() -> None:
    units = _units()
    first, again, other = (
        draw(units, 100, 7),
        draw(list(reversed(units)), 100, 7),
        draw(units, 100, 8),
    )
    assert first.cases == again.cases
    assert first.cases != other.cases
    assert len(first.cases) == 100
    assert sum(s.drawn for s in first.strata) == 100
    assert sum(s.population for s in first.strata) == 400
    # 3 parts by 5 bands, every stratum with at least two cases
    assert len(first.strata) == 15 and all(s.drawn >= 2 for s in first.strata)
    by_key = {u.case_id: u for u in units}
    for case_id, index in first.cases.items():
        stratum = first.strata[index]
        unit = by_key[case_id]
        assert stratum.key == f"{unit.parts}|{band(unit.prior)}"


def test_neyman_gives_the_spread_strata_more_than_the_settled_ones() -> None:
    sample = draw(_units(), 100, 1)
    drawn = {s.key.split("|")[1]: 0 for s in sample.strata}
    for s in sample.strata:
        drawn[s.key.split("|")[1]] += s.drawn
    assert drawn["≤0.5"] > drawn["≤0.3"] > drawn["0"]
    proportional = draw(_units(), 100, 1, allocation="proportional")
    assert (
        max(s.drawn for s in proportional.strata) - min(s.drawn for s in proportional.strata) <= 3
    )


def test_plain_random_without_history_or_when_asked() -> None:
    for sample in (draw(_units(history=False), 50, 3), draw(_units(), 50, 3, plain=True)):
        assert [(s.key, s.population, s.drawn) for s in sample.strata] == [("all", 400, 50)]
        assert not sample.stratified


def test_too_small_a_sample_for_every_stratum_drops_the_parts_then_the_bands() -> None:
    assert {s.key for s in draw(_units(), 20, 1).strata} == {"0", "≤0.3", "≤0.5", "≤0.9", "≤1"}
    assert [s.key for s in draw(_units(), 9, 1).strata] == ["all"]


@pytest.mark.parametrize("size", [0, -1, 400, 401])
def test_a_sample_must_be_smaller_than_the_set(size: int) -> None:
    with pytest.raises(ValueError):
        draw(_units(), size, 1)


def test_allocation_respects_each_stratums_size() -> None:
    assert allocate([3, 1000, 1000], [1.0, 0.0, 0.5], 100) == [3, 2, 95]
    assert allocate([5, 5], [0.0, 0.0], 6) == [3, 3]
    counts = allocate([10, 20, 30, 40], [0.5, 0.4, 0.3, 0.2], 99)
    assert sum(counts) == 99 and all(c <= n for c, n in zip(counts, [10, 20, 30, 40], strict=True))


def test_the_estimate_weights_strata_by_their_share_of_the_set() -> None:
    # 900 cases that passed before (9 of 10 sampled pass), 100 that failed (1 of 10 passes)
    got = estimate([(900, 10, 0.95, 9, 10), (100, 10, 0.05, 1, 10)])
    assert got is not None
    assert got.pass_rate == pytest.approx(0.9 * 0.9 + 0.1 * 0.1)
    assert got.low < got.pass_rate < got.high
    # the finite-population correction: half the set sampled, a narrower interval
    small = estimate([(200, 100, 0.8, 80, 100)])
    large = estimate([(100_000, 100, 0.8, 80, 100)])
    assert small is not None and large is not None
    assert small.high - small.low < 0.8 * (large.high - large.low)


def test_all_passing_is_not_certainty_and_nothing_graded_is_no_estimate() -> None:
    got = estimate([(1000, 100, 0.9, 100, 100)])
    assert got is not None and got.pass_rate == 1.0 and got.high == 1.0 and 0.9 < got.low < 1.0
    assert estimate([(1000, 100, 0.9, 0, 0)]) is None
    # a stratum with no graded case is left out: the others fill the set
    assert estimate([(500, 2, 0.5, 0, 0), (500, 50, 0.5, 25, 50)]).pass_rate == 0.5  # type: ignore[union-attr]
    assert estimate([(40, 40, 0.5, 10, 40)]) == Estimate(0.25, 0.25, 0.25)


def test_the_gate_reads_the_interval() -> None:
    assert verdict(Estimate(0.9, 0.85, 0.95), 0.8) == "passes"
    assert verdict(Estimate(0.9, 0.8, 0.95), 0.8) == "passes"
    assert verdict(Estimate(0.7, 0.6, 0.79), 0.8) == "fails"
    assert verdict(Estimate(0.8, 0.75, 0.85), 0.8) == "can't tell"


def test_the_interval_covers_the_full_rate_in_simulation() -> None:
    """An item-response world (fixed seed): 600 cases, 20 past candidates, then 5 new ones with
    60 quick runs of 60 each; the estimate is within a few points and the 95 % interval covers
    the full rate about 95 % of the time, better than plain random samples."""
    rng = random.Random(11)
    items = [(rng.gauss(0, 2), rng.uniform(2, 4)) for _ in range(600)]

    def graded(ability: float) -> list[bool]:
        return [rng.random() < 1 / (1 + math.exp(-a * (ability - b))) for b, a in items]

    passed = [0] * len(items)
    for _ in range(20):
        for i, ok in enumerate(graded(rng.gauss(0, 1))):
            passed[i] += ok
    units = [Unit(f"c{i:04d}", "decisions", passed[i] / 20) for i in range(len(items))]
    figures = {}
    for plain in (False, True):
        errors, covered = [], 0
        for _ in range(5):
            outcomes = graded(rng.gauss(0, 1))
            full = sum(outcomes) / len(outcomes)
            for _ in range(60):
                sample = draw(units, 60, rng.randrange(2**31), plain=plain)
                tally = [[s.population, s.drawn, s.prior, 0, 0] for s in sample.strata]
                for case_id, index in sample.cases.items():
                    tally[index][3] += outcomes[int(case_id[1:])]
                    tally[index][4] += 1
                got = estimate([tuple(t) for t in tally])  # type: ignore[misc]
                assert got is not None
                errors.append(abs(got.pass_rate - full))
                covered += got.low <= full <= got.high
        figures[plain] = (sum(errors) / len(errors), covered / len(errors))
    (mae, coverage), (plain_mae, plain_coverage) = figures[False], figures[True]
    assert mae < 0.035 and mae < plain_mae * 0.75
    assert 0.9 <= coverage <= 0.99 and 0.9 <= plain_coverage <= 0.99
