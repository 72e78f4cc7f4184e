"""Quick runs: which cases a sample draws, and what its results say of the full pass rate.

Pure rules, no Flask or database (docs/design.md §9.9). A version's cases are split into strata
by the parts they are graded on and by the band of their prior pass rate (how often they passed
in the set's recent done runs); each stratum gets its share of the sample (Neyman allocation:
its size times its spread, at least two cases each) and the cases are drawn at random within it,
reproducibly from the seed. With no history at all there is one stratum: a plain random sample.

The estimate is the stratified mean of the strata's pass rates, each weighted by its share of
the version, with the variance's finite-population correction; the 95 % interval is the Wilson
interval at the sample's effective size (how many plain random cases would give that variance),
so it stays in [0, 1] and is honest when every sampled case passed (or failed).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .grading import wilson

# Upper ends of the prior pass-rate bands: 0, (0, .1], (.1, .3], ..., (.9, 1]
BAND_EDGES = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
MIN_PER_STRATUM = 2  # a stratum's variance needs two cases
SPREAD_FLOOR = 0.05  # a band of prior rate 0 or 1 still may pass or fail this time
SHRINK = 0.5  # cases' worth of prior rate a stratum's variance starts from
ALLOCATIONS = ("neyman", "proportional")
VERDICTS = ("passes", "fails", "can't tell")


class Unit(NamedTuple):
    """A case of the version as the draw sees it: its parts (e.g. "answer+decisions") and its
    prior pass rate (None: no done run has graded it). A tuple: a draw makes one a case."""

    case_id: str
    parts: str
    prior: float | None


@dataclass
class Stratum:
    """One stratum of a draw: its name, its cases in the version, how many were drawn, and its
    cases' mean prior pass rate (½ when none has one)."""

    key: str
    population: int
    drawn: int
    prior: float


@dataclass
class Sample:
    """A draw: its strata, and the stratum (an index into `strata`) of every case drawn."""

    strata: list[Stratum]
    cases: dict[str, int]

    @property
    def stratified(self) -> bool:
        return len(self.strata) > 1


@dataclass(frozen=True)
class Estimate:
    """The full run's estimated pass rate (0 to 1) and its 95 % interval."""

    pass_rate: float
    low: float
    high: float


def band(prior: float | None) -> str:
    """The name of a prior pass rate's band: "new", "0", or "≤0.3" and so on."""
    if prior is None:
        return "new"
    i = bisect_left(BAND_EDGES, prior)
    return "0" if i == 0 else f"≤{BAND_EDGES[i]:g}"


@dataclass
class Pool:
    """Cases of one (parts, band) stratum: their ids, and the sum and number of their known
    prior pass rates. A draw sorts the ids by case id."""

    ids: list[str] = field(default_factory=list)
    total: float = 0.0
    known: int = 0

    def add(self, case_id: str, prior: float | None) -> None:
        self.ids.append(case_id)
        if prior is not None:
            self.total += prior
            self.known += 1

    @property
    def prior(self) -> float:
        """The pool's mean prior pass rate (½ when none of its cases has one)."""
        return self.total / self.known if self.known else 0.5


def pools(units: Iterable[Unit]) -> dict[tuple[str, str], Pool]:
    """The units by (parts, band): each unit's band worked out once per prior rate (a large set
    has few)."""
    bands: dict[float | None, str] = {}
    found: dict[tuple[str, str], Pool] = defaultdict(Pool)
    for case_id, parts, prior in units:
        named = bands.get(prior)
        if named is None:
            named = bands[prior] = band(prior)
        found[parts, named].add(case_id, prior)
    return found


def _merged(groups: Iterable[Pool]) -> Pool:
    merged = Pool()
    for pool in groups:
        merged.ids += pool.ids
        merged.total += pool.total
        merged.known += pool.known
    return merged


def _strata(fine: dict[tuple[str, str], Pool], size: int, plain: bool) -> dict[str, Pool]:
    """The pools as strata: by parts and band; by band alone when the sample is too small to
    give every (parts, band) stratum two cases; one stratum when plain, with no history, or
    when even the bands are too many."""
    if not plain and any(pool.known for pool in fine.values()):
        if len(fine) * MIN_PER_STRATUM <= size:
            return {f"{parts}|{named}": pool for (parts, named), pool in fine.items()}
        by_band: dict[str, list[Pool]] = defaultdict(list)
        for (_, named), pool in fine.items():
            by_band[named].append(pool)
        if len(by_band) * MIN_PER_STRATUM <= size:
            return {named: _merged(group) for named, group in by_band.items()}
    return {"all": _merged(fine.values())}


