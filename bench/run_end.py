"""A full run's end (its cases' records, `service.records.run_done`) timed on a kept demo's
largest set, undone after each try, so the same end can be timed again and by other code.

    python bench/run.py --only quick-scale --sizes 1000000 --keep --workdir DIR --out FILE
    python bench/run_end.py URL [--window 5] [--tries 3]

The first command leaves the 1M demo with five done full runs of its 313,711-case set; this
one starts a sixth through the API (once: it stays open), then, in a transaction rolled back
after each try, marks its outcomes as `time_at_scale` does and ends it (`settle`). With
`--window 5` the end pushes the oldest run out of the records' window, as every end does once
a set has 50 runs. Each try: wall seconds, this process's CPU seconds, on PostgreSQL the
server backend's CPU seconds (read from /proc: the server must run on this host), and each
SQL statement's wall and CPU time (on PostgreSQL the CPU is this process's alone). The code
timed is the `kindgi` this file's folder holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run import answered  # noqa: E402  (bench/run.py's: a run answered in place)
from sqlalchemy import event, select, text  # noqa: E402

from kindgi import create_app, demo  # noqa: E402
from kindgi.database import db, set_writing  # noqa: E402
from kindgi.models import TestRun  # noqa: E402
from kindgi.service import records  # noqa: E402
from kindgi.service.test_runs import settle  # noqa: E402

CANDIDATE = "run-end-bench"


def backend_cpu(pid: int | None) -> float:
    """A PostgreSQL backend's CPU seconds so far (0 on SQLite, whose work is this process's)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the kept demo's SQLAlchemy URL")
    parser.add_argument("--window", type=int, default=records.WINDOW)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "KINDGI_SQLALCHEMY_DATABASE_URI": args.url}
    shown = subprocess.run([sys.executable, "-m", "flask", "--app", "app", "kindgi", "demo",
                            "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                           check=True)  # fmt: skip
    token = json.loads(shown.stdout.strip().splitlines()[-1])["token"]
    app = create_app({"SQLALCHEMY_DATABASE_URI": args.url, "DB_STATEMENT_TIMEOUT_MS": 600_000})
    records.WINDOW = args.window
    agent, project = demo.AGENTS[0][0], demo.PROJECTS[0][0]
    with app.app_context():
        run = db.session.scalar(
            select(TestRun).where(TestRun.candidate == CANDIDATE, TestRun.status == "open")
        )
        db.session.rollback()
        if run is None:
            resp = app.test_client().post(
                f"/v1/agents/{agent}/test-runs",
                json={"projectId": project, "candidate": CANDIDATE},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert resp.status_code == 201, resp.get_data()[:300]
        statements: list[tuple[float, float, str]] = []

        def before(conn, cursor, statement, *_):
            conn.info["started"] = time.monotonic(), time.process_time()

        def after(conn, cursor, statement, *_):
            wall, cpu = conn.info["started"]
            statements.append((time.monotonic() - wall, time.process_time() - cpu, statement))

        event.listen(db.engine, "before_cursor_execute", before)
        event.listen(db.engine, "after_cursor_execute", after)
        for attempt in range(args.tries):
            set_writing(True)
            run = db.session.scalar(
                select(TestRun).where(TestRun.candidate == CANDIDATE, TestRun.status == "open")
            )
            pg = db.session.get_bind().dialect.name == "postgresql"
            pid = db.session.execute(text("SELECT pg_backend_pid()")).scalar() if pg else None
            tallies = answered(db.session, run, 35)
            total = tallies["cases"]["total"]
            db.session.flush()
            statements.clear()
            cpu, server, started = time.process_time(), backend_cpu(pid), time.monotonic()
            settle(run, tallies)
            took, cpu = time.monotonic() - started, time.process_time() - cpu
            server = backend_cpu(pid) - server
            print(f"try {attempt + 1}: {db.session.get_bind().dialect.name}, {total:,} cases, "
                  f"window {args.window}: {took:.2f} s wall, CPU {cpu:.2f} s in this process"
                  + (f", {server:.2f} s in the server" if pg else "")
                  + f", {len(statements)} statements")  # fmt: skip
            for wall, cpu, statement in statements:
                print(f"    {wall:7.3f} s (CPU {cpu:6.3f} s)  {' '.join(statement.split())[:100]}")
            db.session.rollback()
            set_writing(False)


if __name__ == "__main__":
    main()
