"""The judge in a test run: answer parts wait (`pending`) while workers put their questions to
the judge, each verdict kept once (a cache shared by every run), and the run's counts moved when
it lands. For `answer: wrong` cases the judge is also asked about the corrected run's own output,
a known failure: how often it agrees with the experts is the run's `judge.agreement`.

Every answer is graded exactly once: a question is leased while it is asked, a dead worker's
question is asked again once its lease runs out, and a verdict lands only on a question that has
none. Cancelling a run stops its grading.
"""

from __future__ import annotations

import time
from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.orm.attributes import flag_modified

from .. import grading, judge, telemetry
from ..database import abandon, after_commit, db, is_busy, on_its_own, set_writing
from ..errors import DatabaseBusy
from ..models import JudgeQuestion, JudgeVerdict, RunCase, TestRun
from .common import clock, dialect, insert_for, judge_settings, sql, task_queue
from .test_runs import settle

LANDING_SECONDS = 5  # a lease's margin past the judge's own time, for landing the verdict
LANDING_TRIES = 4  # landings a verdict gets while the database is busy (each waits out its lock)


def lease_seconds(configured: judge.Settings) -> float:
    """How long asking may take: every try's timeout, the longest waits between tries, and
    the landing."""
    waits = judge.MAX_WAIT_SECONDS * (configured.tries - 1)
    return configured.timeout * configured.tries + waits + LANDING_SECONDS


@cache
def _judge(configured: judge.Settings) -> judge.Judge:
    """One client per process and settings, so its limit on calls in flight holds."""
    return judge.Judge(configured)


# ---------------------------------------------------------------- putting questions


def questions(
    run: TestRun, case_id: str, expect: dict[str, Any], corrected: Any, candidate: Any
) -> list[dict[str, Any]]:
    """The questions one graded result puts to the judge: its answer, and for an `answer:
    wrong` case a calibration question about the corrected run's own output."""
    part = expect.get("answer")
    model = run.tallies["judge"]["model"]
    if part is None:
        return []
    asked = [("answer", judge.Question(part, corrected, candidate))]
    if part["verdict"] == "wrong":
        asked.append(("calibration", judge.Question(part, corrected, corrected)))
    return [
        {
            "run_pk": run.pk,
            "case_id": case_id,
            "kind": kind,
            "key": question.key(model),
            "question": {
                "expectation": question.expectation,
                "corrected": question.corrected,
                "candidate": question.candidate,
            },
        }
        for kind, question in asked
    ]


def put(run: TestRun, rows: list[dict[str, Any]]) -> None:
    """Record the questions; those the cache answers land now, the rest are queued once this
    transaction commits."""
    if not rows:
        return
    sql().execute(JudgeQuestion.__table__.insert(), rows)
    asked = db.session.scalars(
        select(JudgeQuestion).where(
            JudgeQuestion.run_pk == run.pk,
            JudgeQuestion.case_id.in_({row["case_id"] for row in rows}),
            JudgeQuestion.outcome.is_(None),
        )
    ).all()
    run.tallies["judge"]["calibrating"] += sum(q.kind == "calibration" for q in asked)
    kept = _kept({q.key for q in asked})
    waiting = []
    for question in asked:
        if question.key in kept:
            _land(run, question, kept[question.key])
        else:
            waiting.append(question.pk)
    hits = len(asked) - len(waiting)
    after_commit(lambda: telemetry.JUDGE_CACHE_HITS.inc(hits))
    if waiting:
        after_commit(lambda: task_queue().enqueue(waiting))


def _kept(keys: set[str]) -> dict[str, judge.Verdict]:
    rows = sql().execute(
        select(JudgeVerdict.key, JudgeVerdict.outcome, JudgeVerdict.reason).where(
            JudgeVerdict.key.in_(keys)
        )
    )
    return {key: judge.Verdict(outcome, reason) for key, outcome, reason in rows}


# ---------------------------------------------------------------- a worker asks


def ask(question_pk: int) -> None:
    """A worker's task: lease the question, ask the judge (unless the cache knows), and land
    the verdict. A question answered already, leased to another worker, or of a canceled run
    is left alone."""
    configured = judge_settings()
    if configured is None:
        return
    set_writing(True)  # this worker thread's transactions write (SQLite: BEGIN IMMEDIATE)
    lease = timedelta(seconds=lease_seconds(configured))
    with on_its_own():
        question = db.session.get(JudgeQuestion, question_pk, with_for_update=True)
        run = db.session.get(TestRun, question.run_pk) if question else None
        if question is None or question.outcome is not None or run.status == "canceled":
            return
        now = clock()
        if question.lease_until is not None and question.lease_until > now:
            # another worker is asking: look again when its lease runs out (it may have died)
            task_queue().enqueue([question_pk], after=(question.lease_until - now).total_seconds())
            return
        question.lease_until = now + lease
        key, asked = question.key, question.question
        verdict = _kept({key}).get(key)
    if verdict is None:  # asked with no transaction open: a call takes seconds
        started = time.perf_counter()
        verdict = _judge(configured).ask(
            judge.Question(asked["expectation"], asked["corrected"], asked["candidate"])
        )
        telemetry.JUDGE_LATENCY.observe(time.perf_counter() - started)
        telemetry.JUDGE_CALLS.labels(verdict.outcome).inc()
    else:
        telemetry.JUDGE_CACHE_HITS.inc()
    _land_when_free(question_pk, verdict, configured.model)


