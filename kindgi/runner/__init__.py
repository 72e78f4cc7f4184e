"""`kindgi test-run`: grade a candidate agent version from a CI job, over HTTP only.

Opens a test run (or resumes one), runs COMMAND on every case still awaiting a result, `--jobs`
at a time, sends the results in batches, waits for the judge, prints the summary and the
regressions against the baseline, and exits 0 (gate met), 1 (gate failed), 2 (could not run) or
3 (a quick run's estimate can't tell whether the pass rate meets the floor).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx

from ..client import ApiError, Client, TestRunOptions
from ..sampling import Estimate, verdict
from .agents import ExecAgent, JsonlAgent, error
from .summary import lines, markdown, why

BATCH = 100  # results a request, well under the server's 500
EXIT_MET, EXIT_FAILED, EXIT_CANNOT, EXIT_UNSURE = 0, 1, 2, 3
# A server restarting, or a database busy for a while, is ridden out: 20 retries, each wait at
# most 10 s (under three minutes for a server that is down)
RETRIES, MAX_WAIT = 20, 10.0


class CannotRun(Exception):
    """Why the command could not run (exit 2): one line, never a traceback."""


STOPPED = (CannotRun, ApiError, httpx.TransportError)  # what stops a run before it is graded


def stopped(exc: Exception, url: str) -> str:
    """One line on what stopped `kindgi test-run` or the pytest plugin (one of `STOPPED`)."""
    if isinstance(exc, ApiError):
        what = "the token (KINDGI_TOKEN)" if exc.code == "unauthenticated" else "the request"
        return f"kindgi: the server refused {what}: {exc}"
    if isinstance(exc, httpx.TransportError):
        return f"kindgi: the server at {url} can't be reached: {exc}"
    return f"kindgi: {exc}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kindgi", description=__doc__.split("\n\n")[0])
    commands = p.add_subparsers(dest="command", required=True)
    t = commands.add_parser("test-run", help="grade a candidate version against the test set")
    t.add_argument("--url", required=True, help="the Kindgi server, e.g. https://kindgi.example")
    t.add_argument("--agent", required=True, help="the agent's id, e.g. acme.drafting")
    t.add_argument("--project", required=True, help="the project's id (a UUID)")
    t.add_argument("--candidate", required=True, help="the agent version under test")
    t.add_argument("--weighting", choices=("all", "experts-only"), default="all")
    t.add_argument("--baseline", help="latest (the newest done run) or a test run's id")
    t.add_argument("--rerun", help="re-run a done run's failed or errored cases (a run id)")
    t.add_argument("--only", choices=("failed", "errored", "failed,errored"))
    t.add_argument("--label", help="shown with the run (a branch, a pull request)")
    t.add_argument(
        "--tag", action="append", help="grade only the cases with this tag (again: any of them)"
    )
    t.add_argument("--resume", help="go on with an interrupted run (its id)")
    t.add_argument("--protocol", choices=("exec", "jsonl"), default="exec")
    t.add_argument("--jobs", type=int, default=1, help="cases at once (default 1)")
    t.add_argument("--timeout", type=float, default=300, help="seconds a case (default 300)")
    t.add_argument("--wait", type=float, default=1800, help="seconds to wait for the judge")
    t.add_argument("--junit", type=Path, help="write the JUnit XML report here")
    t.add_argument("--summary", type=Path, help="write the summary as Markdown here")
    t.add_argument("--max-regressions", type=int, help="fail when more cases regressed")
    t.add_argument("--min-pass-rate", type=float, help="fail below this pass rate (0..1)")
    t.add_argument("--sample", type=int, help="a quick run: grade N cases, estimate the rest")
    t.add_argument("--seed", type=int, help="with --sample: draw the same cases again")
    t.add_argument("agent_command", nargs=argparse.REMAINDER, help="-- COMMAND …")
    return p


def main(argv: list[str] | None = None) -> int:
    """The console script `kindgi`: one line and exit 2 for anything that stops it."""
    args = parser().parse_args(argv)
    try:
        return TestRun(args).run()
    except STOPPED as exc:
        print(stopped(exc, args.url), file=sys.stderr)
    except KeyboardInterrupt:
        print("kindgi: interrupted", file=sys.stderr)
    except Exception as exc:  # never a traceback: one line, exit 2
        print(f"kindgi: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EXIT_CANNOT


class Grader:
    """What `kindgi test-run` and the pytest plugin share, with the same options (`args`):
    opening or resuming a run, and once its results are in, finishing it, waiting for the judge,
    comparing it with its baseline and checking the gate."""

    def __init__(self, args: argparse.Namespace, token: str) -> None:
        if args.wait < 0:
            raise CannotRun("--wait takes a positive number")
        if args.max_regressions is not None and not (args.baseline or args.resume):
            raise CannotRun("--max-regressions needs --baseline: nothing to regress against")
        if args.only and not args.rerun:
            raise CannotRun("--only goes with --rerun")
        if args.sample is not None and (args.sample < 1 or args.rerun):
            raise CannotRun("--sample takes a positive number of cases, and not with --rerun")
        if args.seed is not None and args.sample is None:
            raise CannotRun("--seed goes with --sample")
        if not token:
            raise CannotRun("set KINDGI_TOKEN to an API token (kgi_…)")
        self.args, self.agent = args, args.agent
        self.client = Client(args.url, token, retries=RETRIES, max_wait=MAX_WAIT)

    def conclude(self, run_id: str) -> tuple[dict[str, Any], dict[str, Any] | None, str, int]:
        """The run once its results are in: finished, judged, compared; the verdict and the
        exit code."""
        run = self.client.test_run(self.agent, run_id)
        if run["status"] == "open":
            run = self.client.finish_test_run(self.agent, run["id"])
        run = self.wait_for_judge(run)
        compared = self.compare(run)
        return (run, compared, *self.gate(run, compared))

    def open_run(self) -> dict[str, Any]:
        if self.args.resume:
            return self.client.test_run(self.agent, self.args.resume)
        options: TestRunOptions = {}
        if self.args.weighting != "all":
            options["weighting"] = self.args.weighting
        if self.args.label:
            options["label"] = self.args.label
        if self.args.sample is not None:
            seed = {} if self.args.seed is None else {"seed": self.args.seed}
            options["sample"] = {"size": self.args.sample, **seed}
        if self.args.tag:
            options["tags"] = sorted(set(self.args.tag))
        if self.args.rerun:
            options["rerun_of"] = self.args.rerun
            if self.args.only:
                options["only"] = self.args.only
        baseline = self.baseline()
        if baseline:
            options["baseline"] = baseline
        return self.client.start_test_run(
            self.agent, self.args.project, self.args.candidate, **options
        )

    def baseline(self) -> str | None:
        """`--baseline latest`: the newest done run of the test set, any candidate."""
        if self.args.baseline != "latest":
            return self.args.baseline
        for run in self.client.test_runs(self.agent, self.args.project, page_size=100):
            if run["status"] == "done":
                return run["id"]
        if self.args.max_regressions is not None:
            raise CannotRun("--baseline latest: the test set has no done run to compare with")
        return None

    # ---------------------------------------------------------------- after the results

    def wait_for_judge(self, run: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.args.wait
        while run["status"] == "grading":
            if time.monotonic() > deadline:
                pending = run["cases"]["pending"]
                raise CannotRun(
                    f"the judge still owes {pending} answers after {self.args.wait:g} s"
                )
            time.sleep(2)
            run = self.client.test_run(self.agent, run["id"])
        return run

    def compare(self, run: dict[str, Any]) -> dict[str, Any] | None:
        baseline = run.get("baseline")
        if not baseline:
            return None
        pairs = self.client.compare(self.agent, run["id"], baseline, change="regressed")
        regressed = list(pairs)
        for row in regressed:
            row["why"] = why(self.client.result(self.agent, run["id"], row["caseId"]))
        fixed = self.client.compare(self.agent, run["id"], baseline, change="fixed")
        return {
            "baseline": baseline,
            "counts": pairs.first["counts"],  # every change counted, whatever the filter
            "pValue": pairs.first["pValue"],
            "regressions": regressed,
            "fixes": list(fixed),
        }

    def gate(self, run: dict[str, Any], compared: dict[str, Any] | None) -> tuple[str, int]:
        failed = []
        limit = self.args.max_regressions
        if limit is not None and compared is not None and compared["counts"]["regressed"] > limit:
            failed.append(f"{compared['counts']['regressed']} regressed (at most {limit})")
        floor = self.args.min_pass_rate
        unsure = None
        if floor is not None and "sample" in run:
            unsure = self.quick_gate(run, floor, failed)
        elif floor is not None:
            rate = (run.get("passRate") or {}).get("value")
            if rate is None or rate < floor:
                shown = "none" if rate is None else f"{rate:.1%}"
                failed.append(f"pass rate {shown} (at least {floor:.1%})")
        if failed:
            return "gate failed: " + "; ".join(failed), EXIT_FAILED
        if unsure:
            return f"gate can't tell: {unsure}; run the whole set", EXIT_UNSURE
        return "gate met", EXIT_MET

    @staticmethod
    def quick_gate(run: dict[str, Any], floor: float, failed: list[str]) -> str | None:
        """A quick run's pass-rate gate, read from its estimate's interval: a failure is added
        to `failed`; what it can't tell is returned."""
        found = run.get("estimate")
        if found is None:
            failed.append(f"no estimated pass rate (at least {floor:.1%})")
            return None
        interval = Estimate(found["passRate"], found["low"], found["high"])
        said = (
            f"estimated pass rate {found['low']:.1%} to {found['high']:.1%} (at least {floor:.1%})"
        )
        decided = verdict(interval, floor)
        if decided == "fails":
            failed.append(said)
        return said if decided == "can't tell" else None


