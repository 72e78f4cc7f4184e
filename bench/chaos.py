"""Chaos: a history of writes under load while processes and the database are killed from outside,
then a check of the history against what is left. Nothing acknowledged may be lost.

    .venv/bin/python bench/chaos.py                                    2 minutes on SQLite
    .venv/bin/python bench/chaos.py --restart \
        --postgres postgresql+psycopg://postgres@127.0.0.1:5433/postgres   its own server
    .venv/bin/python bench/chaos.py --seconds 30 --clients 2            a short run

It loads the test world into a fresh database (a temporary SQLite file, or a new database on the
PostgreSQL server named, dropped afterwards), serves it with gunicorn, starts a fake judge (a real
HTTP server speaking OpenAI's protocol) and the judge's worker, and runs client processes that
each loop over a mixed workload, every write with an Idempotency-Key: adding hand cases, retiring
and restoring them, recording runs and corrections and moving those between statuses, starting
test runs, sending their results and finishing them. A client retries a write that got no
answer, a 503 or a 409 in flight with the same key, a few times, as a careful client would; every
attempt and its answer is logged. Meanwhile, from outside: gunicorn workers SIGKILLed, the master
SIGKILLed and started again, the judge's worker SIGKILLed and started again; on PostgreSQL the
database's backends terminated and, with `--restart`, the server itself restarted. Halfway, a
backup is taken under the load (`sqlite3 … .backup`; `pg_dump`) and restored into a fresh
database.

Afterwards, with the faults stopped: every acknowledged write is there exactly once; every write
that got no answer is either wholly there or wholly absent; retrying every write with its key
gives the first answer (or, for one never answered, does it once); no answer was a 500, and
every error was the envelope (503s with `Retry-After`); `kindgi check` passes; the counts equal
what the list shows; every result sent is eventually judged; the restored backup passes
`kindgi check` and holds every write acknowledged before the backup began. Figures go to
test-artifacts/chaos-<engine>.json; exit status 1 if a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

from fake_judge import Reply, fake_judge  # noqa: E402  (the tests' fake model)
from live import free_port, stop  # noqa: E402
from soak import ADMIN, RUNS, SETS, fresh_database, load_world, worker_pids  # noqa: E402

RETRIED = {503, 409}  # 409 only when the key is in flight (see `Client.write`)
CREATES = {"add a case", "record a run", "record a correction", "start a test run"}
FLASK = str(ROOT / ".venv/bin/flask")
JUDGE_TIMEOUT = 3  # seconds a call to the (fake) judge, which answers in 50 ms


def environment(url: str, judge_url: str, lease: int) -> dict[str, str]:
    return {
        **os.environ,
        "KINDGI_SQLALCHEMY_DATABASE_URI": url,
        "KINDGI_SECRET_KEY": "chaos",
        "KINDGI_JUDGE_URL": judge_url,
        "KINDGI_JUDGE_MODEL": "chaos-judge",
        "KINDGI_IDEMPOTENCY_LEASE_SECONDS": str(lease),
        # a question's lease is its tries' timeouts and waits: seconds here, not minutes
        "KINDGI_JUDGE_TIMEOUT": str(JUDGE_TIMEOUT),
        "KINDGI_JUDGE_TRIES": "1",
    }


def kindgi_check(env: dict[str, str], url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FLASK, "--app", "app", "kindgi", "check"],
        cwd=ROOT, env={**env, "KINDGI_SQLALCHEMY_DATABASE_URI": url},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


# ---------------------------------------------------------------- the processes under fire


class Server:
    """gunicorn on one port, whose master can be killed and started again; and the judge's
    worker, likewise."""

    def __init__(self, env: dict[str, str], workers: int, folder: Path) -> None:
        self.env, self.workers, self.folder = env, workers, folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.master: subprocess.Popen[bytes] | None = None
        self.judge_worker: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with (self.folder / "gunicorn.log").open("ab") as log:
            self.master = subprocess.Popen(
                [str(ROOT / ".venv/bin/gunicorn"), "-w", str(self.workers),
                 "-b", f"127.0.0.1:{self.port}", "app:app"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.master.poll() is not None:  # the port still held by the old workers
                time.sleep(0.5)
                return self.start()
            try:
                requests.get(self.base + "/v1/openapi.json", timeout=2)
                return None
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError("gunicorn did not answer in 60 s")

    def kill_worker(self, rand: random.Random) -> bool:
        pids = worker_pids(self.master.pid) if self.master else []
        if not pids:
            return False
        os.kill(rand.choice(pids), signal.SIGKILL)
        return True

    def kill_master(self) -> None:
        """SIGKILL the master; its orphaned workers finish what they hold and go (gunicorn's
        workers leave once their parent has), any left after 5 s are killed; then a new one."""
        orphans = worker_pids(self.master.pid)
        self.master.kill()
        self.master.wait()
        deadline = time.monotonic() + 5
        while orphans and time.monotonic() < deadline:
            orphans = [pid for pid in orphans if Path(f"/proc/{pid}").exists()]
            time.sleep(0.1)
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.start()

    def start_judge_worker(self) -> None:
        with (self.folder / "judge-worker.log").open("ab") as log:
            self.judge_worker = subprocess.Popen(
                [FLASK, "--app", "app", "kindgi", "worker", "--threads", "4"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def kill_judge_worker(self) -> None:
        self.judge_worker.kill()
        self.judge_worker.wait()
        self.start_judge_worker()

    def stop(self) -> None:
        for proc in (self.master, self.judge_worker):
            if proc is not None and proc.poll() is None:
                stop(proc)


class Postgres:
    """The PostgreSQL server's own faults: its backends ended, the server restarted."""

    def __init__(self, url: str, restart_command: list[str] | None) -> None:
        parsed = make_url(url)
        self.database = parsed.database
        self.conninfo = parsed.set(drivername="postgresql", database="postgres").render_as_string(
            hide_password=False
        )
        self.restart_command = restart_command

    def terminate_backends(self) -> int:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
            return len(
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (self.database,),
                ).fetchall()
            )

    def restart(self) -> None:
        subprocess.run(self.restart_command, check=True, capture_output=True, timeout=120)