def _land_when_free(question_pk: int, verdict: judge.Verdict, model: str) -> None:
    """Land the verdict, again while the database is busy: a finish marking a large run's
    cases holds the run past the lock timeout (seconds at a million cases), and a landing that
    failed left its question leased, so asked again, and paid again, only once the lease ran
    out, minutes later. Landing twice is safe: a question with a verdict is left alone."""
    for tries_left in reversed(range(LANDING_TRIES)):
        try:
            land(question_pk, verdict, model)
            return
        except Exception as exc:
            if not tries_left or not (isinstance(exc, DatabaseBusy) or is_busy(exc)):
                raise


def land(question_pk: int, verdict: judge.Verdict, model: str) -> None:
    """Keep the verdict (a fault is never kept) and move its run's counts, once."""
    with on_its_own():
        question = db.session.get(JudgeQuestion, question_pk)
        run = db.session.get(TestRun, question.run_pk, with_for_update=True)
        db.session.refresh(question, with_for_update=True)
        if question.outcome is not None or run.status == "canceled":
            return  # landed already (a worker died after its verdict), or no longer wanted
        if verdict.outcome in ("pass", "fail"):
            sql().execute(
                _keep(dialect()),
                {
                    "key": question.key,
                    "model": model,
                    "prompt": judge.PROMPT_VERSION,
                    "outcome": verdict.outcome,
                    "reason": verdict.reason,
                    "at": clock(),
                },
            )
        _land(run, question, verdict)
        settle(run, run.tallies)


@cache
def _keep(dialect_name: str) -> Any:
    """Keep a verdict unless one is kept already (two runs asked at once): built once."""
    return insert_for(dialect_name, JudgeVerdict.__table__).on_conflict_do_nothing()


def _land(run: TestRun, question: JudgeQuestion, verdict: judge.Verdict) -> None:
    """One verdict into its question and its run's counts (the caller settles the run)."""
    question.outcome, question.reason = verdict.outcome, verdict.reason
    tallies = run.tallies
    if question.kind == "calibration":
        tallies["judge"]["calibrating"] -= 1
        if verdict.outcome != "error":  # a fault on a calibration question is not counted
            tallies["judge"]["asked"] += 1
            tallies["judge"]["agreed"] += verdict.outcome == "fail"
        flag_modified(run, "tallies")
        return
    row = db.session.get(RunCase, (run.pk, question.case_id))
    parts = dict(row.parts or {})
    parts["answer"] = {"outcome": verdict.outcome, "reason": verdict.reason}
    was = row.outcome
    now = grading.case_outcome(part["outcome"] for part in parts.values())
    reason = row.reason
    if now == "error" and reason is None:
        reason = verdict.reason
    sql().execute(
        update(RunCase.__table__)
        .where(RunCase.run_pk == run.pk, RunCase.case_id == question.case_id)
        .values(outcome=now, answer=verdict.outcome, parts=parts, reason=reason)
    )
    db.session.expire(row)
    answer = tallies["parts"]["answer"]
    answer["pending"] -= 1
    answer[verdict.outcome] += 1
    tallies["cases"][was] -= 1
    tallies["cases"][now] += 1
    comparison = tallies.get("comparison")
    if comparison is not None and was != now:
        theirs = _baseline_outcome(run, question.case_id)
        comparison[grading.compare_change(was, theirs)] -= 1
        comparison[grading.compare_change(now, theirs)] += 1
    flag_modified(run, "tallies")


_BASELINE = select(RunCase.outcome).where(
    RunCase.run_pk == bindparam("run"), RunCase.case_id == bindparam("case")
)


def _baseline_outcome(run: TestRun, case_id: str) -> str | None:
    if run.baseline_pk is None:
        return None
    return sql().execute(_BASELINE, {"run": run.baseline_pk, "case": case_id}).scalar()


# ---------------------------------------------------------------- the queue again


def requeue(*, leased_too: bool = False) -> int:
    """Queue again the questions still without a verdict (a worker died, or the queue was
    down): every minute those whose lease is free or has run out, and at a worker's start all
    of them (a task that finds a lease held waits for it to run out)."""
    query = (
        select(JudgeQuestion.pk)
        .join(TestRun, TestRun.pk == JudgeQuestion.run_pk)
        .where(JudgeQuestion.outcome.is_(None), TestRun.status != "canceled")
    )
    if not leased_too:
        query = query.where(
            or_(JudgeQuestion.lease_until.is_(None), JudgeQuestion.lease_until <= clock())
        )
    waiting = list(db.session.scalars(query))
    abandon()
    task_queue().enqueue(waiting)
    return len(waiting)