class TestRun(Grader):
    """One invocation of `kindgi test-run`."""

    def __init__(self, args: argparse.Namespace) -> None:
        command = list(args.agent_command)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            raise CannotRun("give the agent's command after --, e.g. -- python agent.py")
        if shutil.which(command[0]) is None:
            raise CannotRun(f"the agent's command can't be started: {command[0]}: not found")
        if args.jobs < 1 or args.timeout <= 0:
            raise CannotRun("--jobs and --timeout take positive numbers")
        super().__init__(args, os.environ.get("KINDGI_TOKEN", ""))
        self.command = command
        self.stop = threading.Event()
        self.progress = Progress(sys.stderr)

    def run(self) -> int:
        previous = signal.signal(signal.SIGINT, lambda *_: self.stop.set())
        try:
            run = self.open_run()
            print(
                f"kindgi: test run {run['id']} (resume with --resume {run['id']})", file=sys.stderr
            )
            awaiting = list(self.client.cases_to_answer(self.agent, run["id"], page_size=500))
            self.grade(run["id"], awaiting)
            if self.stop.is_set():
                raise CannotRun(f"interrupted: resume with --resume {run['id']}")
            run, compared, verdict, code = self.conclude(run["id"])
        finally:
            signal.signal(signal.SIGINT, previous)
        if self.args.junit:
            self.args.junit.write_bytes(self.client.junit_report(self.agent, run["id"]))
        if self.args.summary:
            self.args.summary.write_text(markdown(run, compared, verdict))
        print("\n".join(lines(run, compared, verdict)))
        return code

    def grade(self, run_id: str, cases: list[dict[str, Any]]) -> None:
        """Run the agent on every case, `--jobs` at a time, sending results as they come."""
        sender = Sender(lambda batch: self.client.send_results(self.agent, run_id, batch))
        kind = JsonlAgent if self.args.protocol == "jsonl" else ExecAgent
        agents = [kind(self.command, self.args.timeout) for _ in range(self.args.jobs)]
        free = list(agents)
        todo = iter(cases)
        self.progress.start(len(cases))
        with ThreadPoolExecutor(self.args.jobs) as pool:
            running: dict[Future[dict[str, Any]], Any] = {}
            while True:
                while free and not self.stop.is_set():
                    case = next(todo, None)
                    if case is None:
                        break
                    agent = free.pop()
                    running[pool.submit(agent.answer, case)] = agent
                if not running:
                    break
                done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    free.append(running.pop(future))
                    if self.stop.is_set():
                        continue  # a case cut short by the interruption is run again on resume
                    sender.add(future.result())
                    self.progress.step()
                sender.send_due()
        for agent in agents:
            agent.close()
        sender.flush()
        self.progress.end()


