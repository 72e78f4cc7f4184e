"""The export's JSON lines read back as what importing them makes: for each case, the finished
run it needs and the hand case's body (docs/reference/add-case.md).

Pure (no Flask, no database): the service validates and stores what this returns
(`kindgi.service.imports`), and `kindgi.Client.import_cases` sends the same bodies over HTTP.
A line needs `expect`, and keeps the run's `input`, `output` and `calls` and its version
(`madeOn`) as exported; everything else on it (ids, who added it, when) is the other set's and
is not carried over.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_VERSION = "imported"  # a line without `madeOn`: the version its run is recorded as


@dataclass(frozen=True)
class Imported:
    """One line: the run to record (`RecordRunBody`) and the case to add on it (`AddCaseBody`
    but for `runId`, which the recorded run gives)."""

    run: dict[str, Any]
    case: dict[str, Any]


def case_body(expect: dict[str, Any]) -> dict[str, Any]:
    """A stored expectation as the body that adding a case turns back into it."""
    body: dict[str, Any] = {}
    decisions = expect.get("decisions")
    if decisions is not None:
        body["decisions"] = decisions.get("verdict")
        for name in ("shouldCall", "mustNotCall", "exactly"):
            if name in decisions:
                body[name] = decisions[name]
    answer = expect.get("answer")
    if answer is not None:
        body["answer"] = answer.get("verdict")
        body.update({k: answer[k] for k in ("shouldSay", "why") if k in answer})
    if "items" in expect:
        body["items"] = expect["items"]
    return body


def imported(line: dict[str, Any], project_id: str) -> Imported:
    """One exported case as the run and case that importing it into `project_id` makes;
    ValueError when it has no expectation."""
    expect = line.get("expect")
    if not isinstance(expect, dict):
        raise ValueError("expect: an object, as the export writes it")
    run = {
        "projectId": project_id,
        "version": line.get("madeOn") or DEFAULT_VERSION,
        "status": "finished",
        "input": line.get("input"),
        "output": line.get("output"),
        "calls": line.get("calls") or [],
    }
    return Imported(run, case_body(expect))


def read_lines(lines: Iterable[str | bytes | dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """JSON lines (or lines already parsed) as objects, blank lines skipped; ValueError naming
    the line (1-based) that is not a JSON object."""
    for number, line in enumerate(lines, start=1):
        if isinstance(line, dict):
            yield line
            continue
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as err:
            raise ValueError(f"line {number}: not JSON: {err}") from None
        if not isinstance(value, dict):
            raise ValueError(f"line {number}: not a JSON object")
        yield value
