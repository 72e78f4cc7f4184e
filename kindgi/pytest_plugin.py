"""The pytest plugin (entry point `pytest11`): a test set's cases as tests. Inert unless an agent
is named (`--kindgi-agent` or `KINDGI_AGENT`); then the session opens a test run (or resumes
one) on `KINDGI_URL` with `KINDGI_TOKEN`, a test that takes the `kindgi_case` fixture runs once
per case still awaiting a result, and its outcome is its case's grade (docs/pytest.md).

Its options are `kindgi test-run`'s with a `kindgi-` prefix, and mean the same; the run's
opening, finishing, comparing and gate are the command's own (`kindgi.runner.Grader`). Under
pytest-xdist the controller opens the run and hands it and its cases to the workers. A test's
grade is reckoned where it runs, by the rules the server grades with (`kindgi.grading`, on the
frozen expectation and the corrected run's calls), and its result sent with others in batches
(`kindgi.runner.Sender`), as `kindgi test-run` sends them: a request a case, then another to read
its grade, held the plugin to a few dozen cases a second. Only a case whose answer the judge
grades is sent at once, and its grade read back once the judge has said.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterable
from typing import Any

import pytest

from .grading import PARTS, grade_case
from .runner import STOPPED, Grader, Sender, stopped
from .runner.agents import sendable
from .runner.summary import lines, why

PLUGIN = "kindgi-session"
POLL_SECONDS = 0.5  # between two reads of a result the judge still owes
# The options `kindgi test-run` reads as they are given
AS_GIVEN = (
    "weighting",
    "baseline",
    "label",
    "tag",
    "resume",
    "max_regressions",
    "min_pass_rate",
    "wait",
    "sample",
    "seed",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kindgi", "grade a candidate agent version against a Kindgi test set")
    group.addoption("--kindgi-agent", help="the agent's id (or KINDGI_AGENT); off without")
    group.addoption("--kindgi-project", help="the project's id, a UUID (or KINDGI_PROJECT)")
    group.addoption("--kindgi-candidate", help="the version under test (or KINDGI_CANDIDATE)")
    group.addoption("--kindgi-weighting", choices=("all", "experts-only"), default="all")
    group.addoption("--kindgi-baseline", help="latest (the newest done run) or a run's id")
    group.addoption("--kindgi-label", help="shown with the run (a branch, a pull request)")
    group.addoption(
        "--kindgi-tag", action="append", help="only the cases with this tag (again: any of them)"
    )
    group.addoption("--kindgi-resume", help="go on with an interrupted run (its id)")
    group.addoption("--kindgi-max-regressions", type=int, help="fail when more cases regressed")
    group.addoption("--kindgi-min-pass-rate", type=float, help="fail below this rate (0..1)")
    group.addoption("--kindgi-wait", type=float, default=1800, help="seconds to wait for the judge")
    group.addoption("--kindgi-sample", type=int, help="a quick run: grade N cases, estimate all")
    group.addoption("--kindgi-seed", type=int, help="with --kindgi-sample: the same cases again")


def _args(config: pytest.Config) -> argparse.Namespace | None:
    """The options as `kindgi test-run` reads them, or None when no agent is named."""
    agent = config.getoption("kindgi_agent") or os.environ.get("KINDGI_AGENT")
    if not agent:
        return None
    args = argparse.Namespace(
        url=os.environ.get("KINDGI_URL", ""),
        agent=agent,
        project=config.getoption("kindgi_project") or os.environ.get("KINDGI_PROJECT"),
        candidate=config.getoption("kindgi_candidate") or os.environ.get("KINDGI_CANDIDATE"),
        rerun=None,
        only=None,
        **{name: config.getoption(f"kindgi_{name}") for name in AS_GIVEN},
    )
    missing = [
        name
        for name, value in (("KINDGI_URL", args.url), ("--kindgi-project", args.project))
        if not value
    ]
    if not (args.candidate or args.resume):
        missing.append("--kindgi-candidate")
    if missing:
        raise pytest.UsageError(f"kindgi: set {', '.join(missing)}")
    return args


def pytest_configure(config: pytest.Config) -> None:
    args = _args(config)
    if args is None:
        return
    try:
        session = Session(config, args)
    except STOPPED as exc:
        raise pytest.UsageError(stopped(exc, args.url)) from None
    config.pluginmanager.register(session, PLUGIN)
    if hasattr(config.hook, "pytest_configure_node"):  # xdist's, by whatever name it came in
        config.pluginmanager.register(Controller(session), f"{PLUGIN}-xdist")


class Controller:
    """pytest-xdist's hook, on the controller: each worker gets the run and its cases."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.cases_json: str | None = None

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["kindgi_run"] = self.session.run_id
        # one JSON text, made once: execnet's own serialiser took 1.8 s to write 9,567 cases for
        # each worker, and each 4.8 s to read them (JSON: 0.2 s and 0.7 s)
        if self.cases_json is None:
            self.cases_json = json.dumps(self.session.cases)
        node.workerinput["kindgi_cases"] = self.cases_json
        node.workerinput["kindgi_grading"] = self.session.grading