class Sender:
    """Results sent in batches: each batch with its own Idempotency-Key (so a retry never
    doubles it); a result the server refuses as bad input is sent again as that case's error."""

    def __init__(self, send: Callable[[list[dict[str, Any]]], Any]) -> None:
        self.send = send
        self.waiting: list[dict[str, Any]] = []
        self.last = time.monotonic()

    def add(self, result: dict[str, Any]) -> None:
        self.waiting.append(result)

    def send_due(self) -> None:
        if len(self.waiting) >= BATCH or (self.waiting and time.monotonic() - self.last > 2):
            self.flush()

    def flush(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting[:BATCH], self.waiting[BATCH:]
            self._send(batch)
        self.last = time.monotonic()

    def _send(self, batch: list[dict[str, Any]]) -> None:
        try:
            self.send(batch)
        except ApiError as exc:
            if exc.code != "bad-input":
                raise
            refused = _refused_entries(exc.details.get("fields", {}), len(batch))
            if not refused:
                raise
            self._send(
                [
                    error(r["caseId"], f"the server refused the result: {refused[i]}")
                    if i in refused
                    else r
                    for i, r in enumerate(batch)
                ]
            )


def _refused_entries(fields: dict[str, list[str]], size: int) -> dict[int, str]:
    """`results.N.field` → {N: "field: message"} for the entries a 400 names."""
    out: dict[int, str] = {}
    for name, messages in fields.items():
        parts = name.split(".")
        if len(parts) >= 2 and parts[0] == "results" and parts[1].isdigit():
            index = int(parts[1])
            if index < size:
                out[index] = f"{'.'.join(parts[2:]) or 'result'}: {'; '.join(messages)}"
    return out


class Progress:
    """A bar on a terminal, a line every ten percent in a CI log."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.tty = stream, stream.isatty()
        self.total = self.done = self.shown = 0
        self.started = time.monotonic()

    def start(self, total: int) -> None:
        self.total, self.done, self.shown, self.started = total, 0, 0, time.monotonic()
        print(f"kindgi: {total} cases to run", file=self.stream)

    def step(self) -> None:
        self.done += 1
        if self.tty:
            filled = int(30 * self.done / max(self.total, 1))
            print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}",
                  end="", file=self.stream, flush=True)  # fmt: skip
        elif self.done * 10 // max(self.total, 1) > self.shown:
            self.shown = self.done * 10 // max(self.total, 1)
            rate = self.done / max(time.monotonic() - self.started, 1e-6)
            print(f"kindgi: {self.done}/{self.total} cases ({rate:.0f}/s)", file=self.stream)

    def end(self) -> None:
        if self.tty and self.total:
            print(file=self.stream)
