"""A test set's health (docs/design.md §9.11): the active cases that fail every run (likely a wrong
expectation), the flaky ones, those no recent run has had, the pairs that contradict each other,
and a histogram of the cases' pass rates, all from the cases' records (`service.records`).

Computed once per state of the set (its change counter, its newest case and its newest done full
run) and kept in this process, so a page read again costs nothing until a case or a run changes it.
"""

from __future__ import annotations

import json
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, select

from ..models import Case, CaseRecord, Snapshot, TestRun, TestSetChanges
from .access import readable
from .common import sql
from .identity import Principal
from .versions import test_set_id

ALWAYS_FAILING_STREAK = 5  # runs in a row, newest first, that did not pass it
LISTED = 100  # case ids (or pairs) shown of each kind
BINS = 10
_KEPT = 32  # test sets whose health this process keeps
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
    """The health of a set from its active cases' records and expectations."""
    active = _active(agent_pk, project_id)
    ids = set(sql().execute(active).scalars())
    failing, flaky, recorded = set(), set(), set()
    histogram = [0] * BINS
    for case_id, runs, passed, is_flaky, streak in sql().execute(
        select(
            CaseRecord.case_id,
            CaseRecord.runs,
            CaseRecord.passed,
            CaseRecord.flaky,
            CaseRecord.streak,
        ).where(CaseRecord.case_id.in_(active))
    ):
        recorded.add(case_id)
        if streak >= ALWAYS_FAILING_STREAK:
            failing.add(case_id)
        if is_flaky:
            flaky.add(case_id)
        histogram[min(int(passed / runs * BINS), BINS - 1)] += 1
    rows = (
        sql()
        .execute(
            select(Case.id, Case.run_id, Case.expect, Snapshot.input, Snapshot.calls)
            .join(Snapshot, Snapshot.run_id == Case.run_id)
            .where(Case.id.in_(active))
        )
        .all()
    )
    involved, pairs = contradictions(rows)
    return Health(
        Found.of(failing),
        Found.of(flaky),
        Found.of(ids - recorded),
        Found.of(involved),
        pairs,
        histogram,
        agent_id,
        project_id,
    )


def contradictions(cases: Any) -> tuple[set[str], list[tuple[str, str]]]:
    """The cases that contradict another, and the first `LISTED` such pairs, from rows of
    (id, runId, expect, input, calls). Two cases on the same input contradict when one expects
    a call to a tool the other forbids (`decisions: right` expects the run's own calls); two on
    the same run when they give opposite verdicts on the same part."""
    wants: dict[tuple[str, str], list[str]] = defaultdict(list)
    forbids: dict[tuple[str, str], list[str]] = defaultdict(list)
    verdicts: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for case_id, run_id, expect, given, calls in cases:
        same_input = json.dumps(given, sort_keys=True, separators=(",", ":"))
        for part in ("decisions", "answer"):
            if part in expect:
                verdicts[(run_id, part, expect[part]["verdict"])].append(case_id)
        decisions = expect.get("decisions")
        if decisions is None:
            continue
        called = (
            [c.get("tool") for c in calls or [] if isinstance(c, dict)]
            if decisions["verdict"] == "right"
            else [c["tool"] for c in decisions.get("shouldCall", [])]
        )
        for tool in {t for t in called if isinstance(t, str)}:
            wants[(same_input, tool)].append(case_id)
        for tool in set(decisions.get("mustNotCall", [])):
            forbids[(same_input, tool)].append(case_id)
    clashes = [(wants[key], forbids[key]) for key in wants if key in forbids]
    clashes += [
        (verdicts[(run_id, part, "right")], ids)
        for (run_id, part, verdict), ids in verdicts.items()
        if verdict == "wrong" and (run_id, part, "right") in verdicts
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
