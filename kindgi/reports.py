"""A test run as a JUnit XML report (for CI test tabs), and each outcome said in one line."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any
from xml.sax.saxutils import quoteattr

SKIPPED = ("ungraded", "pending", "awaiting")
# What XML 1.0 can't carry: control characters but tab and the newlines, and U+FFFE/U+FFFF
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _attr(text: str) -> str:
    """`text` as a quoted XML attribute, what XML can't carry shown as U+FFFD."""
    return quoteattr(NOT_XML.sub("\ufffd", text))


def explain(parts: dict[str, Any] | None) -> str:
    """Why a case did not pass, part by part, in one line."""
    said = []
    for part, found in (parts or {}).items():
        if found.get("outcome") == "pass":
            continue
        words = [f"{part} {found.get('outcome')}"]
        if found.get("reason"):
            words.append(str(found["reason"]))
        for name in ("missing", "extra", "forbidden", "unjudged"):
            if found.get(name):
                words.append(f"{name} {json.dumps(found[name], ensure_ascii=False)}")
        if found.get("score") is not None:
            words.append(f"score {found['score']:.3f} of ideal {found['ideal']:.3f}")
        said.append(": ".join(words[:1]) + (" — " + "; ".join(words[1:]) if words[1:] else ""))
    return " | ".join(said)


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