class Session:
    """The test run this pytest session grades."""

    def __init__(self, config: pytest.Config, args: argparse.Namespace) -> None:
        self.grader = Grader(args, os.environ.get("KINDGI_TOKEN", ""))
        self.client, self.agent, self.wait = self.grader.client, args.agent, args.wait
        self.worker = hasattr(config, "workerinput")
        self.gated = args.max_regressions is not None or args.min_pass_rate is not None
        self.said: list[str] = []
        # --collect-only opens no run and finishes none: a run finished with every case a
        # no-result error would count in every case's record as a failure
        self.collecting = bool(config.option.collectonly)
        # each case as its JSON text, by its id, read only by the test that answers it: a worker
        # that read them all (9,567) held 70,000 more objects for the garbage collector to go
        # through, and read the three quarters other workers answer for nothing
        self.cases: dict[str, str]
        if self.worker:  # the controller opened the run
            self.run_id = config.workerinput["kindgi_run"]  # type: ignore[attr-defined]
            self.cases = json.loads(config.workerinput["kindgi_cases"])  # type: ignore[attr-defined]
            self.grading = config.workerinput["kindgi_grading"]  # type: ignore[attr-defined]
        elif self.collecting and not args.resume:
            self.run_id, self.grading = "", (None, False)
            self.cases = _texts(self._set_now(args))
        else:
            run = self.grader.open_run()
            self.run_id = run["id"]
            # how the server grades this run: the items' threshold, and whether a judge answers
            self.grading = (run["itemsThreshold"], "judge" in run)
            frozen = {
                case["id"]: case
                for case in self.client.export(self.agent, run["projectId"], version=run["version"])
            }
            self.cases = _texts(
                {
                    **case,
                    "expect": frozen[case["caseId"]]["expect"],
                    "corrected": frozen[case["caseId"]]["calls"] or [],
                }
                for case in self.client.cases_to_answer(self.agent, self.run_id, page_size=500)
            )
        self.sender = Sender(lambda batch: self.client.send_results(self.agent, self.run_id, batch))

    def _set_now(self, args: argparse.Namespace) -> list[dict[str, Any]]:
        """The cases a full run opened now would start with: the set's active ones (with any of
        the `--kindgi-tag`s, if given), read from its export. A sample or a re-run's cases are
        drawn only as a run opens."""
        tags = set(args.tag or ())
        return [
            {"caseId": case["id"], "kind": case["kind"], "expert": bool(case.get("expert")),
             "input": case["input"], "parts": [p for p in PARTS if p in case["expect"]],
             "expect": case["expect"], "corrected": case["calls"] or []}
            for case in self.client.export(self.agent, args.project)
            if not tags or tags & set(case.get("tags") or ())
        ]  # fmt: skip

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "kindgi_case" in metafunc.fixturenames:
            ids = list(self.cases)
            metafunc.parametrize("kindgi_case", ids, ids=ids, indirect=True)

    def graded(self, case: Case, result: dict[str, Any]) -> dict[str, Any]:
        """One case's result, queued to be sent, and its grade: reckoned here at once, or, for
        an answer the judge grades, read back once the judge has said (within `--kindgi-wait`),
        the queue sent first."""
        threshold, judged = self.grading
        grade = grade_case(case.expect, case.corrected, result, threshold, judged)
        self.sender.add(result)
        if grade.parts.get("answer", {}).get("outcome") != "pending":
            self.sender.send_due()
            return {"caseId": case.id, "outcome": grade.outcome, "reason": grade.reason,
                    "parts": grade.parts}  # fmt: skip
        self.sender.flush()
        deadline = time.monotonic() + self.wait
        while True:
            graded = self.client.result(self.agent, self.run_id, result["caseId"])
            if graded["outcome"] != "pending" or time.monotonic() > deadline:
                return graded
            time.sleep(POLL_SECONDS)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """A test that raised, or ended, without answering its case sends it as an error.

        A failed grade, shown without a traceback, has it cut to its raise first: pytest
        filters the whole traceback, some 20 frames of its own, each looked up on disk, even
        when it shows none of it (a millisecond a failed case, most of a failing run's)."""
        case = getattr(item, "funcargs", {}).get("kindgi_case")
        excinfo = call.excinfo
        if excinfo is not None and isinstance(case, Case) and excinfo.value is case.failed:
            excinfo.traceback = excinfo.traceback[-1:]
        outcome = yield
        if call.when != "call" or not isinstance(case, Case) or case.answered:
            return
        report = outcome.get_result()
        if call.excinfo is None:
            reason = "the test ended without answering its case"
            report.outcome, report.longrepr = "failed", reason
        elif call.excinfo.errisinstance(pytest.skip.Exception):
            return  # skipped: left awaiting (a no-result error when the run finishes)
        else:
            reason = "\n".join(call.excinfo.exconly().splitlines()[:5])
        case.answered = True
        self.sender.add({"caseId": case.id, "error": reason})
        self.sender.send_due()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Each process sends the results it still holds; then the controller finishes the
        run, waits for the judge and checks the gate, which alone sets the exit status when one
        is given."""
        if self.collecting:
            self.said = [
                f"--collect-only: run {self.run_id} was left as it was; its {len(self.cases)} "
                "cases still awaited"
                if self.run_id
                else f"--collect-only: no test run was opened; the set's {len(self.cases)} "
                "active cases, as a full run would start with them"
            ]
            return
        try:
            self.sender.flush()
            if self.worker:
                return
            run, compared, verdict, code = self.grader.conclude(self.run_id)
        except STOPPED as exc:
            self.said = [stopped(exc, self.grader.args.url)]
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
        self.said = lines(run, compared, verdict)
        if self.gated:
            session.exitstatus = code

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.said:
            title = f"kindgi test run {self.run_id}" if self.run_id else "kindgi"
            terminalreporter.write_sep("=", title)
            for line in self.said:
                terminalreporter.write_line(line)


class Case:
    """One case of the run, for one test: its `id`, `input`, `parts` (the parts it is graded
    on) and `expect`; `answer()` sends the candidate's answer and checks its grade."""

    def __init__(self, session: Session, case: dict[str, Any]) -> None:
        self.session, self.id = session, case["caseId"]
        self.input, self.parts, self.expect = case["input"], case["parts"], case.get("expect")
        self.kind, self.expert = case["kind"], case["expert"]
        self.corrected = case["corrected"]  # the corrected run's calls, which grading reads
        self.answered = False
        self.failed: BaseException | None = None  # the failed grade answer() raised

    def answer(
        self,
        output: Any,
        *,
        calls: list[dict[str, Any]] | None = None,
        ranked: list[Any] | None = None,
    ) -> dict[str, Any]:
        """Send the answer (`calls` as `[{tool, args}]`, `ranked` the item keys in order) and
        wait for its grade: a pass returns the result, a failed part fails the test with the
        grader's explanation, an ungraded case (no judge) skips it."""
        result: dict[str, Any] = {"caseId": self.id, "output": output, "calls": calls or []}
        if ranked is not None:
            result["ranked"] = ranked
        self.answered = True
        graded = self.session.graded(self, sendable(result))
        if graded["outcome"] in ("fail", "error"):
            # the grader's explanation alone: the plugin's frames would tell the test's author
            # nothing, and pytest handles such a failure in a fraction of the time
            self.failed = pytest.fail.Exception(why(graded), pytrace=False)
            raise self.failed
        if graded["outcome"] != "pass":
            pytest.skip(f"{graded['outcome']}: {why(graded)}")
        return graded


@pytest.fixture
def kindgi_case(request: pytest.FixtureRequest) -> Case:
    """The case this test answers; parametrized over the run's cases."""
    session = request.config.pluginmanager.get_plugin(PLUGIN)
    if session is None:
        pytest.skip("no Kindgi agent named: pass --kindgi-agent or set KINDGI_AGENT")
    return Case(session, json.loads(session.cases[request.param]))


def _texts(cases: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Each case as its JSON text, by its id, in the order given (`Session.cases`)."""
    return {case["caseId"]: json.dumps(case) for case in cases}