def default_restart_command(url: str) -> list[str]:
    """`pg_ctlcluster VERSION NAME restart` for the local cluster on the URL's port."""
    port = str(make_url(url).port or 5432)
    for line in subprocess.run(
        ["pg_lsclusters", "-h"], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        version, name, cluster_port, *_ = line.split()
        if cluster_port == port:
            return ["pg_ctlcluster", version, name, "restart"]
    raise SystemExit(f"no local cluster listens on port {port}: give --restart-command")


# ---------------------------------------------------------------- one client process


class Client:
    """One load process: a mixed workload of writes, each with its own Idempotency-Key, every
    attempt and its answer logged (one JSON line each)."""

    def __init__(self, base: str, seed: int, log: Path) -> None:
        self.base, self.rand, self.log = base, random.Random(seed), log.open("a")
        self.http = requests.Session()
        self.http.headers.update(ADMIN)
        self.cases: list[tuple[str, str]] = []  # (agent, case id) this client added
        self.acknowledged = 0  # writes answered 2xx
        self.corrections: list[tuple[str, str]] = []

    def write(self, op: str, method: str, path: str, body: Any) -> requests.Response | None:
        """One write with a key of its own, retried with that key while it gets no answer, a
        503 or a 409 in flight; its final answer, or None if it never got one."""
        key = uuid.uuid4().hex
        entry = {"op": op, "method": method, "path": path, "body": body, "key": key}
        for attempt in range(6):
            entry["sent"] = time.time()
            try:
                resp = self.http.request(method, self.base + path, json=body, timeout=30,
                                         headers={"Idempotency-Key": key})  # fmt: skip
            except requests.RequestException as exc:
                self.note(entry, attempt, None, str(type(exc).__name__))
                time.sleep(0.3 * (attempt + 1))
                continue
            self.note(entry, attempt, resp)
            in_flight = resp.status_code == 409 and "in-flight" in resp.text
            if resp.status_code not in RETRIED or (resp.status_code == 409 and not in_flight):
                self.acknowledged += resp.status_code < 300
                return resp
            time.sleep(min(float(resp.headers.get("Retry-After", "1")), 1.0) * (attempt + 1) / 2)
        return None

    def note(self, entry: dict[str, Any], attempt: int, resp: Any, error: str = "") -> None:
        line = {**entry, "attempt": attempt, "answered": time.time()}
        if resp is None:
            line["error"] = error
        else:
            line |= {"status": resp.status_code, "answer": resp.text,
                     "retryAfter": resp.headers.get("Retry-After"),
                     "replayed": resp.headers.get("Idempotent-Replayed") == "true"}  # fmt: skip
        self.log.write(json.dumps(line) + "\n")
        self.log.flush()

    # the workload

    def add_case(self) -> None:
        agent, _ = self.rand.choice(SETS)
        body = {"runId": self.rand.choice(RUNS[agent]), "answer": "wrong",
                "why": f"chaos {uuid.uuid4().hex}"}  # fmt: skip
        resp = self.write("add a case", "POST", f"/v1/agents/{agent}/test-set/cases", body)
        if resp is not None and resp.status_code == 201:
            self.cases.append((agent, resp.json()["id"]))

    def retire_or_restore(self) -> None:
        if not self.cases:
            return self.add_case()
        agent, case = self.rand.choice(self.cases)
        path = f"/v1/agents/{agent}/test-set/cases/{case}"
        resp = self.write("retire", "POST", f"{path}/retire", {"reason": "chaos"})
        if resp is not None and resp.status_code == 409:
            self.write("restore", "POST", f"{path}/restore", {})
        return None

    def record_correction(self) -> None:
        agent, project = self.rand.choice(SETS)
        run = self.write("record a run", "POST", f"/v1/agents/{agent}/runs", {
            "projectId": project, "version": "9.9.9", "status": "finished",
            "input": {"q": f"chaos {uuid.uuid4().hex}"}, "output": {"answer": "ok"},
            "calls": [{"tool": "search", "args": {"q": "chaos"}}],
        })  # fmt: skip
        if run is None or run.status_code != 201:
            return
        body = {"answer": "wrong", "why": f"chaos {uuid.uuid4().hex}"}
        path = f"/v1/agents/{agent}/runs/{run.json()['id']}/corrections"
        cor = self.write("record a correction", "POST", path, body)
        if cor is not None and cor.status_code == 201:
            self.corrections.append((agent, cor.json()["id"]))

    def change_correction(self) -> None:
        if not self.corrections:
            return self.record_correction()
        agent, cor = self.rand.choice(self.corrections)
        status = self.rand.choice(["open", "with-the-owner", "fixed", "wont-fix", "removed"])
        self.write("change a correction", "PATCH", f"/v1/agents/{agent}/corrections/{cor}",
                   {"status": status})  # fmt: skip
        return None

    def test_run(self) -> None:
        agent, project = self.rand.choice(SETS)
        runs = f"/v1/agents/{agent}/test-runs"
        body = {"projectId": project, "candidate": "9.9.9", "label": f"chaos {uuid.uuid4().hex}"}
        started = self.write("start a test run", "POST", runs, body)
        if started is None or started.status_code != 201:
            return
        run = f"{runs}/{started.json()['id']}"
        try:
            page = self.http.get(f"{self.base}{run}/cases", params={"limit": 100}, timeout=30)
        except requests.RequestException:
            return
        if page.status_code != 200:
            return
        ids = [c["caseId"] for c in page.json()["data"]]
        chosen = self.rand.sample(ids, min(len(ids), 12))
        for start in range(0, len(chosen), 4):
            results = [{"caseId": c, "output": {"answer": f"chaos {self.rand.random()}"},
                        "calls": []} for c in chosen[start : start + 4]]  # fmt: skip
            self.write("send results", "POST", f"{run}/results", {"results": results})
        self.write("finish a test run", "POST", f"{run}/finish", {})

    MIX = ((add_case, 30), (retire_or_restore, 25), (record_correction, 15),
           (change_correction, 15), (test_run, 4))  # fmt: skip

    def run(self, until: float, at_least: int, cap: float) -> None:
        """The mix until `until` and `at_least` writes acknowledged (a loaded machine answers
        fewer in the time; never past `cap`), after a test run first: the judge is asked
        something even in a short run on a slow machine."""
        ops, weights = zip(*self.MIX, strict=True)
        self.test_run()
        while time.monotonic() < cap and (time.monotonic() < until or self.acknowledged < at_least):
            self.rand.choices(ops, weights)[0](self)


def client_process(args: tuple[str, int, float, str, int, float]) -> None:
    base, seed, until, log, at_least, cap = args
    Client(base, seed, Path(log)).run(until, at_least, cap)


# ---------------------------------------------------------------- faults, and the backup


class Faults(threading.Thread):
    """Faults from outside every `every` seconds or so, until stopped; halfway, the backup."""

    def __init__(self, server: Server, pg: Postgres | None, restart: bool, every: float,
                 backup_at: float, backup: Any) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.server, self.pg, self.every = server, pg, every
        self.rand = random.Random(7)
        self.stopping = threading.Event()
        self.injected: Counter[str] = Counter()
        self.failed: list[str] = []
        self.backup_at, self.backup, self.backup_began = backup_at, backup, None
        self.schedule: list[str] = []
        self.kinds: list[tuple[str, int]] = [
            ("SIGKILL a gunicorn worker", 4), ("SIGKILL the gunicorn master, start it again", 1),
            ("SIGKILL the judge's worker, start it again", 1),
        ]  # fmt: skip
        if pg is not None:
            self.kinds.append(("terminate the database's backends", 2))
            if restart:
                self.kinds.append(("restart the PostgreSQL server", 1))

    def run(self) -> None:
        while not self.stopping.wait(self.rand.uniform(0.5, 1.5) * self.every):
            if self.backup_began is None and time.monotonic() >= self.backup_at:
                self.backup_began = time.time()
                self.backup()
                continue
            if not self.schedule:  # each kind as often as its weight says, in a shuffled order
                self.schedule = [kind for kind, weight in self.kinds for _ in range(weight)]
                self.rand.shuffle(self.schedule)
                if not self.injected:  # the heaviest kinds first: a short, slow run has them
                    for kind, _ in sorted(self.kinds, key=lambda k: k[1])[-2:]:
                        self.schedule.remove(kind)
                        self.schedule.append(kind)
            kind = self.schedule.pop()
            try:
                self.inject(kind)
                self.injected[kind] += 1
            except Exception as exc:  # a fault that could not be injected is reported
                self.failed.append(f"{kind}: {type(exc).__name__} {exc}")

    def inject(self, kind: str) -> None:
        if kind == "SIGKILL a gunicorn worker":
            self.server.kill_worker(self.rand)
        elif kind.startswith("SIGKILL the gunicorn master"):
            self.server.kill_master()
        elif kind.startswith("SIGKILL the judge's worker"):
            self.server.kill_judge_worker()
        elif kind.startswith("terminate"):
            self.pg.terminate_backends()
        else:
            self.pg.restart()


def take_backup(url: str, folder: Path) -> tuple[str, Any]:
    """A backup of the live database, restored into a fresh one: its URL and how to drop it.
    SQLite: `sqlite3 DB .backup` (docs/deploy.md), whose copy is the restored database;
    PostgreSQL: `pg_dump`, restored with `pg_restore` into a new database."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        copy = folder / "backup.sqlite"
        subprocess.run(["sqlite3", parsed.database, f".backup '{copy}'"], check=True, timeout=300)
        return f"sqlite:///{copy}", lambda: None
    dump = folder / "backup.dump"
    plain = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    subprocess.run(["pg_dump", "-Fc", "-f", str(dump), "-d", plain], check=True, timeout=300)
    name = f"{parsed.database}_restored"
    admin = parsed.set(drivername="postgresql", database="postgres")
    import psycopg

    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    target = parsed.set(drivername="postgresql", database=name)
    subprocess.run(["pg_restore", "--no-owner", "-d",
                    target.render_as_string(hide_password=False), str(dump)],
                   check=True, timeout=300)  # fmt: skip

    def drop() -> None:
        with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return target.set(drivername="postgresql+psycopg").render_as_string(hide_password=False), drop


# ---------------------------------------------------------------- the history, checked


def read_history(folder: Path) -> list[dict[str, Any]]:
    """Each write's attempts, in order, by key."""
    writes: dict[str, dict[str, Any]] = {}
    for log in sorted(folder.glob("client-*.jsonl")):
        for line in log.read_text().splitlines():
            attempt = json.loads(line)
            write = writes.setdefault(attempt["key"], {**attempt, "attempts": []})
            write["attempts"].append(attempt)
    for write in writes.values():
        last = write["attempts"][-1]
        final = last.get("status")
        # answered: a decided answer (neither a 503, a 409 in flight, nor no answer at all)
        decided = final is not None and final != 503 and "in-flight" not in last.get("answer", "")
        write["final"] = last if decided else None
    return list(writes.values())


def marker(write: dict[str, Any]) -> str | None:
    """The unique text a creating write leaves in what it creates."""
    body = write["body"]
    return {"add a case": body.get("why"), "record a correction": body.get("why"),
            "record a run": (body.get("input") or {}).get("q"),
            "start a test run": body.get("label")}.get(write["op"])  # fmt: skip


def created_by_marker(url: str) -> Counter[str]:
    """How many rows carry each creating write's marker, read from the database itself."""
    engine = create_engine(url)
    found: Counter[str] = Counter()
    with engine.connect() as conn:
        for (expect,) in conn.execute(text("SELECT expect FROM cases")):
            expect = expect if isinstance(expect, dict) else json.loads(expect)
            why = expect.get("answer", {}).get("why")
            if why:
                found[why] += 1
        for (given,) in conn.execute(text("SELECT input FROM runs")):
            q = given if isinstance(given, dict) else json.loads(given or "null")
            if isinstance(q, dict) and isinstance(q.get("q"), str):
                found[q["q"]] += 1
        for (label,) in conn.execute(text("SELECT label FROM test_runs")):
            if label:
                found[label] += 1
    engine.dispose()
    return found


def check_answers(writes: list[dict[str, Any]]) -> dict[str, Any]:
    """Every answer during the faults was documented: 2xx, the envelope for 4xx, 503 with
    Retry-After; never a 5xx else."""
    statuses: Counter[str] = Counter()
    unanswered: Counter[str] = Counter()
    bad = []
    for write in writes:
        for attempt in write["attempts"]:
            status = attempt.get("status")
            statuses[str(status) if status else f"no answer ({attempt['error']})"] += 1
            if status is None:
                unanswered[f"{write['op']}: {attempt['error']}"] += 1
            if status is None or status < 400:
                continue
            try:
                envelope = json.loads(attempt["answer"])["error"]
                assert envelope["code"] and envelope["requestId"]
            except (ValueError, KeyError, TypeError, AssertionError):
                bad.append(f"{write['op']} {status}: not the envelope: {attempt['answer'][:200]}")
                continue
            if status >= 500 and (status != 503 or not (attempt.get("retryAfter") or "").isdigit()):
                bad.append(f"{write['op']} {status} {envelope['code']}: {envelope['message']}")
    return {
        "answers": dict(sorted(statuses.items())),
        "attempts with no answer, by operation": dict(unanswered),
        "undocumented answers": bad,
    }


def check_creations(writes: list[dict[str, Any]], found: Counter[str],
                    before: float | None = None) -> dict[str, list[str]]:  # fmt: skip
    """Acknowledged creations there exactly once; unanswered ones at most once. With `before`,
    only the creations acknowledged before then are held to it (a backup's)."""
    lost, doubled, half = [], [], []
    for write in writes:
        mark = marker(write)
        if mark is None:
            continue
        final, n = write["final"], found.get(mark, 0)
        if before is not None:
            held = final is not None and final["status"] == 201 and final["answered"] < before
            if held and n != 1:
                lost.append(f"{write['op']} {write['key']}: {n} in the backup")
            continue
        if final is not None and final["status"] == 201:
            (lost if n == 0 else doubled if n > 1 else []).append(f"{write['op']} {write['key']}")
        elif n > 1:
            doubled.append(f"{write['op']} {write['key']} (unanswered)")
        elif final is not None and n:  # refused, yet there
            half.append(f"{write['op']} {write['key']}: {final['status']} yet created")
    return {"lost": lost, "duplicated": doubled, "half-applied": half}


def retry_all(base: str, writes: list[dict[str, Any]], patience: float) -> dict[str, Any]:
    """Every write again with its key: a decided one must replay its first answer byte for
    byte; an unanswered one gets its answer now (done once: see `check_creations`)."""
    http = requests.Session()
    http.headers.update(ADMIN)
    differ, unanswered, replayed = [], [], 0
    for write in writes:
        deadline = time.monotonic() + patience
        while True:
            try:
                resp = http.request(write["method"], base + write["path"], json=write["body"],
                                    headers={"Idempotency-Key": write["key"]},
                                    timeout=30)  # fmt: skip
            except requests.RequestException:
                resp = None
            waiting = (
                resp is None
                or resp.status_code == 503
                or (resp.status_code == 409 and "in-flight" in resp.text)
            )
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        final = write["final"]
        if resp is None or waiting:
            unanswered.append(f"{write['op']} {write['key']}: no answer on retry")
        elif final is not None:
            replayed += 1
            same = (resp.status_code, resp.text) == (final["status"], final["answer"])
            again = resp.headers.get("Idempotent-Replayed") == "true"
            if not same or not again:  # a retry that was no replay did the write only now
                how = "replayed" if again else "done by the retry"
                differ.append(f"{write['op']} {write['key']}: {final['status']} then "
                              f"{resp.status_code} ({how}) {resp.text[:120]}")  # fmt: skip
        write["retried"] = resp.status_code
    return {"replayed": replayed, "replays not identical": differ, "retries unanswered": unanswered}


def check_states(writes: list[dict[str, Any]], url: str) -> list[str]:
    """Each case's and correction's state is what its last write said, where that write was
    answered (an unanswered last write may have happened or not: the replays check it)."""
    last: dict[str, dict[str, Any]] = {}
    for write in sorted(writes, key=lambda w: w["attempts"][0]["sent"]):
        if write["op"] in ("retire", "restore", "change a correction"):
            last[write["path"].rstrip("/").split("/")[-1 if write["op"] == "change a correction"
                                                      else -2]] = write  # fmt: skip
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT id, status, retired_at FROM cases"))}
    engine.dispose()
    wrong = []
    for case_id, write in last.items():
        final = write["final"]
        if final is None or case_id not in rows:
            continue
        row, code = rows[case_id], final["answer"]
        if write["op"] == "change a correction":
            want = write["body"]["status"] if final["status"] == 200 else row.status
            ok = row.status == want
        else:
            retired = (write["op"] == "retire") == (final["status"] == 200)
            if final["status"] == 409:
                retired = "case-retired" in code
            ok = (row.retired_at is not None) == retired
        if not ok:
            wrong.append(f"{write['op']} {case_id} answered {final['status']}: state differs")
    return wrong


def check_list_and_counts(base: str) -> dict[str, Any]:
    mismatch = {}
    for agent, project in SETS:
        ids, params = set(), {"projectId": project, "include": "retired", "limit": 100}
        while True:
            page = requests.get(f"{base}/v1/agents/{agent}/test-set/cases", params=params,
                                headers=ADMIN, timeout=60).json()  # fmt: skip
            ids |= {c["id"] for c in page["data"]}
            if not page["hasMore"]:
                break
            params["cursor"] = page["nextCursor"]
        counts = requests.get(f"{base}/v1/agents/{agent}/test-set", params={"projectId": project},
                              headers=ADMIN, timeout=60).json()["cases"]  # fmt: skip
        if counts["active"] + counts["retired"] != len(ids):
            mismatch[f"{agent} {project}"] = [counts["active"] + counts["retired"], len(ids)]
    return mismatch


def wait_for_judging(url: str, patience: float) -> dict[str, Any]:
    """Every question put to the judge is eventually answered (a killed worker's lease runs
    out and it is asked again), and no test run stays `grading`."""
    engine = create_engine(url)
    deadline = time.monotonic() + patience
    while True:
        with engine.connect() as conn:
            open_questions = conn.execute(text(
                "SELECT count(*) FROM judge_questions q JOIN test_runs r ON r.pk = q.run_pk "
                "WHERE q.outcome IS NULL AND r.status != 'canceled'")).scalar_one()  # fmt: skip
            grading = conn.execute(
                text("SELECT count(*) FROM test_runs WHERE status = 'grading'")
            ).scalar_one()
            asked = conn.execute(text("SELECT count(*) FROM judge_questions")).scalar_one()
        if (not open_questions and not grading) or time.monotonic() > deadline:
            break
        time.sleep(1)
    engine.dispose()
    return {"questions": asked, "unanswered": open_questions, "runs still grading": grading}


# ---------------------------------------------------------------- the whole run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--every", type=float, default=1.5, help="seconds between faults")
    parser.add_argument("--min-acknowledged", type=int, default=0,
                        help="go on past --seconds (up to 5 times as long) until so many "
                             "writes are acknowledged")  # fmt: skip
    parser.add_argument("--lease", type=int, default=10, help="Idempotency-Key lease, seconds")
    parser.add_argument("--postgres", default="", help="a PostgreSQL server (else SQLite)")
    parser.add_argument("--restart", action="store_true",
                        help="restart the PostgreSQL server too (never a shared one!)")  # fmt: skip
    parser.add_argument("--restart-command", default="",
                        help="how to restart it (default: pg_ctlcluster for its port)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the clients' and servers' logs in this folder")  # fmt: skip
    args = parser.parse_args(argv)
    engine = "postgresql" if args.postgres else "sqlite"
    out = args.json or ROOT / "test-artifacts" / f"chaos-{engine}.json"
    restart = None
    if args.restart:
        restart = shlex.split(args.restart_command) or default_restart_command(args.postgres)

    with tempfile.TemporaryDirectory() as tmp, fake_judge(lambda _: Reply(delay=0.05)) as judge:
        folder = Path(tmp)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            folder = args.keep
        url, drop = fresh_database(args.postgres, folder, "chaos")
        drops = [drop]
        try:
            phases = {"begun": time.monotonic()}
            load_world(url)
            phases["world loaded"] = time.monotonic()
            env = environment(url, judge.url, args.lease)
            server = Server(env, args.workers, folder)
            pg = Postgres(url, restart) if args.postgres else None
            backups: dict[str, Any] = {}

            def backup() -> None:
                restored, drop_restored = take_backup(url, folder)
                drops.append(drop_restored)
                backups["url"] = restored

            started = time.monotonic()
            server.start()
            server.start_judge_worker()
            phases["served"] = time.monotonic()
            until = time.monotonic() + args.seconds
            # halfway through the load, however long the servers took to start
            faults = Faults(server, pg, restart is not None, args.every,
                            until - args.seconds / 2, backup)  # fmt: skip
            faults.start()
            try:
                with multiprocessing.get_context("fork").Pool(args.clients) as pool:
                    each = -(-args.min_acknowledged // args.clients)
                    cap = until + 4 * args.seconds
                    pool.map(client_process, [(server.base, seed, until,
                                               str(folder / f"client-{seed}.jsonl"), each, cap)
                                              for seed in range(args.clients)])  # fmt: skip
            finally:
                faults.stopping.set()
                faults.join(180)
            elapsed = time.monotonic() - started
            phases["load and faults over"] = time.monotonic()
            if server.master.poll() is not None:
                server.start()
            # the last fault: the judge's worker killed and started again, which queues every
            # question still waiting (a leased one when its lease runs out)
            server.kill_judge_worker()
            faults.injected["SIGKILL the judge's worker, start it again"] += 1
            writes = read_history(folder)
            figures = check_answers(writes)
            found = created_by_marker(url)
            before = check_creations(writes, found)
            states = check_states(writes, url)
            phases["history checked"] = time.monotonic()
            retries = retry_all(server.base, writes, patience=args.lease + 20)
            after = check_creations(
                [{**w, "final": w["final"] or {"status": w["retried"], "answered": 0}}
                 for w in writes], created_by_marker(url))  # fmt: skip
            phases["every write retried"] = time.monotonic()
            judging = wait_for_judging(url, patience=JUDGE_TIMEOUT + 45)
            phases["all judged"] = time.monotonic()
            checked = kindgi_check(env, url)
            phases["kindgi check"] = time.monotonic()
            mismatch = check_list_and_counts(server.base)
            if "url" in backups:
                backup_check = kindgi_check(env, backups["url"])
                in_backup = check_creations(writes, created_by_marker(backups["url"]),
                                            before=faults.backup_began)  # fmt: skip
                held = sum(1 for w in writes if marker(w) and w["final"]
                           and w["final"]["status"] == 201
                           and w["final"]["answered"] < faults.backup_began)  # fmt: skip
            server.stop()
        finally:
            for dropping in reversed(drops):
                dropping()

    acknowledged = [w for w in writes if w["final"] is not None and w["final"]["status"] < 300]
    figures = {
        "engine": engine,
        "seconds": round(elapsed, 1),
        "client processes": args.clients,
        "gunicorn workers": args.workers,
        "writes": len(writes),
        "requests (attempts)": sum(len(w["attempts"]) for w in writes),
        "writes by operation": dict(Counter(w["op"] for w in writes)),
        "faults injected": dict(faults.injected),
        "faults that could not be injected": faults.failed,
        "gunicorn masters started": server.starts,
        "phases, seconds": {
            name: round(at - previous, 1)
            for (name, at), previous in zip(
                list(phases.items())[1:], list(phases.values())[:-1], strict=True
            )
        },
        "writes acknowledged (2xx)": len(acknowledged),
        "writes answered with a refusal (4xx)": sum(
            1 for w in writes if w["final"] is not None and w["final"]["status"] >= 400
        ),
        "writes never answered": sum(1 for w in writes if w["final"] is None),
        **figures,
        "lost": before["lost"],
        "duplicated": before["duplicated"] + after["duplicated"],
        "half-applied": before["half-applied"],
        "after retrying every write, not exactly once": after["lost"] + after["half-applied"],
        "states not as last answered": states,
        **retries,
        "judge": judging,
        "kindgi check": checked.returncode,
        "kindgi check output": checked.stdout.strip().splitlines(),
        "counts not matching the list": mismatch,
        "backup": {
            "creations acknowledged before it began": held,
            "missing from the restored backup": in_backup["lost"],
            "kindgi check on the restored backup": backup_check.returncode,
        }
        if "url" in backups
        else "not taken (the run was too short)",
    }
    failures = [
        name for name in ("undocumented answers", "lost", "duplicated", "half-applied",
                          "after retrying every write, not exactly once",
                          "states not as last answered", "replays not identical",
                          "retries unanswered", "counts not matching the list",
                          "faults that could not be injected")
        if figures[name]
    ]  # fmt: skip
    if checked.returncode:
        failures.append("kindgi check")
    if judging["unanswered"] or judging["runs still grading"]:
        failures.append("judge")
    if "url" in backups and (in_backup["lost"] or backup_check.returncode):
        failures.append("backup")
    figures["failed"] = failures
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=1, ensure_ascii=False))
    for key, value in figures.items():
        shown = value[:5] if isinstance(value, list) else value
        print(f"{key}: {json.dumps(shown, ensure_ascii=False)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
