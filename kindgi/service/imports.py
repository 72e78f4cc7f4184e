"""Importing a test set's export (JSON lines) into a project: for each case, a finished run
with the exported input, output and calls, and a hand case on it with the same expectation.
All or nothing: every line is checked before anything is written, and a bad one is a 400
naming its line and field (`3.shouldCall.0.match.city`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import exchange
from ..errors import DomainError, bad_input
from ..models import Case
from ..schemas.common import load
from ..schemas.corrections import AddCaseBody
from ..schemas.runs import RecordRunBody
from .corrections import add_hand_case
from .identity import Principal
from .runs import record_run

MAX_LINES = 100_000
_CHECKED_RUN_ID = "run-to-be-made"  # stands in for the run the case will be added on


def _of_line(number: int, err: DomainError) -> DomainError:
    """A line's refusal, its fields named from the line's number on (`3.items.0.pointer`):
    the same error, its code kept; one that is not about the line's fields (a permission) as
    it is."""
    if err.status != 400:
        return err
    fields = (err.details or {}).get("fields") or {"_body": [err.message]}
    named = {f"{number}.{path}": said for path, said in fields.items()}
    return type(err)(err.message, details={**(err.details or {}), "fields": named})


def _checked(number: int, line: dict[str, Any], project_id: str) -> exchange.Imported:
    """One line's run and case, validated as their own requests would be."""
    try:
        found = exchange.imported(line, project_id)
        run = load(RecordRunBody, found.run)
        case = load(AddCaseBody, {**found.case, "runId": _CHECKED_RUN_ID})
    except ValueError as err:
        raise bad_input({str(number): [str(err)]}) from None
    except DomainError as err:
        raise _of_line(number, err) from None
    del case["runId"]
    return exchange.Imported(run, case)


def import_cases(
    caller: Principal, agent_id: str, project_id: str, lines: Iterable[Any]
) -> list[Case]:
    """The export's lines (text or parsed) as cases of the agent's set in `project_id`, in
    order; the caller needs to write runs and publish cases there."""
    try:
        parsed = list(exchange.read_lines(lines))
    except ValueError as err:
        raise bad_input({"_body": [str(err)]}) from None
    if len(parsed) > MAX_LINES:
        raise bad_input({"_body": [f"At most {MAX_LINES} lines."]})
    checked = [_checked(n, line, project_id) for n, line in enumerate(parsed, start=1)]
    cases = []
    for number, found in enumerate(checked, start=1):
        run = record_run(caller, agent_id, found.run)
        try:  # an item's pointer is checked against the run's output only now
            cases.append(add_hand_case(caller, agent_id, {**found.case, "runId": run.id}))
        except DomainError as err:
            raise _of_line(number, err) from None
    return cases
