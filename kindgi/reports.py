"""What the app writes out as files: a test run as a JUnit XML report (for CI test tabs), and a
test set exported as JSON lines or CSV."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from typing import Any
from xml.sax.saxutils import quoteattr

import orjson

from .grading import explain
from .schemas.cases import CASE_FIELDS, case_json

SKIPPED = ("ungraded", "pending", "awaiting")
# What XML 1.0 can't carry: control characters but tab and the newlines, and U+FFFE/U+FFFF
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _attr(text: str) -> str:
    """`text` as a quoted XML attribute, what XML can't carry shown as U+FFFD."""
    return quoteattr(NOT_XML.sub("\ufffd", text))


def junit(view: Any, rows: Iterable[tuple[str, str, str | None, Any]]) -> Iterator[str]:
    """The report, a piece at a time: one testsuite, one testcase per case (classname the test
    set, name the case id); failures and errors explained; ungraded, pending and awaiting
    cases skipped. `rows` are (caseId, outcome, reason, parts) by case id."""
    run, cases = view.run, view.run.tallies["cases"]
    skipped = sum(cases[o] for o in SKIPPED)
    yield '<?xml version="1.0" encoding="UTF-8"?>\n'
    yield (
        f'<testsuite name={_attr(f"{run.id} ({run.candidate})")} tests="{cases["total"]}"'
        f' failures="{cases["fail"]}" errors="{cases["error"]}" skipped="{skipped}">\n'
    )
    classname = _attr(view.test_set_id)
    for case_id, outcome, reason, parts in rows:
        yield f"  <testcase classname={classname} name={_attr(case_id)}"
        if outcome == "pass":
            yield "/>\n"
            continue
        text = _attr(reason or explain(parts) or outcome)
        tag = {"fail": "failure", "error": "error"}.get(outcome, "skipped")
        yield f"><{tag} message={text}/></testcase>\n"
    yield "</testsuite>\n"


# ---------------------------------------------------------------- a test set exported

SNAPSHOT = ("input", "output", "calls")  # what follows a case's own columns in an export row
CASE_WIDTH = len(CASE_FIELDS)  # a case's columns before its snapshot's


WRITE_BYTES = 64 * 1024  # written to the socket in pieces of about this size, not a line each


def jsonl(rows: Iterable[Any]) -> Iterator[bytes]:
    """A line a case: the case as the list shows it, plus its run's input, output and calls
    exactly as stored."""
    lines, size = [], 0
    for row in rows:
        out = case_json(row[:CASE_WIDTH])
        for name, raw in zip(SNAPSHOT, row[CASE_WIDTH:], strict=True):
            out[name] = orjson.Fragment(raw if raw is not None else "null")
        lines.append(orjson.dumps(out, option=orjson.OPT_APPEND_NEWLINE))
        size += len(lines[-1])
        if size > WRITE_BYTES:
            yield b"".join(lines)
            lines, size = [], 0
    yield b"".join(lines)


CSV_COLUMNS = (
    "id", "kind", "projectId", "runId", "madeOn", "expert", "addedByKind", "addedById", "addedAt",
    "updatedAt", "retiredAt", "retiredReason", "retiredByKind", "retiredById", "revision",
    "tags", "expect", "input", "output", "calls",
)  # fmt: skip
FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would run a cell starting so


def _cell(value: Any) -> str:
    """A text cell as a spreadsheet shows it, never as a formula it would run (OWASP's advice:
    a leading apostrophe)."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA) else text


def csv_rows(rows: Iterable[Any]) -> Iterator[str]:
    """The same, flattened: a header, then a row a case, JSON in the expect and snapshot
    columns; RFC 4180 quoting (commas, quotes and newlines in a field stay in it)."""
    buffer = io.StringIO()
    out = csv.writer(buffer)
    out.writerow(CSV_COLUMNS)
    for row in rows:
        case = case_json(row[:CASE_WIDTH])
        retired = case.get("retired") or {"by": {}}
        out.writerow(
            [
                case["id"],
                case["kind"],
                case["projectId"],
                case["runId"],
                _cell(case["madeOn"]),
                "true" if case.get("expert") else "false",
                case["addedBy"]["kind"],
                case["addedBy"]["id"],
                case["addedAt"],
                case["updatedAt"],
                retired.get("at", ""),
                _cell(retired.get("reason")),
                retired["by"].get("kind", ""),
                retired["by"].get("id", ""),
                case["revision"],
                ",".join(case.get("tags", [])),
                orjson.dumps(case["expect"]).decode(),
                *(raw if raw is not None else "null" for raw in row[CASE_WIDTH:]),
            ]
        )
        if buffer.tell() > WRITE_BYTES:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def export(rows: Iterable[Any], form: str) -> tuple[Iterator[bytes] | Iterator[str], str]:
    """The export's pieces in a format (`jsonl` or `csv`), and their media type."""
    if form == "csv":
        return csv_rows(rows), "text/csv"
    return jsonl(rows), "application/x-ndjson"
