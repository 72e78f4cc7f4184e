"""`kindgi test-run` end to end (docs/design.md §9.6): the console script against a live gunicorn,
running the example agent (docs/examples/agent.py) on every case, as a CI job would.

The set: the world's cor-1 (should call `lookup`) and case-2 (items: k1 right, which the agent
never ranks: it always fails), and two hand cases on run-1 ("Draft a lease clause") added here:
W (should call `search` with the question, must not call `send_email`) and I (m0 right, m1 wrong).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import requests
from conftest import AGENT, P1, ok
from live import ROOT, front, gunicorn

KINDGI = str(Path(sys.executable).parent / "kindgi")
AGENT_PY = [sys.executable, str(ROOT / "docs/examples/agent.py")]
AUTH = {"Authorization": "Bearer kgi_admin"}
QUESTION = "Draft a lease clause"


@pytest.fixture
def server(app, api, tmp_path):
    """The test world with W and I added, served by gunicorn; the base URL and their ids."""
    cases = f"/v1/agents/{AGENT}/test-set/cases"
    w = ok(
        api.post(
            cases,
            {
                "runId": "run-1",
                "decisions": "wrong",
                "mustNotCall": ["send_email"],
                "shouldCall": [{"tool": "search", "args": {"q": QUESTION}}],
            },
        ),
        201,
    )
    i = ok(api.post(cases, {"runId": "run-1", "items": [
        {"key": "m0", "pointer": "/matches/0", "verdict": "right"},
        {"key": "m1", "pointer": "/matches/1", "verdict": "wrong"}]}), 201)  # fmt: skip
    with gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], tmp_path / "gunicorn.log", 2) as base:
        yield base, {"W": w["id"], "I": i["id"]}


def kindgi(base: str, *args: str, agent: list[str] | None = None, token: str = "kgi_admin",
           **popen: object) -> subprocess.Popen[str]:  # fmt: skip
    command = [KINDGI, "test-run", "--url", base, "--agent", AGENT, "--project", P1, *args, "--"]
    # this checkout's kindgi, not the one the shared virtualenv installed
    env = {**os.environ, "KINDGI_TOKEN": token, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        command + (agent or AGENT_PY), env=env, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, **popen,
    )  # fmt: skip


def finished(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def runs(base: str) -> list[dict]:
    url = f"{base}/v1/agents/{AGENT}/test-runs?projectId={P1}"
    return requests.get(url, headers=AUTH, timeout=10).json()["data"]


def results(base: str, run_id: str) -> dict[str, dict]:
    url = f"{base}/v1/agents/{AGENT}/test-runs/{run_id}/results?limit=100"
    return {r["caseId"]: r for r in requests.get(url, headers=AUTH, timeout=10).json()["data"]}


def test_a_passing_candidate_meets_the_gate_and_its_junit_counts_as_the_run(server, tmp_path):
    base, _ = server
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    code, out, err = finished(kindgi(base, "--candidate", "2.0.0", "--min-pass-rate", "0.7",
                                     "--junit", str(junit), "--summary", str(summary)))  # fmt: skip
    assert code == 0, err
    (run,) = runs(base)
    assert run["status"] == "done" and run["cases"]["pass"] == 3 and run["cases"]["fail"] == 1
    assert "gate met" in out and run["id"] in out and "75.0%" in out
    suite = ET.parse(junit).getroot()
    counted = [int(suite.get(k)) for k in ("tests", "failures", "errors")]
    assert counted == [run["cases"]["total"], run["cases"]["fail"], run["cases"]["error"]]
    assert "gate met" in summary.read_text()
    assert "Traceback" not in err


def test_a_regression_fails_the_gate_and_names_the_case(server, tmp_path):
    base, ids = server
    assert finished(kindgi(base, "--candidate", "1.0.0"))[0] == 0
    summary = tmp_path / "summary.md"
    code, out, err = finished(
        kindgi(base, "--candidate", "2.0.0", "--baseline", "latest", "--max-regressions", "0",
               "--summary", str(summary), agent=[*AGENT_PY, "--call", "send_email"])
    )  # fmt: skip
    assert code == 1, err
    assert "gate failed: 1 regressed (at most 0)" in out
    regressed = [line for line in out.splitlines() if line.strip().startswith("regressed:")]
    assert len(regressed) == 1 and ids["W"] in regressed[0] and "send_email" in regressed[0]
    assert ids["W"] in summary.read_text() and "p = 1" in out


def test_a_quick_run_grades_its_sample_and_exits_3_when_its_estimate_cant_tell(server):
    """Three of the four cases, with no history: a plain random sample whose interval is too
    wide to say whether the pass rate is at least a half (docs/design.md §9.9)."""
    base, _ = server
    code, out, err = finished(kindgi(base, "--candidate", "2.0.0", "--sample", "3", "--seed",
                                     "1", "--min-pass-rate", "0.5"))  # fmt: skip
    assert code == 3, err
    (run,) = runs(base)
    assert run["cases"]["total"] == 3 and run["sample"] == {"size": 3, "seed": 1, "population": 4}
    assert run["estimate"]["low"] < 0.5 <= run["estimate"]["high"]
    assert "from a sample of 3 of 4 cases (seed 1)" in out
    assert "gate can't tell: estimated pass rate" in out and "run the whole set" in out


def test_a_crashing_agent_makes_its_cases_errors_with_its_reason(server):
    base, ids = server
    code, _, err = finished(kindgi(base, "--candidate", "2.0.0", "--jobs", "2",
                                     agent=[*AGENT_PY, "--crash-on", "lease"]))  # fmt: skip
    assert code == 0, err  # no gate was asked for
    (run,) = runs(base)
    got = results(base, run["id"])
    for case_id in (ids["W"], ids["I"], "cor-1"):
        assert got[case_id]["outcome"] == "error"
        assert got[case_id]["reason"].startswith("exit status 3: example agent: can't handle")
    assert got["case-2"]["outcome"] == "fail"  # its run asked something else


def test_the_jsonl_protocol_runs_one_agent_per_job_for_many_cases(server):
    base, _ = server
    code, _, err = finished(kindgi(base, "--candidate", "2.0.0", "--protocol", "jsonl",
                                     "--jobs", "2", agent=[*AGENT_PY, "--jsonl"]))  # fmt: skip
    assert code == 0, err
    (run,) = runs(base)
    assert (run["cases"]["pass"], run["cases"]["fail"], run["cases"]["error"]) == (3, 1, 0)


def test_an_interrupted_run_resumes_with_the_cases_it_had_not_sent(server):
    base, _ = server
    proc = kindgi(base, "--candidate", "2.0.0", agent=[*AGENT_PY, "--sleep", "1"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some results are in (sent every 2 s)
        found = runs(base)
        if found and found[0]["cases"]["awaiting"] < 4:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    code, _, err = finished(proc)
    run = runs(base)[0]
    assert code == 2, err
    assert f"--resume {run['id']}" in err.splitlines()[-1]
    left = run["cases"]["awaiting"]
    assert 0 < left < 4
    code, _, err = finished(kindgi(base, "--candidate", "2.0.0", "--resume", run["id"]))
    assert code == 0, err
    assert f"{left} cases to run" in err
    done = runs(base)[0]
    assert done["cases"]["awaiting"] == 0 and done["cases"]["error"] == 0
    assert (done["cases"]["pass"], done["cases"]["fail"]) == (3, 1)


def test_a_server_answering_503_for_a_while_is_retried(server):
    base, _ = server
    with front(base, [("before", 503, "database-busy")] * 6) as proxy:
        code, _, err = finished(kindgi(proxy.url, "--candidate", "2.0.0"))
    assert code == 0, err
    assert not proxy.faults
    (run,) = runs(base)
    assert run["cases"]["awaiting"] == 0 and run["cases"]["pass"] == 3


@pytest.mark.parametrize(
    ("token", "agent", "said"),
    [
        ("kgi_not-a-token", None, "the server refused the token"),
        ("kgi_admin", ["no-such-agent-command"], "can't be started: no-such-agent-command"),
    ],
)
def test_a_bad_token_or_a_missing_command_is_exit_2_with_one_line(server, token, agent, said):
    base, _ = server
    code, _, err = finished(kindgi(base, "--candidate", "2.0.0", agent=agent, token=token))
    assert code == 2
    assert err.strip().count("\n") == 0 and said in err, err
    assert runs(base) == []  # nothing was opened


# An agent whose answer nests 150 arrays deep for the lease question, 5,000 for the others
DEEP_AGENT = [sys.executable, "-c", (
    "import json, sys\n"
    "case = json.load(sys.stdin)\n"
    "n = 150 if 'lease' in json.dumps(case) else 5000\n"
    "print('{\"output\": ' + '[' * n + ']' * n + ', \"calls\": []}')\n"
)]  # fmt: skip


def test_an_answer_nested_past_the_apis_limit_is_its_case_error_not_the_runs_end(server):
    """The API refuses a body nested more than 100 deep (docs/errors.md), which would have
    refused the whole batch: the command makes such an answer its case's error, and one too
    deep for Python's parser too, and runs on."""
    base, ids = server
    code, _, err = finished(kindgi(base, "--candidate", "2.0.0", agent=DEEP_AGENT))
    assert code == 0, err
    (run,) = runs(base)
    assert run["status"] == "done" and run["cases"]["error"] == run["cases"]["total"] == 4
    got = results(base, run["id"])
    for case_id in (ids["W"], ids["I"], "cor-1"):
        assert "past the API's limit (100 in a body" in got[case_id]["reason"]
    assert got["case-2"]["reason"] == "the answer nests arrays and objects too deep to read"


def test_tag_grades_only_the_cases_with_it(server):
    base, ids = server
    url = f"{base}/v1/agents/{AGENT}/test-set/cases/{ids['W']}/tags"
    assert requests.post(url, json={"add": ["smoke"]}, headers=AUTH, timeout=10).ok
    code, _, err = finished(kindgi(base, "--candidate", "2.0.0", "--tag", "smoke"))
    assert code == 0, err
    (run,) = runs(base)
    assert run["tags"] == ["smoke"] and run["cases"]["total"] == 1
    assert list(results(base, run["id"])) == [ids["W"]]
