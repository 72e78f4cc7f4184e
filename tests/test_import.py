"""`flask kindgi import FILE --agent --project`: an export's JSON lines into another test set,
through Flask's CLI runner on real databases: the same expectations and snapshots come back out,
and a bad line imports nothing and is named."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from conftest import AGENT, MULTI, P1, P2, error_of, ok

from kindgi import exchange

MATCHED = {
    "runId": "run-1",
    "decisions": "wrong",
    "shouldCall": [
        {"tool": "weather", "args": {"days": 3}, "match": {"city": {"anyOf": ["NY", "New York"]}}}
    ],
    "exactly": True,
    "answer": "wrong",
    "shouldSay": "Sunny.",
}


def export(api, agent: str, project: str) -> list[dict[str, Any]]:
    resp = api.get(f"/v1/agents/{agent}/test-set/export?projectId={project}")
    assert resp.status_code == 200
    return [json.loads(line) for line in resp.get_data(as_text=True).splitlines()]


def kept(lines: list[dict[str, Any]]) -> Counter:
    """What an import must carry over: each case's expectation and its run's content."""
    return Counter(
        json.dumps([c["expect"], c["input"], c["output"], c["calls"]], sort_keys=True)
        for c in lines
    )


def run_import(app, path, agent: str = MULTI, project: str = P2):
    return app.test_cli_runner().invoke(
        args=["kindgi", "import", str(path), "--agent", agent, "--project", project]
    )


def test_an_export_imported_into_another_set_comes_back_out_the_same(app, api, tmp_path):
    ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", MATCHED), 201)
    lines = export(api, AGENT, P1)
    assert any("match" in str(c["expect"]) for c in lines)
    before = {c["id"] for c in export(api, MULTI, P2)}
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in lines))

    result = run_import(app, path)

    assert result.exit_code == 0, result.output
    assert f"imported {len(lines)} cases" in result.output
    now = export(api, MULTI, P2)
    imported = [c for c in now if c["id"] not in before]
    assert kept(imported) == kept(lines)
    assert {c["kind"] for c in imported} == {"hand"}
    assert {c["madeOn"] for c in imported} == {c["madeOn"] for c in lines}
    # each on a finished run of its own, in the project it went to
    runs = ok(api.get(f"/v1/agents/{MULTI}/runs?projectId={P2}&status=finished&limit=100"))
    assert {c["runId"] for c in imported} <= {r["id"] for r in runs["data"]}
    assert len({c["runId"] for c in imported}) == len(imported)


def test_a_bad_line_imports_nothing_and_is_named(app, unchanged, tmp_path):
    good = {"expect": {"answer": {"verdict": "right"}}, "input": "q", "output": "a", "calls": []}
    bad = {**good, "expect": {"decisions": {"verdict": "wrong", "shouldCall": [
        {"tool": "w", "match": {"city": {"anyOf": []}}}]}}}  # fmt: skip
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in (good, good, bad)))
    with unchanged():
        result = run_import(app, path)
    assert result.exit_code != 0
    assert "nothing was imported" in result.output
    assert '"3.shouldCall.0.match.city"' in result.output


def test_an_item_pointing_at_nothing_in_its_output_imports_nothing_and_is_named(
    app, unchanged, tmp_path
):
    good = {"expect": {"answer": {"verdict": "right"}}, "output": {"matches": [1]}}
    bad = {**good, "expect": {"items": [{"key": "k", "pointer": "/matches/5", "verdict": "right"}]}}
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in (good, bad)))
    with unchanged():
        result = run_import(app, path)
    assert result.exit_code != 0
    assert "item-not-found" in result.output and '"2.items.0.pointer"' in result.output


def test_a_line_that_is_not_json_imports_nothing_and_is_named(app, unchanged, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"expect": {"answer": {"verdict": "right"}}}\n\n{oops\n')
    with unchanged():
        result = run_import(app, path)
    assert result.exit_code != 0 and "line 3: not JSON" in result.output


def test_an_agent_not_serving_the_project_imports_nothing(app, api, unchanged, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"expect": {"answer": {"verdict": "right"}}}) + "\n")
    with unchanged():
        result = run_import(app, path, AGENT, P2)
    assert result.exit_code != 0 and "nothing was imported" in result.output


def test_a_stored_expectation_is_the_body_that_makes_it_again(api) -> None:
    case = ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", MATCHED), 201)
    body = exchange.case_body(case["expect"])
    again = ok(api.post(f"/v1/agents/{AGENT}/test-set/cases", {**body, "runId": "run-1"}), 201)
    assert again["expect"] == case["expect"]
    refused = api.post(f"/v1/agents/{AGENT}/test-set/cases", {**body, "runId": "nope"})
    assert error_of(refused)["code"] == "run-not-found"
