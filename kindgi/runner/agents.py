"""Running the candidate agent on one case: `exec` starts COMMAND once per case (the case's
input as JSON on stdin, `{output, calls?, ranked?}` as JSON on stdout); `jsonl` starts it once
per job and trades one JSON line per case. A non-zero exit, a timeout or an answer that is not
that JSON is the case's `error`, with the first lines of stderr as the reason."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections import deque
from typing import Any

from ..nesting import MAX_JSON_DEPTH, RESULT_DEPTH, deeper_than

STDERR_LINES = 5


def as_result(case_id: str, text: str) -> dict[str, Any]:
    """The server's result for an answer printed by the agent, or the case's error."""
    try:
        answer = json.loads(text)
    except ValueError:
        return error(case_id, f"the answer is not JSON: {text.strip()[:200]!r}")
    except RecursionError:
        return error(case_id, "the answer nests arrays and objects too deep to read")
    if not isinstance(answer, dict) or "output" not in answer:
        return error(case_id, "the answer is not a JSON object {output, calls?, ranked?}")
    calls = answer.get("calls", [])
    if not isinstance(calls, list):
        return error(case_id, "the answer's calls is not a list")
    result = {"caseId": case_id, "output": answer["output"], "calls": calls}
    if "ranked" in answer:
        result["ranked"] = answer["ranked"]
    return sendable(result)


def sendable(result: dict[str, Any]) -> dict[str, Any]:
    """The result, or its case's error where the API would refuse it: nested past its limit
    (which would have the whole batch refused)."""
    if deeper_than(result, RESULT_DEPTH):
        return error(
            result["caseId"],
            f"the answer nests arrays and objects more than {RESULT_DEPTH - 1} deep, "
            f"past the API's limit ({MAX_JSON_DEPTH} in a body, docs/errors.md)",
        )
    return result


def error(case_id: str, reason: str) -> dict[str, Any]:
    return {"caseId": case_id, "error": reason[:4000] or "failed"}


def _first_lines(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:STDERR_LINES])


class ExecAgent:
    """COMMAND once per case."""

    def __init__(self, command: list[str], timeout: float) -> None:
        self.command, self.timeout = command, timeout

    def answer(self, case: dict[str, Any]) -> dict[str, Any]:
        try:
            done = subprocess.run(
                self.command,
                input=json.dumps(case["input"]),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                start_new_session=True,  # a Ctrl-C stops the runner, which stops its agents
            )
        except subprocess.TimeoutExpired:
            return error(case["caseId"], f"timed out after {self.timeout:g} s")
        except OSError as exc:
            return error(case["caseId"], f"could not start the agent: {exc}")
        if done.returncode != 0:
            said = _first_lines(done.stderr)
            return error(case["caseId"], f"exit status {done.returncode}: {said}".rstrip(": "))
        return as_result(case["caseId"], done.stdout)

    def close(self) -> None:
        """Nothing runs between cases."""


class JsonlAgent:
    """COMMAND once per job: a line of input in, a line of answer out; started again after a
    crash or a timeout."""

    def __init__(self, command: list[str], timeout: float) -> None:
        self.command, self.timeout = command, timeout
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)

    def _start(self) -> subprocess.Popen[str]:
        self.lines, self.stderr = queue.Queue(), deque(maxlen=STDERR_LINES)
        proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        threading.Thread(target=self._read, args=(proc, self.lines), daemon=True).start()
        threading.Thread(target=self._keep_stderr, args=(proc, self.stderr), daemon=True).start()
        return proc

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        for line in proc.stdout or ():
            lines.put(line)
        lines.put(None)  # end of output: the agent has exited

    @staticmethod
    def _keep_stderr(proc: subprocess.Popen[str], kept: deque[str]) -> None:
        for line in proc.stderr or ():
            if line.strip():
                kept.append(line.rstrip())

    def answer(self, case: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        try:
            stdin = self.proc.stdin  # a pipe: it was started with one
            stdin.write(json.dumps(case["input"]) + "\n")  # type: ignore[union-attr]
            stdin.flush()  # type: ignore[union-attr]
            line = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            self.close()
            return error(case["caseId"], f"timed out after {self.timeout:g} s")
        except OSError:  # its stdin is closed: it has exited
            line = None
        if line is None:
            status = self.proc.wait()
            self.proc = None
            said = " | ".join(self.stderr)
            return error(case["caseId"], f"the agent exited with status {status}: {said}")
        return as_result(case["caseId"], line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
