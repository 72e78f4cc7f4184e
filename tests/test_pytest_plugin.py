"""The pytest plugin (kindgi/pytest_plugin.py) in a pytest of its own (pytester, in a subprocess)
against a live gunicorn, one for the module: each case a test, its outcome the case's grade, the
run on the server, the gate's exit status, pytest-xdist's workers sharing one run, a flaky
server's retries, a refused token.

The set: the world's cor-1 (should call `lookup`: the suite calls it, a pass) and case-2 (items,
k1 right: the suite ranks k0, a fail), and two hand cases on run-1 added here: B (must not call
`send_email`: the suite raises on it) and A (answer right: no judge, so ungraded, skipped).
"""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest
import requests
from conftest import AGENT, P1, app_on
from fake_judge import fake_judge
from live import ROOT, front, gunicorn
from test_judging import verdicts, worker

from kindgi import Client

SUITE = """
def test_the_agent(kindgi_case):
    assert set(kindgi_case.input) == {{"q"}} and kindgi_case.parts and kindgi_case.expect
    if kindgi_case.id == "cor-1":
        kindgi_case.answer({{"answer": "looked up"}}, calls=[{{"tool": "lookup", "args": {{}}}}])
    elif kindgi_case.id == "case-2":
        kindgi_case.answer({{"answer": "ranked"}}, ranked=["k0"])
    elif kindgi_case.id == "{raises}":
        raise RuntimeError("the agent broke on " + kindgi_case.id)
    else:
        kindgi_case.answer({{"answer": "Use clause 7."}})
"""


@pytest.fixture(scope="module")
def served(databases, tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """A gunicorn on a copy of the test world with A and B added: its URL and their ids."""
    log = tmp_path_factory.mktemp("plugin") / "gunicorn.log"
    with (
        app_on(databases, databases.clone()) as app,
        gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], log, 2) as base,
        Client(base, "kgi_admin") as kg,
    ):
        wrong = {"runId": "run-1", "decisions": "wrong", "mustNotCall": ["send_email"]}
        b = kg.add_case(AGENT, wrong)
        a = kg.add_case(AGENT, {"runId": "run-1", "answer": "right"})
        yield base, {"A": a["id"], "B": b["id"]}


def only_the_plugins_named(monkeypatch) -> None:
    """A pytest of its own loads only the plugins its command names: the virtualenv's others
    (hypothesis, schemathesis, playwright…) took 2 s of every process's start, xdist's workers
    too, and none of them is under test."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def run_suite(
    pytester, monkeypatch, url, ids, *args, token="kgi_admin", autoload=False
) -> pytest.RunResult:
    """The suite above in a pytest of its own, as a CI job would run it: with only the plugins
    named (`-p xdist.plugin` for `-n`), or with every installed one loaded (`autoload`)."""
    pytester.makepyfile(test_agent=SUITE.format(raises=ids["B"]))
    monkeypatch.setenv("KINDGI_URL", url)
    monkeypatch.setenv("KINDGI_TOKEN", token)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's kindgi, not the venv's
    if not autoload:
        only_the_plugins_named(monkeypatch)
    return pytester.runpytest_subprocess(
        "-p", "kindgi.pytest_plugin", "-p", "no:randomly", "-p", "no:cacheprovider",
        "--kindgi-agent", AGENT, "--kindgi-project", P1, *args,
    )  # fmt: skip


def latest(base: str) -> dict:
    with Client(base, "kgi_admin") as kg:
        return next(kg.test_runs(AGENT, P1))


def newest_id(base: str) -> str | None:
    """The newest run's id, or None before any (a test may be the first on its xdist worker)."""
    with Client(base, "kgi_admin") as kg:
        return next((run["id"] for run in kg.test_runs(AGENT, P1)), None)


