"""`flask --app app kindgi check`: a clean world passes; each kind of breach, made by corrupting
the database directly with SQL, is named and exits non-zero."""

from __future__ import annotations

import pytest
from conftest import AGENT, P1
from sqlalchemy import text

from kindgi.database import db

CASES = f"/v1/agents/{AGENT}/test-set/cases"
TR = f"/v1/agents/{AGENT}/test-runs"


@pytest.fixture
def busy_world(app, api):
    """The test world with what the checker reads beyond it: a hand case added with an
    Idempotency-Key (its answer kept), a correction made no case, a test run with a result
    (and one awaiting), a done one (its cases' records kept), and case-2 revised after both
    froze it, and tagged."""
    added = api.post(
        CASES, {"runId": "run-2", "answer": "right"}, headers={"Idempotency-Key": "k-check"}
    )
    assert added.status_code == 201, added.get_json()
    moved = api.patch(f"/v1/agents/{AGENT}/corrections/cor-1", {"status": "wont-fix"})
    assert moved.status_code == 200, moved.get_json()
    run = api.post(TR, {"projectId": P1, "candidate": "2.0.0"})
    assert run.status_code == 201, run.get_json()
    sent = api.post(
        f"{TR}/{run.get_json()['id']}/results",
        {"results": [{"caseId": "case-2", "output": {"answer": "x"}, "calls": []}]},
    )
    assert sent.status_code == 200, sent.get_json()
    done = api.post(TR, {"projectId": P1, "candidate": "2.0.1"})
    results = [{"caseId": c, "output": {"answer": "x"}, "calls": []}
               for c in ("case-2", added.get_json()["id"])]  # fmt: skip
    sent = api.post(f"{TR}/{done.get_json()['id']}/results", {"results": results})
    assert sent.get_json()["run"]["status"] == "done", sent.get_json()
    revised = api.post(
        f"{CASES}/case-2/revise",
        {"answer": "right", "note": "n"},
        headers={"If-Match": '"r1"'},
    )
    assert revised.status_code == 200, revised.get_json()
    tagged = api.post(f"{CASES}/case-2/tags", {"add": ["smoke", "billing"]})
    assert tagged.status_code == 200, tagged.get_json()
    return {"case": added.get_json()["id"], "run": run.get_json()["id"]}


def check(app):
    return app.test_cli_runner().invoke(args=["kindgi", "check"])


def corrupt(app, statement: str, **params) -> None:
    with app.app_context():
        assert db.session.execute(text(statement), params).rowcount >= 1
        db.session.commit()


def test_a_clean_world_passes_every_rule(app, busy_world):
    result = check(app)
    assert result.exit_code == 0, result.output
    for rule in ("counts", "snapshots", "correction statuses", "search words", "case revisions",
                 "case tags", "idempotency answers", "test run tallies", "runs made cases",
                 "run tools", "run words", "case records", "case stances"):  # fmt: skip
        assert f"{rule}: ok" in result.output


