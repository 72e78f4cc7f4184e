#!/usr/bin/env python3
"""A small example agent for `kindgi test-run`, with flaws to order (the tests use them too).

It reads a case's input (a JSON object with `q` or `question`) and answers
`{"output": {...}, "calls": [...], "ranked": [...]}`: it calls `search` then `lookup` with the
question, and ranks two precedents, m0 before m1.

    exec (default): one case per process, the input on stdin, the answer on stdout
    --jsonl         one process for many cases: a JSON line in, a JSON line out

Flaws: --call TOOL (also call TOOL), --reverse (rank m1 first), --crash-on WORD (exit 3 when
the question has WORD), --sleep S (think S seconds a case).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def answer(given: dict, flaws: argparse.Namespace) -> dict:
    question = str(given.get("q") or given.get("question") or "")
    if flaws.crash_on and flaws.crash_on in question:
        print(f"example agent: can't handle {question!r}", file=sys.stderr)
        sys.exit(3)
    time.sleep(flaws.sleep)
    calls = [
        {"tool": "search", "args": {"q": question}},
        {"tool": "lookup", "args": {"q": question}},
    ]
    calls += [{"tool": tool, "args": {}} for tool in flaws.call]
    ranked = ["m1", "m0"] if flaws.reverse else ["m0", "m1"]
    matches = [{"id": key, "title": f"Precedent {key}"} for key in ranked]
    return {"output": {"answer": f"About {question}", "matches": matches}, "calls": calls,
            "ranked": ranked}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jsonl", action="store_true")
    parser.add_argument("--call", action="append", default=[])
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--crash-on")
    parser.add_argument("--sleep", type=float, default=0)
    flaws = parser.parse_args()
    if not flaws.jsonl:
        print(json.dumps(answer(json.load(sys.stdin), flaws)))
        return
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line), flaws)), flush=True)


if __name__ == "__main__":
    main()