def test_each_case_is_a_test_whose_outcome_is_its_grade(pytester, monkeypatch, served):
    base, ids = served
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-candidate", "2.0.0", "-rA",
                       "--junitxml", "report.xml")  # fmt: skip
    result.assert_outcomes(passed=1, failed=2, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # no gate: pytest's own status
    suite = ET.parse(pytester.path / "report.xml").getroot().find("testsuite")
    assert [suite.get(k) for k in ("tests", "failures", "skipped")] == ["4", "2", "1"]
    out = result.stdout.str()
    assert "PASSED test_agent.py::test_the_agent[cor-1]" in out
    assert "FAILED test_agent.py::test_the_agent[case-2] - Failed: items fail" in out
    # a failed grade is told by the grader's explanation alone, not the plugin's traceback
    failure = out.split("_ test_the_agent[case-2] _")[1].split("\n")[1:3]
    assert failure[0].startswith("items fail — unjudged") and failure[1][:1] in ("_", "="), failure
    assert "ungraded: answer ungraded" in out  # A, skipped with its reason
    run = latest(base)
    assert run["status"] == "done" and f"kindgi test run {run['id']}" in out
    cases = run["cases"]
    assert (cases["pass"], cases["fail"], cases["error"], cases["ungraded"]) == (1, 1, 1, 1)
    with Client(base, "kgi_admin") as kg:
        broke = kg.result(AGENT, run["id"], ids["B"])
    assert broke["outcome"] == "error" and "the agent broke on" in broke["reason"]


@pytest.mark.parametrize(("floor", "status"), [("0.4", 0), ("0.9", 1)])
def test_a_gate_alone_sets_the_exit_status(pytester, monkeypatch, served, floor, status):
    base, ids = served
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-candidate", "2.0.0",
                       "--kindgi-min-pass-rate", floor)  # fmt: skip
    result.assert_outcomes(passed=1, failed=2, skipped=1)  # a pass rate of 50 %
    assert result.ret == status
    assert ("gate met" if status == 0 else "gate failed") in result.stdout.str()


def test_xdist_workers_share_one_run_and_send_each_case_once_through_a_flaky_server(
    pytester, monkeypatch, served
):
    base, ids = served
    before = newest_id(base)
    with front(base, [("after", 503, "database-busy")] * 2) as proxy:
        # every installed plugin loaded, so xdist by its entry point
        result = run_suite(pytester, monkeypatch, proxy.url, ids, "--kindgi-candidate", "2.1.0",
                           "-n", "2", autoload=True)  # fmt: skip
    result.assert_outcomes(passed=1, failed=2, skipped=1)
    run = latest(base)
    assert run["id"] != before and run["cases"]["awaiting"] == 0
    assert (run["cases"]["total"], run["cases"]["pass"], run["cases"]["error"]) == (4, 1, 1)
    posts = [(path, key) for method, path, key in proxy.seen if method == "POST"]
    starts = [key for path, key in posts if path.endswith("/test-runs")]
    assert len(starts) == 3 and len(set(starts)) == 1  # its answer lost twice: one run opened
    batches = {  # a batch's Idempotency-Key → its cases (a retry sends the same key and body)
        key: sorted(r["caseId"] for r in json.loads(body)["results"])
        for (method, path, key), body in zip(proxy.seen, proxy.bodies, strict=True)
        if method == "POST" and path.endswith("/results")
    }
    sent = [case for cases in batches.values() for case in cases]
    assert len(sent) == len(set(sent)) == 4  # each case answered in one batch only