def _spread(prior: float) -> float:
    """A stratum's expected standard deviation of pass/fail, from its mean prior rate."""
    mean = min(max(prior, SPREAD_FLOOR), 1 - SPREAD_FLOOR)
    return math.sqrt(mean * (1 - mean))


def allocate(populations: Sequence[int], spreads: Sequence[float], size: int) -> list[int]:
    """How many of `size` to draw from each stratum: at least two (or all, when fewer), the rest
    in proportion to population times spread, never more than a stratum has (largest remainders)."""
    counts = [min(MIN_PER_STRATUM, n) for n in populations]
    left = size - sum(counts)
    while left > 0:
        room = [i for i, n in enumerate(populations) if counts[i] < n]
        weights = {i: populations[i] * spreads[i] for i in room}
        if not any(weights.values()):  # no spread known anywhere: in proportion to size
            weights = {i: float(populations[i]) for i in room}
        total = sum(weights.values())
        shares = {i: min(left * w / total, populations[i] - counts[i]) for i, w in weights.items()}
        whole = {i: int(s) for i, s in shares.items()}
        given = sum(whole.values())
        by_remainder = sorted(room, key=lambda i: (whole[i] - shares[i], i))
        for i in by_remainder[: max(0, min(left - given, len(room)))]:
            if whole[i] < populations[i] - counts[i]:
                whole[i] += 1
        for i, n in whole.items():
            counts[i] += n
        left = size - sum(counts)
    return counts


def draw(
    units: Iterable[Unit], size: int, seed: int, *, allocation: str = "neyman", plain: bool = False
) -> Sample:
    """Draw `size` of the units (0 < size < their number), stratified unless `plain` (or there is
    no history); the same units, size, seed and allocation always draw the same cases."""
    return draw_pools(pools(units), size, seed, allocation=allocation, plain=plain)


def draw_pools(
    fine: dict[tuple[str, str], Pool],
    size: int,
    seed: int,
    *,
    allocation: str = "neyman",
    plain: bool = False,
) -> Sample:
    """`draw`, from the units already pooled by (parts, band) (`pools`, or a database's query
    that bands them alike)."""
    total = sum(len(pool.ids) for pool in fine.values())
    if not 0 < size < total:
        raise ValueError(f"a sample of {size} from {total} cases")
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation {allocation!r}")
    groups = _strata(fine, size, plain)
    keys = sorted(groups)
    populations = [len(groups[k].ids) for k in keys]
    priors = [groups[k].prior for k in keys]
    spreads = [_spread(p) if allocation == "neyman" else 1.0 for p in priors]
    counts = allocate(populations, spreads, size)
    rng = random.Random(seed)
    cases: dict[str, int] = {}
    for index, (key, n) in enumerate(zip(keys, counts, strict=True)):
        for case_id in rng.sample(sorted(groups[key].ids), n):
            cases[case_id] = index
    strata = [Stratum(*row) for row in zip(keys, populations, counts, priors, strict=True)]
    return Sample(strata, cases)


def estimate(strata: Sequence[tuple[int, int, float, int, int]]) -> Estimate | None:
    """The full pass rate from each stratum's (population, drawn, prior, passed, graded), where
    graded counts the cases that passed or failed; None when no sampled case is graded. A
    stratum none of whose drawn cases is graded is left out and the others' weights grow to fill
    the set.

    Each stratum's variance uses its pass rate shrunk half a case toward its prior rate, so a
    stratum that all passed (or all failed) still admits it might not have."""
    known = [s for s in strata if s[4]]
    if not known:
        return None
    population = sum(s[0] for s in known)
    rate = variance = 0.0
    graded_total = 0
    for n_pop, drawn, prior, passed, graded in known:
        weight = n_pop / population
        rate += weight * passed / graded
        shrunk = (passed + SHRINK * prior) / (graded + SHRINK)
        spread = shrunk * (1 - shrunk) * (graded / (graded - 1) if graded > 1 else 1.0)
        fpc = 1 - min(drawn, n_pop) / n_pop
        variance += weight * weight * fpc * spread / graded
        graded_total += graded
    rate = min(max(rate, 0.0), 1.0)
    if variance <= 0:  # every stratum taken whole: the rate is known
        return Estimate(rate, rate, rate)
    effective = max(
        min(rate * (1 - rate) / variance, float(population)) if 0 < rate < 1 else graded_total,
        1.0,
    )
    low, high = wilson(rate * effective, effective)  # type: ignore[arg-type]
    return Estimate(rate, min(low, rate), max(high, rate))


def verdict(interval: Estimate, floor: float) -> str:
    """The gate of a quick run against a pass-rate floor: "passes" when the whole interval is at
    or above it, "fails" when the whole interval is below it, else "can't tell"."""
    if interval.low >= floor:
        return "passes"
    if interval.high < floor:
        return "fails"
    return "can't tell"
