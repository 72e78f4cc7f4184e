"""A test set's health (docs/design.md §9.11): the active cases that fail every run (likely a wrong
expectation), the flaky ones, those no recent run has had, the pairs that contradict each other,
and a histogram of the cases' pass rates, all from the cases' records (`service.records`).

Computed once per state of the set (its change counter, its newest case and its newest done full
run) and kept in this process, so a page read again costs nothing until a case or a run changes it.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, select

from ..grading import PARTS
from ..models import Case, CaseRecord, TestRun, TestSetChanges
from ..stance import VERDICT_PARTS
from .access import readable
from .common import sql
from .identity import Principal
from .versions import test_set_id

ALWAYS_FAILING_STREAK = 5  # runs in a row, newest first, that did not pass it
LISTED = 100  # case ids (or pairs) shown of each kind
BINS = 10
_KEPT = 32  # test sets whose health this process keeps
VERDICT_BITS = [2 ** PARTS.index(part) for part in VERDICT_PARTS]
_cache: OrderedDict[tuple[int, str], tuple[tuple[Any, ...], Health]] = OrderedDict()


@dataclass
class Found:
    """Some of the set's cases: how many, and the first `LISTED` ids."""

    count: int = 0
    case_ids: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, ids: set[str]) -> Found:
        return cls(len(ids), sorted(ids)[:LISTED])


@dataclass
class Health:
    always_failing: Found
    flaky: Found
    never_run: Found
    contradicting: Found
    pairs: list[tuple[str, str]]  # the first `LISTED` contradicting pairs
    histogram: list[int]  # active cases with a record, by pass rate: [0, .1), …, [.9, 1]
    agent_id: str
    project_id: str

    @property
    def test_set_id(self) -> str:
        return test_set_id(self.agent_id, self.project_id)


def _active(agent_pk: int, project_id: str) -> Select[Any]:
    return select(Case.id).where(
        Case.agent_pk == agent_pk,
        Case.project_id == project_id,
        Case.is_case,
        Case.retired_at.is_(None),
    )


def _stamp(agent_pk: int, project_id: str) -> tuple[Any, ...]:
    """What the health depends on: the set's change counter, its newest case and its newest done
    full run (the newest case's random id also tells one database's set from another's)."""
    newest_case = (
        sql()
        .execute(
            select(Case.added_at, Case.id)
            .where(Case.agent_pk == agent_pk, Case.project_id == project_id)
            .order_by(Case.added_at.desc(), Case.id.desc())
            .limit(1)
        )
        .first()
    )
    changes = (
        sql()
        .execute(
            select(TestSetChanges.changes).where(
                TestSetChanges.agent_pk == agent_pk, TestSetChanges.project_id == project_id
            )
        )
        .scalar()
    )
    newest = (
        sql()
        .execute(
            select(TestRun.pk, TestRun.finished_at)
            .where(
                TestRun.agent_pk == agent_pk,
                TestRun.project_id == project_id,
                TestRun.status == "done",
                TestRun.sample.is_(None),
            )
            .order_by(TestRun.finished_at.desc(), TestRun.pk.desc())
            .limit(1)
        )
        .first()
    )
    return (changes, *(tuple(row) if row else None for row in (newest_case, newest)))


def test_set_health(caller: Principal, agent_id: str, project_id: str) -> Health:
    """The set's health (`read` on the project), from this process's copy when the set and its
    runs have not changed since it was computed."""
    agent, _ = readable(caller, agent_id, project_id)
    key, stamp = (agent.pk, project_id), _stamp(agent.pk, project_id)
    kept = _cache.get(key)
    if kept is None or kept[0] != stamp:
        kept = (stamp, compute(agent.pk, agent.id, project_id))
        _cache[key] = kept
        while len(_cache) > _KEPT:
            _cache.popitem(last=False)
    _cache.move_to_end(key)
    return kept[1]


def compute(agent_pk: int, agent_id: str, project_id: str) -> Health:
    """The health of a set from its active cases' records and stances (`kindgi.stance`): one
    narrow row a case, no JSON but the few tools a case names."""
    failing, flaky, never_run = set(), set(), set()
    histogram = [0] * BINS
    stances = []
    rows = sql().execute(
        _active(agent_pk, project_id)
        .add_columns(
            Case.run_id,
            Case.input_key,
            Case.parts,
            Case.rights,
            Case.wants,
            Case.forbids,
            CaseRecord.runs,
            CaseRecord.passed,
            CaseRecord.flaky,
            CaseRecord.streak,
        )
        .outerjoin(CaseRecord, CaseRecord.case_id == Case.id)
    )
    for case_id, run_id, key, parts, rights, wants, forbids, runs, passed, is_flaky, streak in rows:
        stances.append((case_id, run_id, key, parts, rights, wants, forbids))
        if runs is None:
            never_run.add(case_id)
            continue
        if streak >= ALWAYS_FAILING_STREAK:
            failing.add(case_id)
        if is_flaky:
            flaky.add(case_id)
        histogram[min(int(passed / runs * BINS), BINS - 1)] += 1
    involved, pairs = contradictions(stances)
    return Health(
        Found.of(failing),
        Found.of(flaky),
        Found.of(never_run),
        Found.of(involved),
        pairs,
        histogram,
        agent_id,
        project_id,
    )


def contradictions(cases: Any) -> tuple[set[str], list[tuple[str, str]]]:
    """The cases that contradict another, and the first `LISTED` such pairs, from rows of
    (id, runId, inputKey, parts, rights, wants, forbids), a case's stance (`kindgi.stance`).
    Two cases on the same input contradict when one wants a call to a tool the other forbids
    (`decisions: right` wants the run's own calls); two on the same run when they give opposite
    verdicts on the same part."""
    wanting: dict[tuple[str, str], list[str]] = defaultdict(list)
    forbidding: dict[tuple[str, str], list[str]] = defaultdict(list)
    verdicts: dict[tuple[str, int, bool], list[str]] = defaultdict(list)
    for case_id, run_id, key, parts, rights, wants, forbids in cases:
        for bit in VERDICT_BITS:
            if parts & bit:
                verdicts[(run_id, bit, bool(rights & bit))].append(case_id)
        for tool in wants or ():
            wanting[(key, tool)].append(case_id)
        for tool in forbids or ():
            forbidding[(key, tool)].append(case_id)
    clashes = [(wanting[key], forbidding[key]) for key in wanting if key in forbidding]
    clashes += [
        (verdicts[(run_id, bit, True)], ids)
        for (run_id, bit, right), ids in verdicts.items()
        if not right and (run_id, bit, True) in verdicts
    ]
    involved: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for one, other in clashes:
        involved.update(one, other)
        for a in sorted(one)[:LISTED]:
            for b in sorted(other)[:LISTED]:
                if a != b and len(pairs) < LISTED * 10:
                    pairs.add((min(a, b), max(a, b)))
    return involved, sorted(pairs)[:LISTED]
