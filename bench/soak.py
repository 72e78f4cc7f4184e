"""Soak: minutes of mixed reads and writes from several processes against gunicorn.

    .venv/bin/python bench/soak.py                      5 minutes on SQLite
    .venv/bin/python bench/soak.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/soak.py --minutes 1 --clients 2   a short run

It loads the test world (tests/world.json) into a fresh database (a temporary SQLite file, or a
new database on the PostgreSQL server named, dropped afterwards), serves it with gunicorn (4 sync
workers), and runs client processes that each loop over a weighted mix of every API operation
and the expert's pages (signed in once per process): lists with filters and cursors, counts,
cases, runs; adding cases (some retried with their Idempotency-Key), retiring and restoring,
recording runs and corrections, moving corrections between statuses that keep them cases,
making, listing and revoking tokens.

Afterwards it checks that no answer was a 5xx, that every case a 201 created is listed (retired
or not) and counted, and that each worker's resident memory stayed flat (sampled every 5
seconds; the first minute is warm-up). It prints a summary and writes the figures as JSON
(test-artifacts/soak-<engine>.json); exit status 1 if a check failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, ClassVar

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from live import gunicorn_master  # noqa: E402  (the tests' gunicorn launcher)

WORLD = ROOT / "tests" / "world.json"
P1 = "2489e9ad-2ee2-8e00-8ec9-32d5f69181c0"
P2 = "b1f1c0de-0000-4000-8000-000000000002"
AGENT, MULTI = "acme.drafting", "acme.multi"
ADMIN = {"Authorization": "Bearer kgi_admin"}
SETS = [(AGENT, P1), (MULTI, P2)]
RUNS = {AGENT: ["run-1", "run-2"], MULTI: ["run-multi"]}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
MEMORY_GROWTH_LIMIT_MB = 15  # a worker "flat": within this of its size after warm-up


# ---------------------------------------------------------------- the database and the server


def fresh_database(url: str | None, folder: Path, name: str = "soak") -> tuple[str, Any]:
    """A new database URL, and how to drop it."""
    if not url:
        path = folder / f"{name}.sqlite"
        return f"sqlite:///{path}", lambda: None
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"kindgi_{name}_{os.getpid()}"
    admin = make_url(url).set(drivername="postgresql", database="postgres")
    conninfo = admin.render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    new = make_url(url).set(drivername="postgresql+psycopg", database=name)
    return new.render_as_string(hide_password=False), drop


def load_world(url: str) -> None:
    env = {**os.environ, "KINDGI_SQLALCHEMY_DATABASE_URI": url, "KINDGI_SECRET_KEY": "soak"}
    subprocess.run(
        [str(ROOT / ".venv/bin/flask"), "--app", "app", "kindgi", "load", str(WORLD)],
        cwd=ROOT, env=env, check=True, capture_output=True,
    )  # fmt: skip


def worker_pids(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children")
    return [int(p) for p in children.read_text().split()] if children.exists() else []


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class MemoryWatch(threading.Thread):
    """Each worker's RSS every `every` seconds, by pid."""

    def __init__(self, master: int, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.master, self.every = master, every
        self.samples: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.stopping = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.stopping.is_set():
            now = time.monotonic() - self.started_at
            for pid in worker_pids(self.master):
                mb = rss_mb(pid)
                if mb is not None:
                    self.samples[pid].append((now, mb))
            self.stopping.wait(self.every)


# ---------------------------------------------------------------- one client process


class Client:
    """One load process: a weighted mix of every operation, recording every answer."""

    def __init__(self, base: str, seed: int) -> None:
        self.base = base
        self.rand = random.Random(seed)
        self.api = requests.Session()
        self.api.headers.update(ADMIN)
        self.page = requests.Session()
        self.answers: Counter[str] = Counter()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.created: dict[str, tuple[str, str]] = {}  # case id -> (agent, project)
        self.mine: list[tuple[str, str]] = []  # (agent, case id) this process may retire
        self.corrections: list[tuple[str, str]] = []
        self.tokens: list[str] = []
        self.signed_in = False

    def record(self, op: str, resp: requests.Response, started: float) -> requests.Response:
        self.latency[op].append(time.monotonic() - started)
        self.answers[f"{op} {resp.status_code}"] += 1
        if resp.status_code >= 500:
            self.errors.append(f"{op} {resp.status_code} {resp.text[:300]}")
        return resp

    def call(self, op: str, method: str, path: str, **kw: Any) -> requests.Response:
        started = time.monotonic()
        resp = self.api.request(method, self.base + path, timeout=60, **kw)
        return self.record(op, resp, started)

    def created_case(self, resp: requests.Response, agent: str, project: str) -> None:
        if resp.status_code == 201:
            case = resp.json()
            self.created[case["id"]] = (agent, project)
            if resp.headers.get("Idempotent-Replayed") != "true":
                self.mine.append((agent, case["id"]))

    # the operations, each with its weight

    def list_cases(self) -> None:
        agent, project = self.rand.choice(SETS)
        params: dict[str, Any] = {"projectId": project, "limit": self.rand.choice([5, 25, 100])}
        if self.rand.random() < 0.5:
            params["include"] = "retired"
        if self.rand.random() < 0.3:
            params["kind"] = self.rand.choice(["hand", "correction", "hand,correction"])
        for _ in range(self.rand.randint(1, 3)):
            resp = self.call("list cases", "GET", f"/v1/agents/{agent}/test-set/cases",
                             params=params)  # fmt: skip
            if resp.status_code != 200 or not resp.json().get("nextCursor"):
                return
            params["cursor"] = resp.json()["nextCursor"]

    def counts(self) -> None:
        agent, project = self.rand.choice(SETS)
        self.call("counts", "GET", f"/v1/agents/{agent}/test-set", params={"projectId": project})

    def read_case(self) -> None:
        agent, case = self.rand.choice(self.mine) if self.mine else (AGENT, "case-2")
        self.call("read a case", "GET", f"/v1/agents/{agent}/test-set/cases/{case}")

    def list_runs(self) -> None:
        agent, project = self.rand.choice(SETS)
        self.call("list runs", "GET", f"/v1/agents/{agent}/runs",
                  params={"projectId": project, "status": "finished"})  # fmt: skip

    def add_case(self) -> None:
        agent, project = self.rand.choice(SETS)
        body = {"runId": self.rand.choice(RUNS[agent]), "answer": "wrong",
                "why": f"soak {uuid.uuid4().hex[:8]} 🦜"}  # fmt: skip
        key = {"Idempotency-Key": uuid.uuid4().hex}
        path = f"/v1/agents/{agent}/test-set/cases"
        resp = self.call("add a case", "POST", path, json=body, headers=key)
        self.created_case(resp, agent, project)
        if self.rand.random() < 0.2:  # a client retrying: the replay
            again = self.call("add a case (retry)", "POST", path, json=body, headers=key)
            if resp.status_code == 201 and again.content != resp.content:
                self.errors.append(f"replay differs: {resp.text[:100]} / {again.text[:100]}")

    def retire_or_restore(self) -> None:
        if not self.mine:
            return self.add_case()
        agent, case = self.rand.choice(self.mine)
        path = f"/v1/agents/{agent}/test-set/cases/{case}"
        resp = self.call("retire", "POST", f"{path}/retire", json={"reason": "soak"})
        if resp.status_code == 409:
            self.call("restore", "POST", f"{path}/restore", json={})
        return None

    def record_run_and_correction(self) -> None:
        agent, project = self.rand.choice(SETS)
        run = self.call("record a run", "POST", f"/v1/agents/{agent}/runs", json={
            "projectId": project, "version": "9.9.9", "status": "finished",
            "input": {"q": "soak"}, "output": {"answer": "ok", "matches": [1, 2]},
            "calls": [{"tool": "search", "args": {"q": "soak"}}],
        })  # fmt: skip
        if run.status_code != 201:
            return
        cor = self.call("record a correction", "POST",
                        f"/v1/agents/{agent}/runs/{run.json()['id']}/corrections",
                        json={"decisions": "wrong", "mustNotCall": ["search"]},
                        headers={"Idempotency-Key": uuid.uuid4().hex})  # fmt: skip
        self.created_case(cor, agent, project)
        if cor.status_code == 201:
            self.corrections.append((agent, cor.json()["id"]))

    def change_correction(self) -> None:
        if not self.corrections:
            return self.record_run_and_correction()
        agent, cor = self.rand.choice(self.corrections)
        status = self.rand.choice(["open", "with-the-owner", "fixed"])  # all keep it a case
        self.call("change a correction", "PATCH", f"/v1/agents/{agent}/corrections/{cor}",
                  json={"status": status})  # fmt: skip
        return None

    def tokens_round(self) -> None:
        if self.tokens and self.rand.random() < 0.5:
            self.call("revoke a token", "DELETE", f"/v1/tokens/{self.tokens.pop()}")
            return
        made = self.call("make a token", "POST", "/v1/tokens", json={"name": "soak"})
        if made.status_code == 201:
            self.tokens.append(made.json()["id"])
        self.call("list tokens", "GET", "/v1/tokens")

    def pages(self) -> None:
        if not self.signed_in:
            login = self.page.get(self.base + "/login", timeout=60)
            token = CSRF.search(login.text).group(1)
            started = time.monotonic()
            resp = self.page.post(self.base + "/login", data={
                "email": "expert@acme.test", "password": "expert-pass-1", "csrf_token": token,
            }, allow_redirects=False, timeout=60)  # fmt: skip
            self.record("sign in", resp, started)
            self.signed_in = resp.status_code == 302
        path = self.rand.choice([
            "/", f"/agents/{MULTI}/test-set/cases?projectId={P2}",
            f"/agents/{MULTI}/test-set/cases?projectId={P2}&kind=hand&include=retired",
            f"/agents/{MULTI}/test-set/cases/cor-3", "/tokens",
        ])  # fmt: skip
        started = time.monotonic()
        self.record("page", self.page.get(self.base + path, timeout=60), started)

    MIX: ClassVar[list[tuple[Any, int]]] = [  # (operation, weight)
        (list_cases, 30), (counts, 12), (read_case, 8), (list_runs, 5), (add_case, 15),
        (retire_or_restore, 8), (record_run_and_correction, 5), (change_correction, 4),
        (tokens_round, 3), (pages, 10),
    ]  # fmt: skip

    def run(self, until: float) -> dict[str, Any]:
        ops, weights = zip(*self.MIX, strict=True)
        while time.monotonic() < until:
            op = self.rand.choices(ops, weights)[0]
            try:
                op(self)
            except requests.RequestException as exc:
                self.errors.append(f"{op.__name__}: {type(exc).__name__} {exc}")
        return {
            "answers": dict(self.answers),
            "latency": {k: v for k, v in self.latency.items()},
            "errors": self.errors,
            "created": self.created,
        }


def client_process(args: tuple[str, int, float]) -> dict[str, Any]:
    base, seed, until = args
    return Client(base, seed).run(until)


# ---------------------------------------------------------------- checking and reporting


def listed_ids(base: str, agent: str, project: str) -> set[str]:
    ids, params = set(), {"projectId": project, "include": "retired", "limit": 100}
    while True:
        resp = requests.get(f"{base}/v1/agents/{agent}/test-set/cases", params=params,
                            headers=ADMIN, timeout=60)  # fmt: skip
        resp.raise_for_status()
        page = resp.json()
        ids |= {c["id"] for c in page["data"]}
        if not page["hasMore"]:
            return ids
        params["cursor"] = page["nextCursor"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4, help="load processes")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--database-url", default="", help="a PostgreSQL server (else SQLite)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    engine = "postgresql" if args.database_url else "sqlite"
    out = args.json or ROOT / "test-artifacts" / f"soak-{engine}.json"

    with tempfile.TemporaryDirectory() as tmp:
        url, drop = fresh_database(args.database_url, Path(tmp))
        try:
            load_world(url)
            log = Path(tmp) / "gunicorn.log"
            with gunicorn_master(url, log, args.workers) as (master, base):
                watch = MemoryWatch(master.pid)
                watch.start()
                started = time.monotonic()
                until = started + args.minutes * 60
                try:
                    with multiprocessing.get_context("fork").Pool(args.clients) as pool:
                        results = pool.map(
                            client_process, [(base, seed, until) for seed in range(args.clients)]
                        )
                    elapsed = time.monotonic() - started
                    listed = {s: listed_ids(base, *s) for s in SETS}
                    counted = {}
                    for agent, project in SETS:
                        counts = requests.get(f"{base}/v1/agents/{agent}/test-set",
                                              params={"projectId": project}, headers=ADMIN,
                                              timeout=60).json()["cases"]  # fmt: skip
                        counted[(agent, project)] = counts["active"] + counts["retired"]
                finally:
                    watch.stopping.set()
                    watch.join(10)
                    gunicorn_log = log.read_text(errors="replace")  # before the master stops
        finally:
            drop()

    answers: Counter[str] = Counter()
    latency: dict[str, list[float]] = defaultdict(list)
    errors, created = [], {}
    for r in results:
        answers.update(r["answers"])
        for op, values in r["latency"].items():
            latency[op] += values
        errors += r["errors"]
        created.update(r["created"])
    total = sum(answers.values())
    statuses = Counter()
    for key, n in answers.items():
        statuses[key.rsplit(" ", 1)[1]] += n
    server_errors = sum(n for s, n in statuses.items() if s.startswith("5"))
    missing = sorted(c for c, s in created.items() if c not in listed[tuple(s)])
    count_mismatch = {f"{a} {p}": (counted[(a, p)], len(listed[(a, p)])) for a, p in SETS
                      if counted[(a, p)] != len(listed[(a, p)])}  # fmt: skip
    memory = {}
    for pid, samples in watch.samples.items():
        warm = [mb for t, mb in samples if t >= min(60.0, elapsed / 3)]
        if len(warm) >= 2:
            by_minute = [round(mb, 1) for t, mb in samples if t // 60 != (t - watch.every) // 60]
            memory[pid] = {"after warm-up MB": round(warm[0], 1), "end MB": round(warm[-1], 1),
                           "peak MB": round(max(warm), 1),
                           "growth MB": round(warm[-1] - warm[0], 1),
                           "each minute MB": by_minute}  # fmt: skip
    flat = all(m["growth MB"] <= MEMORY_GROWTH_LIMIT_MB for m in memory.values()) and memory
    worker_deaths = gunicorn_log.count("WORKER TIMEOUT") + gunicorn_log.count("was sent SIG")
    figures = {
        "engine": engine,
        "minutes": round(elapsed / 60, 2),
        "client processes": args.clients,
        "gunicorn workers": args.workers,
        "requests": total,
        "requests per second": round(total / elapsed, 1),
        "statuses": dict(sorted(statuses.items())),
        "5xx": server_errors,
        "client errors (connection, replay)": len(errors),
        "cases created (201)": len(created),
        "created but not listed": len(missing),
        "counts not matching the list": count_mismatch,
        "worker memory": memory,
        "memory flat": bool(flat),
        "worker restarts": worker_deaths,
        "latency ms (p50 / p95 / p99)": {
            op: [round(percentile(v, q) * 1000, 1) for q in (0.5, 0.95, 0.99)]
            for op, v in sorted(latency.items())
        },
        "answers by operation": dict(sorted(answers.items())),
        "first errors": errors[:10],
        "missing ids": missing[:10],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=1, ensure_ascii=False))
    for key, value in figures.items():
        if key in ("latency ms (p50 / p95 / p99)", "answers by operation", "worker memory"):
            continue
        print(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    for pid, m in memory.items():
        print(f"worker {pid}: {json.dumps(m)}")
    print("latency ms (p50 / p95 / p99) and answers:")
    for op, v in figures["latency ms (p50 / p95 / p99)"].items():
        got = {k.rsplit(" ", 1)[1]: n for k, n in answers.items() if k.rsplit(" ", 1)[0] == op}
        print(f"  {op:24} {v[0]:7.1f} {v[1]:7.1f} {v[2]:7.1f}   {got}")
    everything = list(itertools.chain.from_iterable(latency.values()))
    print(f"median request {statistics.median(everything) * 1000:.1f} ms")
    ok = server_errors == 0 and not errors and not missing and not count_mismatch and flat
    print("PASS" if ok else "FAIL", f"(figures in {out})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
