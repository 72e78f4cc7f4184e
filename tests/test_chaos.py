"""A short `bench/chaos.py` on the test's engine: client processes writing with Idempotency-Keys
while gunicorn workers, the master and the judge's worker are SIGKILLed (and, on PostgreSQL, the
run's own database's backends terminated: never the shared server restarted), a backup taken
under the load; then the history checked against what is left. The full run, with PostgreSQL
restarted, is `bench/chaos.py` (docs/reliability.md)."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import HERE
from databases import SERVER

sys.path.insert(0, str(HERE.parent / "bench"))

import chaos


@pytest.mark.engine  # bench/chaos.py on the suite's engine
def test_nothing_acknowledged_is_lost_when_processes_are_killed_under_load(tmp_path):
    out = tmp_path / "chaos.json"
    # a machine too loaded to acknowledge 24 writes in 15 s goes on until it has (a run at
    # load 17 acknowledged 15, and the test took the load for missing)
    args = ["--seconds", "15", "--clients", "2", "--every", "1.5", "--lease", "5",
            "--min-acknowledged", "24"]  # fmt: skip
    args += ["--json", str(out), *(["--postgres", SERVER] if SERVER else [])]
    status = chaos.main(args)
    figures = json.loads(out.read_text())
    assert status == 0, figures["failed"]
    assert figures["failed"] == []
    assert figures["writes acknowledged (2xx)"] > 20
    assert figures["faults injected"].get("SIGKILL a gunicorn worker")
    assert figures["judge"]["questions"] and not figures["judge"]["unanswered"]
    assert figures["backup"]["creations acknowledged before it began"] > 0
    for kind in ("lost", "duplicated", "half-applied", "undocumented answers"):
        assert figures[kind] == [], kind
