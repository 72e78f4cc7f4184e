"""Cases' stances (kindgi.stance, docs/design.md §9.9 and §9.11): the parts, verdicts, input key
and tools a case's expectation gives, stored when it is made, revised, imported or frozen, and
written by migration 0016 for what was stored before it."""

from __future__ import annotations

import json

from conftest import AGENT, MULTI, P1, P2, app_on, ok
from flask_migrate import downgrade, upgrade
from sqlalchemy import select, text

from kindgi import stance
from kindgi.database import db
from kindgi.models import Case, CaseRecord, VersionMember

V = f"/v1/agents/{AGENT}"
CASES = f"{V}/test-set/cases"
LEASE = {"q": "Draft a lease clause"}  # run-1's input; the run called `search`


def stored(app, case_id: str) -> tuple:
    with app.app_context():
        row = db.session.execute(
            select(Case.parts, Case.rights, Case.input_key, Case.wants, Case.forbids).where(
                Case.id == case_id
            )
        ).one()
        return tuple(row)


def members(app, case_id: str) -> list[int]:
    with app.app_context():
        return list(
            db.session.scalars(
                select(VersionMember.parts)
                .where(VersionMember.case_id == case_id)
                .order_by(VersionMember.version_pk)
            )
        )


def test_the_pure_rules() -> None:
    assert stance.parts_code({"answer": {"verdict": "right"}, "items": []}) == 6
    assert stance.input_key({"a": 1, "b": [1, 2]}) == stance.input_key({"b": [1, 2], "a": 1})
    assert stance.input_key({"a": 1}) != stance.input_key({"a": 2})
    calls = [{"tool": "search"}, {"tool": "search"}, {"tool": 3}, "junk"]
    right = {"decisions": {"verdict": "right"}, "answer": {"verdict": "wrong"}}
    assert stance.stance(right, "k", calls) == (3, 1, "k", ["search"], None)
    wrong = {"decisions": {"verdict": "wrong", "shouldCall": [{"tool": "b"}, {"tool": "a"}],
                           "mustNotCall": ["z", "z"]}}  # fmt: skip
    assert stance.stance(wrong, "k", calls) == (1, 0, "k", ["a", "b"], ["z"])


def test_a_case_keeps_its_stance_made_revised_frozen_and_imported(app, api, tmp_path):
    made = ok(api.post(CASES, {"runId": "run-1", "decisions": "right", "answer": "wrong",
                               "shouldSay": "Cite clause 7."}), 201)["id"]  # fmt: skip
    key = stance.input_key(LEASE)
    assert stored(app, made) == (3, 1, key, ["search"], None)
    ok(api.post("/v1/agents/acme.drafting/test-runs", {"projectId": P1, "candidate": "1"}), 201)
    assert members(app, made) == [3]
    revised = {"decisions": "wrong", "shouldCall": [{"tool": "lookup"}],
               "mustNotCall": ["send_email"], "note": "It should look the clause up."}  # fmt: skip
    ok(api.post(f"{CASES}/{made}/revise", revised, headers={"If-Match": '"r1"'}))
    assert stored(app, made) == (1, 0, key, ["lookup"], ["send_email"])
    ok(api.post("/v1/agents/acme.drafting/test-runs", {"projectId": P1, "candidate": "2"}), 201)
    assert members(app, made) == [3, 1]  # each version keeps the parts it froze

    exported = api.get(f"{V}/test-set/export?projectId={P1}").get_data(as_text=True)
    line = next(json.loads(x) for x in exported.splitlines() if json.loads(x)["id"] == made)
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(line) + "\n")
    before = {c.id for c in _cases(app, MULTI)}
    result = app.test_cli_runner().invoke(
        args=["kindgi", "import", str(path), "--agent", MULTI, "--project", P2]
    )
    assert result.exit_code == 0, result.output
    (imported,) = {c.id for c in _cases(app, MULTI)} - before
    assert stored(app, imported) == (1, 0, key, ["lookup"], ["send_email"])
    check = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert check.exit_code == 0 and "case stances: ok" in check.output, check.output


def _cases(app, agent_id: str) -> list:
    with app.app_context():
        return db.session.execute(
            text("SELECT c.id FROM cases c JOIN agents a ON a.pk = c.agent_pk WHERE a.id = :a"),
            {"a": agent_id},
        ).all()


def test_migration_0016_writes_the_stances_parts_and_records_already_stored(databases):
    """Upgrading a store of cases, versions (one pinning a revision the case has left) and done
    runs to 0016 writes what the service keeps from then on: going down to 0013 and up again
    gives back the same stances, members' parts and records, and the check passes."""
    with app_on(databases, databases.clone()) as app, app.app_context():
        api_client = app.test_client()
        auth = {"Authorization": "Bearer kgi_admin"}

        def post(path, body, **headers):
            resp = api_client.post(path, json=body, headers={**auth, **headers})
            assert resp.status_code in (200, 201), resp.get_json()
            return resp.get_json()

        made = post(CASES, {"runId": "run-1", "decisions": "right"})["id"]
        post(f"{V}/test-runs", {"projectId": P1, "candidate": "1"})
        post(f"{CASES}/case-2/revise", {"answer": "wrong", "why": "No.", "note": "n"},
             **{"If-Match": '"r1"'})  # fmt: skip
        for candidate in ("1.0", "2.0"):
            run = post(f"{V}/test-runs", {"projectId": P1, "candidate": candidate})
            results = [{"caseId": c, "output": {"answer": "x"}, "calls": []}
                       for c in ("cor-1", "case-2", made)]  # fmt: skip
            post(f"{V}/test-runs/{run['id']}/results", {"results": results})
        read = (
            select(
                Case.id, Case.parts, Case.rights, Case.input_key, Case.wants, Case.forbids
            ).order_by(Case.id),
            select(VersionMember.version_pk, VersionMember.case_id, VersionMember.parts).order_by(
                VersionMember.version_pk, VersionMember.case_id
            ),
            select(CaseRecord.__table__).order_by(CaseRecord.case_id),
        )
        before = [db.session.execute(query).all() for query in read]
        assert (4,) in {(parts,) for _, case_id, parts in before[1] if case_id == "case-2"}
        assert before[2] and all(row.by_candidate for row in before[2])
        db.session.remove()
        downgrade(revision="0013")
        upgrade()
        db.session.remove()
        assert [db.session.execute(query).all() for query in read] == before
        check = app.test_cli_runner().invoke(args=["kindgi", "check"])
        assert check.exit_code == 0, check.output