def test_resume_makes_tests_of_the_cases_still_awaited_only(pytester, monkeypatch, served):
    """`--kindgi-resume RUN` goes on with an interrupted run: a case it already has a result for
    is no test, and is not sent again."""
    base, ids = served
    with Client(base, "kgi_admin") as kg:
        run = kg.start_test_run(AGENT, P1, "2.2.0")
        kg.send_results(AGENT, run["id"], [{"caseId": "cor-1", "output": {}, "calls": []}])
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-resume", run["id"], "-rA")
    result.assert_outcomes(failed=2, skipped=1)  # cor-1 is no test
    assert "[cor-1]" not in result.stdout.str()
    with Client(base, "kgi_admin") as kg:
        done = kg.test_run(AGENT, run["id"])
        kept = kg.result(AGENT, run["id"], "cor-1")
    assert done["status"] == "done" and done["cases"]["awaiting"] == 0
    assert kept["outcome"] == "fail"  # the interrupted run's own answer: no call to lookup


def test_xdist_named_by_its_module_with_autoload_off_shares_the_run_too(
    pytester, monkeypatch, served
):
    """CI jobs that turn plugin autoload off name xdist as `-p xdist.plugin`, not `xdist`."""
    base, ids = served
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-candidate", "2.1.1",
                       "-p", "xdist.plugin", "-n", "2")  # fmt: skip
    result.assert_outcomes(passed=1, failed=2, skipped=1)
    run = latest(base)
    assert run["candidate"] == "2.1.1" and run["status"] == "done"
    assert (run["cases"]["total"], run["cases"]["awaiting"], run["cases"]["pass"]) == (4, 0, 1)


def test_a_refused_token_is_one_line_and_exit_4(pytester, monkeypatch, served):
    base, ids = served
    before = newest_id(base)
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-candidate", "2.0.0",
                       token="kgi_not-a-token")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in result.stderr.lines if line.strip()]
    assert line.startswith("ERROR: kindgi: the server refused the token (KINDGI_TOKEN): 401")
    assert newest_id(base) == before  # nothing was opened


def test_the_runnable_example_grades_the_example_agent(pytester, monkeypatch, served):
    base, _ = served
    for name in ("test_agent.py", "agent.py"):
        pytester.path.joinpath(name).write_text((ROOT / "docs/examples" / name).read_text())
    monkeypatch.setenv("KINDGI_URL", base)
    monkeypatch.setenv("KINDGI_TOKEN", "kgi_admin")
    monkeypatch.setenv("KINDGI_AGENT", AGENT)
    only_the_plugins_named(monkeypatch)
    result = pytester.runpytest_subprocess(
        "-p", "kindgi.pytest_plugin", "-p", "no:randomly", "test_agent.py",
        "--kindgi-project", P1, "--kindgi-candidate", "3.0.0",
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=1, skipped=1)  # case-2 wants k1; A is ungraded
    assert latest(base)["candidate"] == "3.0.0"


JUDGED = """
def test_the_agent(kindgi_case):
    said = "See clause 9." if kindgi_case.id == "{right}" else "Use clause 7."
    calls = [{{"tool": "lookup", "args": {{}}}}]
    kindgi_case.answer({{"answer": said}}, calls=calls, ranked=["k1"])
"""