BREACHES = {
    # (SQL that breaks one invariant, what the checker says about it)
    "a count cell one too many": (
        "UPDATE tallies SET n = n + 1 WHERE kind = 'hand' AND retired = :no",
        "holds 2, its cases number 1",
    ),
    "a case deleted behind the counts' back": (
        "DELETE FROM cases WHERE id = :case",
        "holds 1, its cases number 0",
    ),
    "a case's snapshot gone": (
        "DELETE FROM snapshots WHERE run_id = 'run-2'",
        "case case-2 points at run run-2, which has no snapshot",
    ),
    "a correction without a status": (
        "UPDATE cases SET status = NULL WHERE id = 'cor-1'",
        "case cor-1 of kind 'correction' has status None",
    ),
    "a hand case with a status": (
        "UPDATE cases SET status = 'open' WHERE id = :case",
        "of kind 'hand' has status 'open'",
    ),
    "a correction back in the set without its count": (
        "UPDATE cases SET status = 'open' WHERE id = 'cor-1'",
        "counts: 1 breaches",
    ),
    "a case's text stored as its words, as 0006 stored it": (
        "UPDATE cases SET search_text = 'Draft a lease clause.' WHERE id = :case",
        "its words are not in the search's form",
    ),
    "a retire reason changed without its words": (
        "UPDATE cases SET retired_reason = 'another reason' WHERE id = 'case-1'",
        "case case-1: its retire reason's words are not the reason's",
    ),
    "a revision lost": (
        "DELETE FROM case_revisions WHERE case_id = 'case-2' AND revision = 1",
        "case case-2 is at revision 2, and keeps 1 revisions up to 2",
    ),
    "a case's expectation changed without a revision": (
        'UPDATE cases SET expect = \'{"answer": {"verdict": "wrong"}}\' WHERE id = \'case-2\'',
        "case case-2 expects other than its revision",
    ),
    "a case at revision 1 keeping revisions": (
        "UPDATE cases SET revision = 1 WHERE id = 'case-2'",
        "case case-2 is at revision 1, and keeps 2 revisions up to 2",
    ),
    "a version pinning a revision never made": (
        "UPDATE version_members SET revision = 5 WHERE case_id = 'case-2'",
        "version member case-2 pins revision 5, and its case is at 2",
    ),
    "a version member whose version is gone": (
        "UPDATE version_members SET version_pk = 9999 WHERE case_id = 'case-2'",
        "version member case-2 of version 9999: no such version",
    ),
    "a version member of a case that is not its set's": (
        "UPDATE version_members SET case_id = 'case-elsewhere' WHERE case_id = 'case-2'",
        "version member case-elsewhere of version",
    ),
    "a tag shown that the case lacks": (
        "UPDATE cases SET tags = 'billing,old,smoke' WHERE id = 'case-2'",
        "case case-2 shows tags 'billing,old,smoke', and has ['billing', 'smoke']",
    ),
    "a tag row of another time": (
        "UPDATE case_tags SET added_at = '2020-01-01 00:00:00' WHERE case_id = 'case-2'",
        "case case-2's tag billing is not of its set and time",
    ),
    "a key's answer whose case is gone": (
        "UPDATE idempotency_keys SET body = REPLACE(body, :case, 'case-gone') "
        "WHERE key = 'k-check'",
        "answered with cases case-gone, which does not exist",
    ),
    "a run's result undone behind its tallies": (
        "UPDATE test_run_cases SET outcome = 'awaiting', decisions = NULL, answer = NULL, "
        "items = NULL WHERE case_id = 'case-2' AND outcome != 'awaiting'",
        "cases awaiting is 1, its results number 2",
    ),
    "a part's outcome changed behind the tallies": (
        "UPDATE test_run_cases SET decisions = CASE WHEN decisions = 'fail' THEN 'pass' "
        "ELSE 'fail' END WHERE case_id = 'case-2' AND outcome != 'awaiting'",
        ": decisions fail is",
    ),
    "a run marked made a case that none was made from": (
        "UPDATE runs SET has_case = NOT has_case WHERE id = 'run-running'",
        "run run-running is marked with a case, and none was made from it",
    ),
    "a run made a case without its mark": (
        "UPDATE runs SET has_case = NOT has_case WHERE id = 'run-1'",
        "run run-1 is marked without a case, and one was made from it",
    ),
    "a run's tools lost": (
        "DELETE FROM run_tools WHERE run_id = 'run-1'",
        "run run-1 called ['search'], its tools kept are []",
    ),
    "a tool kept that the run never called": (
        "INSERT INTO run_tools (run_id, tool, agent_pk, project_id, at) "
        "SELECT id, 'ghost', agent_pk, project_id, at FROM runs WHERE id = 'run-2'",
        "run run-2 called [], its tools kept are ['ghost']",
    ),
    "a run's input changed without its words": (
        "UPDATE runs SET input = '{\"q\": \"something else\"}' WHERE id = 'run-2'",
        "run run-2: its words are not those of its input and output",
    ),
    "a case's record changed behind its runs": (
        "UPDATE case_records SET passed = passed + 1 WHERE case_id = 'case-2'",
        "case case-2: its record holds passed",
    ),
    "a case's record lost": (
        "DELETE FROM case_records WHERE case_id = 'case-2'",
        "case case-2: its record is missing",
    ),
    "a case's parts changed behind its expectation": (
        "UPDATE cases SET parts = 1 WHERE id = 'case-2'",
        "case case-2: its stance holds parts 1 (is 2)",
    ),
    "a case's wanted tools lost": (
        "UPDATE cases SET wants = NULL WHERE id = 'cor-1'",
        "case cor-1: its stance holds wants None (is ['lookup'])",
    ),
    "a version member's parts not its pinned revision's": (
        "UPDATE version_members SET parts = 1 WHERE case_id = 'case-2'",
        "case case-2: its parts 1 (its revision's are 4)",
    ),
    "a run's words not in the rule's form": (
        "UPDATE runs SET search_text = 'Lease clause!' WHERE id = 'run-1'",
        "run run-1: its words are not those of its input and output",
    ),
}


@pytest.mark.parametrize("breach", BREACHES)
def test_each_kind_of_breach_is_named_and_fails_the_check(app, busy_world, breach):
    statement, said = BREACHES[breach]
    if "body" in statement and app.config["SQLALCHEMY_DATABASE_URI"].startswith("postgresql"):
        statement = statement.replace(
            "REPLACE(body, :case, 'case-gone')",
            "convert_to(REPLACE(convert_from(body, 'UTF8'), :case, 'case-gone'), 'UTF8')",
        )
    corrupt(app, statement, case=busy_world["case"], no=False)
    result = check(app)
    assert result.exit_code == 1, result.output
    assert said in result.output, result.output
    assert "breaches of the database's invariants" in result.output


def test_sqlite_s_index_holding_a_run_that_is_gone_is_named(app, busy_world):
    """The runs' FTS5 table keeps no words of a deleted run (a trigger takes them out): words
    kept for a rowid no run has are a breach."""
    if not app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
        pytest.skip("PostgreSQL's index is a column of the run's own row")
    corrupt(app, "INSERT INTO run_search (rowid, doc) VALUES (987654, 'ghost words')")
    result = check(app)
    assert result.exit_code == 1, result.output
    assert "the runs' search index holds row 987654, which is no run's" in result.output
