"""The benchmark's smoke run, so it cannot rot: `bench/run.py --smoke` end to end, small and fast.

It builds a 1,000-case demo, serves it with gunicorn beside the raw app, drives every measure with
wrk for a second and writes the table; on the engine the suite runs on (PostgreSQL when
KINDGI_TEST_DATABASE_URL names a server). The full benchmark is not a test: see the README.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MEASURES = (
    "list first page (25)",
    "list deep page (25)",
    "counts",
    "one case",
    "HTML cases page",
    "raw baseline: first page",
    "search q=refund (~1 %), first page (25)",
    "search q=refund (~1 %), deep page (25)",
    "search q=urgent (~50 %), first page (25)",
    "read a test run",
    "run results first page (25)",
    "run results deep page (25)",
    "compare first page (25)",
    "HTML run page (first page of results)",
    "add a hand case",
    "build: kindgi demo",
    "freeze",
    "freeze again, unchanged",
    "send 316 results",
    "judge verdicts, database queue",
    "kindgi test-run, jsonl, 4 jobs",
    "kindgi test-run, exec, 4 jobs",
    "pytest plugin, -n 4",
    "plain parametrized pytest, -n 4",
    "peak RSS per worker",
    "OTLP export, stored",
    "OTLP export, raw parse-and-discard",
    "runs inbox first page (HTML)",
    "runs list first page (JSON, 25)",
    "build: kindgi demo, runs world",
    "prune: runs no case was made from, older than a day",
    "prune: longest batch",
)


@pytest.mark.engine  # bench/run.py on the suite's engine
def test_the_bench_smoke_run_writes_a_table_of_every_measure(tmp_path):
    server = os.environ.get("KINDGI_TEST_DATABASE_URL", "")
    engine = "postgresql" if server.startswith("postgresql") else "sqlite"
    out = tmp_path / "results.md"
    command = [sys.executable, "bench/run.py", "--smoke", "--engines", engine]
    command += ["--out", str(out), "--workdir", str(tmp_path)]
    if engine == "postgresql":
        command += ["--postgres", server]
    done = _run(command)
    assert done.returncode == 0, done.stderr[-4000:]
    table = out.read_text()
    assert table.strip() in done.stdout  # printed as well as written
    for measure in MEASURES:
        rows = [line for line in table.splitlines() if line.startswith(f"| {measure}")]
        assert rows, f"no row for {measure}:\n{table}"
        assert "| 1,000 |" in rows[0], rows[0]
    assert "| errors |" in table and "## Commands" in table


def _run(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The bench run to its end; past `timeout` stopped as Ctrl-C would (its servers stopped,
    its databases dropped, not left to slow the rest of the suite) and failed with where its
    log had got to."""
    bench = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = bench.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        bench.terminate()
        out, err = bench.communicate(timeout=60)
        pytest.fail(f"bench/run.py --smoke ran past {timeout:.0f} s; its log:\n{err[-6000:]}")
    return subprocess.CompletedProcess(command, bench.returncode, out, err)