def test_an_answer_waits_for_the_judge_inside_answer(pytester, monkeypatch, databases, tmp_path):
    """With a judge (the stand-in passes what cites clause 9) and a worker: RIGHT cites it and
    passes, WRONG does not and fails with the judge's reason; the decisions and items pass."""
    with fake_judge(verdicts) as judge:
        config = {"JUDGE_URL": judge.url, "JUDGE_MODEL": "judge-1", "JUDGE_TIMEOUT": 2,
                  "JUDGE_TRIES": 1, "QUEUE_NAME": f"test-{uuid.uuid4().hex[:12]}"}  # fmt: skip
        env = {f"KINDGI_{k}": str(v) for k, v in config.items()}
        with (
            app_on(databases, databases.clone(), **config) as app,
            gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], tmp_path / "g.log", 2, **env) as base,
            Client(base, "kgi_admin") as kg,
            worker(app, tmp_path),
        ):
            right = kg.add_case(AGENT, {"runId": "run-1", "answer": "right"})["id"]
            wrong = {"runId": "run-1", "answer": "wrong", "shouldSay": "Cite clause 9."}
            wrong_id = kg.add_case(AGENT, wrong)["id"]
            pytester.makepyfile(test_agent=JUDGED.format(right=right))
            monkeypatch.setenv("KINDGI_URL", base)
            monkeypatch.setenv("KINDGI_TOKEN", "kgi_admin")
            only_the_plugins_named(monkeypatch)
            result = pytester.runpytest_subprocess(
                "-p", "kindgi.pytest_plugin", "-p", "no:randomly", "--kindgi-agent", AGENT,
                "--kindgi-project", P1, "--kindgi-candidate", "2.0.0", "--kindgi-wait", "60",
            )  # fmt: skip
            result.assert_outcomes(passed=3, failed=1)
            out = result.stdout.str()
            assert f"FAILED test_agent.py::test_the_agent[{wrong_id}]" in out
            assert "checked clause 9" in out  # the judge's reason, as the failure's message
            run = next(kg.test_runs(AGENT, P1))
            assert run["status"] == "done" and (run["cases"]["pass"], run["cases"]["fail"]) == (
                3,
                1,
            )


def test_without_an_agent_the_plugin_is_inert(pytester, monkeypatch):
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    only_the_plugins_named(monkeypatch)
    result = pytester.runpytest_subprocess("-p", "kindgi.pytest_plugin", "-p", "no:randomly")
    result.assert_outcomes(passed=1)


def test_kindgi_tag_grades_only_the_cases_with_the_tag(pytester, monkeypatch, served):
    base, ids = served
    tagged = requests.post(f"{base}/v1/agents/{AGENT}/test-set/cases/cor-1/tags",
                           json={"add": ["smoke"]}, headers={"Authorization": "Bearer kgi_admin"},
                           timeout=10)  # fmt: skip
    assert tagged.status_code == 200, tagged.text
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-candidate", "2.0.2", "-rA",
                       "--kindgi-tag", "smoke", "--kindgi-tag", "nothing-else")  # fmt: skip
    result.assert_outcomes(passed=1)
    assert "PASSED test_agent.py::test_the_agent[cor-1]" in result.stdout.str()
    run = latest(base)
    assert run["tags"] == ["nothing-else", "smoke"] and run["cases"]["total"] == 1


def test_collect_only_lists_the_cases_and_opens_or_finishes_no_run(pytester, monkeypatch, served):
    """`--collect-only` shows the tests a run would make and changes nothing on the server: a
    run opened for it and finished with every case a no-result error would count as a failure
    in every case's record. Resuming a run, it lists the cases still awaited and leaves it open."""
    base, ids = served
    before = newest_id(base)
    active = {"cor-1", "case-2", ids["A"], ids["B"]}
    result = run_suite(pytester, monkeypatch, base, ids, "--kindgi-candidate", "9.9.9",
                       "--collect-only", "-q")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK
    listed = {line.split("[", 1)[1][:-1] for line in result.outlines if "test_the_agent[" in line}
    assert listed == active
    assert "no test run was opened; the set's 4 active cases" in result.stdout.str()
    assert newest_id(base) == before
    with Client(base, "kgi_admin") as kg:
        run = kg.start_test_run(AGENT, P1, "9.9.8")
        kg.send_results(AGENT, run["id"], [{"caseId": "cor-1", "output": {}, "calls": []}])
    resumed = run_suite(pytester, monkeypatch, base, ids, "--kindgi-resume", run["id"],
                        "--collect-only", "-q")  # fmt: skip
    assert resumed.ret == pytest.ExitCode.OK
    listed = {line.split("[", 1)[1][:-1] for line in resumed.outlines if "test_the_agent[" in line}
    assert listed == active - {"cor-1"}
    with Client(base, "kgi_admin") as kg:
        still = kg.test_run(AGENT, run["id"])
    assert still["status"] == "open" and still["cases"]["awaiting"] == 3
