"""The service module without HTTP: rules and state changes called directly."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from argon2 import PasswordHasher
from conftest import AGENT, MULTI, P1, P2, P3
from sqlalchemy import func, select

from kindgi import errors, service
from kindgi.database import db
from kindgi.models import Case, Snapshot, Tally, User


@pytest.fixture
def ctx(app):
    with app.app_context():
        yield
        db.session.rollback()


def principal(token: str) -> service.Principal:
    return service.authenticate(f"Bearer kgi_{token}")


def true_counts(agent_pk: int, project_id: str) -> tuple[int, int]:
    """Counts computed the slow way, straight from the cases."""
    rows = db.session.scalars(
        select(Case).where(Case.agent_pk == agent_pk, Case.project_id == project_id)
    ).all()
    cases = [c for c in rows if c.is_case]
    return (
        sum(c.retired_at is None for c in cases),
        sum(c.retired_at is not None for c in cases),
    )


def test_a_hand_case_is_added_with_its_run_snapshot_and_counted(ctx):
    admin = principal("admin")
    before = service.test_set(admin, AGENT, P1)
    case, duplicates = service.add_hand_case(admin, AGENT, {"runId": "run-2", "answer": "right"})
    assert duplicates == []
    assert case.id.startswith("case-") and case.kind == "hand" and case.expert
    assert case.expect == {"answer": {"verdict": "right"}}
    assert db.session.get(Snapshot, "run-2").output == {"answer": "two"}
    assert service.test_set(admin, AGENT, P1).active == before.active + 1


def test_a_later_case_shares_the_first_snapshot_of_its_run(ctx):
    admin = principal("admin")
    service.add_hand_case(admin, AGENT, {"runId": "run-2", "answer": "right"})
    service.add_hand_case(admin, AGENT, {"runId": "run-2", "answer": "wrong", "why": "x"})
    assert (
        db.session.scalar(
            select(func.count()).select_from(Snapshot).where(Snapshot.run_id == "run-2")
        )
        == 1
    )


def test_counts_stay_exact_through_any_sequence_of_changes(ctx):
    admin = principal("admin")
    rng = random.Random(4)
    agent_pk = db.session.scalar(select(Case.agent_pk).where(Case.id == "cor-1"))
    corrections = ["cor-1", "cor-2"]
    for _ in range(60):
        move = rng.choice(["hand", "correction", "status", "retire", "restore"])
        try:
            if move == "hand":
                service.add_hand_case(admin, AGENT, {"runId": "run-1", "answer": "right"})
            elif move == "correction":
                corrections.append(
                    service.record_correction(admin, AGENT, "run-2", {"decisions": "right"}).id
                )
            elif move == "status":
                service.set_correction_status(
                    admin,
                    AGENT,
                    rng.choice(corrections),
                    rng.choice(["open", "with-the-owner", "fixed", "wont-fix", "removed"]),
                )
            else:
                ids = db.session.scalars(select(Case.id).where(Case.agent_pk == agent_pk)).all()
                fn = service.retire_case if move == "retire" else service.restore_case
                args = ("obsolete",) if move == "retire" else ()
                fn(admin, AGENT, rng.choice(ids), *args)
        except (errors.CaseRetired, errors.CaseActive, errors.CaseNotFound):
            pass
        counts = service.test_set(admin, AGENT, P1)
        assert (counts.active, counts.retired) == true_counts(agent_pk, P1)


def test_rebuilding_the_tallies_gives_the_counts_kept_incrementally(ctx):
    admin = principal("admin")
    service.add_hand_case(admin, AGENT, {"runId": "run-1", "answer": "right"})
    service.retire_case(admin, AGENT, "cor-1", "old")
    kept = sorted(
        (t.agent_pk, t.project_id, t.kind, t.retired, t.expert, t.n)
        for t in db.session.scalars(select(Tally))
        if t.n
    )
    service.rebuild_tallies()
    rebuilt = sorted(
        (t.agent_pk, t.project_id, t.kind, t.retired, t.expert, t.n)
        for t in db.session.scalars(select(Tally))
    )
    assert kept == rebuilt


def test_a_token_authenticates_its_principal_and_a_service_acts_as_its_token(ctx):
    ci = principal("ci")
    assert (ci.kind, ci.id, ci.tenant_id) == ("service", "svc-ci", "acme")
    assert ci.actor == {"kind": "service", "id": "tok-ci"}
    assert principal("reader").actor == {"kind": "user", "id": "u-reader"}


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Basic kgi_admin",
        "Bearer admin",
        "Bearer kgi_nope",
        "Bearer kgi_expired",
        "Bearer kgi_revoked",
    ],
)
def test_every_kind_of_bad_token_is_unauthenticated(ctx, header):
    with pytest.raises(errors.Unauthenticated):
        service.authenticate(header)


def test_the_multi_project_rule_needs_write_on_the_cases_project(ctx):
    with pytest.raises(errors.Forbidden) as refused:
        service.add_hand_case(
            principal("publisher"), MULTI, {"runId": "run-multi", "answer": "right"}
        )
    assert refused.value.details == {"needs": [{"permission": "write", "project": P2}]}
    case, _ = service.add_hand_case(
        principal("expert"), MULTI, {"runId": "run-multi", "answer": "right"}
    )
    assert case.project_id == P2


def test_the_cases_page_learns_what_a_caller_may_do_with_its_content(ctx):
    reader = service.cases_page(principal("reader"), AGENT, P1, with_counts=True)
    publisher = service.cases_page(principal("publisher"), AGENT, P1, with_counts=False)
    assert (reader.may_publish, publisher.may_publish) == (False, True)
    assert reader.counts.active == service.test_set(principal("reader"), AGENT, P1).active
    assert publisher.counts is None
    assert [row.id for row in reader.page.items] == [row.id for row in publisher.page.items]


def test_another_tenants_agent_is_not_found(ctx):
    with pytest.raises(errors.AgentNotFound):
        service.test_set(principal("globex"), MULTI, P1)
    with pytest.raises(errors.ProjectNotFound):
        service.test_set(principal("globex"), AGENT, P1)


def test_a_password_checks_out_and_a_wrong_one_or_unknown_email_alike_do_not(ctx):
    assert service.sign_in("Reader@acme.test", "reader-pass-1").id == "u-reader"
    assert service.sign_in("reader@acme.test", "wrong") is None
    assert service.sign_in("nobody-here@acme.test", "reader-pass-1") is None


def test_a_password_hashed_with_other_parameters_signs_in_and_is_hashed_anew(ctx):
    """Hashes made before the parameters changed (argon2-cffi's default, 64 MiB) still verify,
    and the next sign-in stores one with today's parameters."""
    reader = db.session.get(User, "u-reader")
    reader.password_hash = PasswordHasher().hash("reader-pass-1")
    db.session.commit()
    assert service.sign_in("reader@acme.test", "reader-pass-1").id == "u-reader"
    db.session.commit()
    stored = db.session.get(User, "u-reader").password_hash
    assert "m=19456,t=2,p=1" in stored
    assert service.sign_in("reader@acme.test", "reader-pass-1").id == "u-reader"


@pytest.mark.parametrize("email", ["reader@acme.test", "nobody-here@acme.test"])
def test_sign_in_stops_after_ten_failures_in_fifteen_minutes_known_email_or_not(
    ctx, set_clock, email
):
    start = service.clock()
    for _ in range(service.LOGIN_MAX_FAILURES):
        assert service.sign_in(email, "wrong") is None
    with pytest.raises(errors.TooManyAttempts):
        service.sign_in(email, "reader-pass-1")  # even the right password waits
    later = start + service.LOGIN_WINDOW + timedelta(seconds=5)
    set_clock(later)
    expected = "u-reader" if email.startswith("reader") else None
    assert getattr(service.sign_in(email, "reader-pass-1"), "id", None) == expected


def test_the_overview_lists_what_the_caller_reads_busiest_first_empty_sets_last(ctx):
    rows = service.overview(principal("admin"))
    # P1's newest case (case-2, 16 April) is newer than P2's (cor-3, 15 April); P3 has none
    assert [(r.agent_id, r.project_id) for r in rows] == [(AGENT, P1), (MULTI, P2), (MULTI, P3)]
    assert (rows[-1].active, rows[-1].retired, rows[-1].last_added_at) == (0, 0, None)
    reader = service.overview(principal("reader"))
    assert {(r.agent_id, r.project_id) for r in reader} == {(AGENT, P1), (MULTI, P2)}
    assert service.overview(principal("nobody")) == []
