"""Kindgi's benchmark: the API at 1,000, 100,000 and 1,000,000 cases, against the raw limit.

    .venv/bin/python bench/run.py --rounds 3  the full run (about 36 minutes): bench/results.md
    .venv/bin/python bench/run.py --smoke     1,000 cases, a second a figure (the CI test)
    .venv/bin/python bench/run.py --only inbox   the runs inbox and retention alone
    .venv/bin/python bench/run.py --only bfcl --engines sqlite   grading BFCL's cases (matchers)
    .venv/bin/python bench/run.py --only revise --sizes 1000000   revising cases alone
    .venv/bin/python bench/run.py --only quick   the quick runs' estimates against full runs
    .venv/bin/python bench/run.py --only quick-scale --sizes 1000000   a quick run's start, the
        set's health and a full run's end on the demo's largest set

For each engine (SQLite, then PostgreSQL) it builds one database per size with `flask kindgi demo
--cases N` (timed), serves each with gunicorn (2 sync workers) and, beside it, the raw app
(bench/raw_app.py: Flask and the driver alone, the practical limit on this machine). wrk, a
second process on loopback with 2 threads and 8 connections, then drives every measure against
every size in turn (smallest first one round, largest first the next), each ratio's two
measures one after the other, so what a bar compares is measured seconds apart, under the same
conditions. Adding cases runs last, since it grows the sets. A 10,000-case set is graded end
to end by `kindgi test-run --jobs 4` and by the pytest plugin with `-n 4` (the docs' example
test), the plugin beside as many plain parametrized tests for its overhead. Each worker's peak
RSS is its kernel high-water mark (VmHWM). Then the runs inbox is measured the same way on
worlds of 1,000 cases and 1,000 or 1,000,000 runs (`kindgi demo --runs N`), and retention
prunes the largest (`flask kindgi prune --days 1`), reporting the longest any of its batches
held the write lock. `--only quick` grades a simulated history through the API (bench/quick.py)
and holds quick runs' estimates against full runs.
The table, the bars and every command go to stdout and to the results file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))

from kindgi import demo  # noqa: E402  (the demo's agent and project ids)

sys.path.insert(0, str(ROOT / "tests"))
import bfcl_answers  # noqa: E402  (BFCL's data and perturbed answers to it)
from fake_judge import Reply, fake_judge  # noqa: E402  (the tests' stand-in for a model)
from otlp_spans import agents_sdk_trace, export  # noqa: E402  (an agent's trace, as emitted)
from quick import Figures, simulate  # noqa: E402  (the quick runs' proof)

SIZES = (1_000, 100_000, 1_000_000)
DEEP = 40_000  # how deep the deep page's cursor is, where the set has that many cases
AGENT = demo.AGENTS[0][0]
PROJECT = demo.PROJECTS[0][0]
SECRET = "kindgi-bench-secret"  # the same in both workers, so cursors work across them
POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
CONNECTIONS, THREADS, WORKERS = 8, 2, 2
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) kindgi-bench"  # the pages' reader, signed in
HAND_CASE = {
    "decisions": "wrong",
    "shouldCall": [{"tool": "lookup", "args": {"q": "notice period"}}],
    "mustNotCall": ["send_email"],
}

# The measures driven by wrk, in the order they run (adding cases last: it grows the sets).
FIRST, DEEP_PAGE, COUNTS, ONE, HTML, RAW, ADD = (
    "list first page (25)",
    "list deep page (25)",
    "counts",
    "one case",
    "HTML cases page",
    "raw baseline: first page",
    "add a hand case",
)
# Test runs: read a run, the first and a deep page of its results, the first page of a
# comparison, and the run's HTML page (its tallies and the first page of its results)
RUN, RESULTS, RESULTS_DEEP, COMPARE, RUN_PAGE = (
    "read a test run",
    "run results first page (25)",
    "run results deep page (25)",
    "compare first page (25)",
    "HTML run page (first page of results)",
)
# Metrics' cost: the same request to two servers started alike and given the same requests,
# one counting nothing (the app server has also served the test runs, the CI command and the
# exports before it is measured, so its figures carry that history too)
LOUD, QUIET = "list first page (25), metrics on (twin)", "list first page (25), metrics off"
# Searching the cases list: a word in about 1 % of the cases (its first page, and a deep one)
# and one in half of them (the demo's words, see kindgi/demo.py)
SEARCH, SEARCH_DEEP, SEARCH_BROAD = (
    f"search q={demo.SELECTIVE_WORD} (~1 %), first page (25)",
    f"search q={demo.SELECTIVE_WORD} (~1 %), deep page (25)",
    f"search q={demo.BROAD_WORD} (~50 %), first page (25)",
)
SEARCH_DEEP_PAGES = 40  # 1,000 matches deep: at 1M the word has about 3,300 in the list
# A ratio's two measures run side by side (the list's first page, then what is held against
# it): on this shared host a rate moves by a third from one minute to the next, far more than
# between measures seconds apart (bench/findings.md, 2026-12-07)
MEASURES = (
    FIRST, DEEP_PAGE, HTML, SEARCH, SEARCH_DEEP, RAW, SEARCH_BROAD, COUNTS, ONE, LOUD, QUIET,
    RUN, RESULTS, RESULTS_DEEP, COMPARE, RUN_PAGE, ADD,
)  # fmt: skip
# The runs inbox, on worlds of 1,000 cases and as many runs as the size says (most of them no
# case was made from): its first page, and the JSON list's; then retention deletes the runs
# older than a day that no case was made from, and says how long its longest batch held the
# write lock
INBOX, RUNS_LIST = "runs inbox first page (HTML)", "runs list first page (JSON, 25)"
INBOX_MEASURES = (INBOX, RUNS_LIST)
RUN_SIZES, INBOX_CASES = (1_000, 1_000_000), 1_000
PRUNED, PRUNE_LOCK = "prune: runs no case was made from, older than a day", "prune: longest batch"
SENDERS, BATCH, SENT = 4, 500, 100_000  # clients sending results at once, a batch, results sent
CI_CASES = 30_000  # a demo whose demo.drafting test set in PROJECT has 10,000 cases
KINDGI = Path(sys.executable).parent / "kindgi"  # the console script
JUDGE_DELAY, JUDGE_CONCURRENCY = 0.2, 8  # the stub judge's answer time; calls in flight
JUDGE_RUN, JUDGE_RATE, JUDGE_SMOKE = 10_000, 2_000, 40  # answer cases graded by the judge
REDIS = "redis://127.0.0.1:6379/0"
# OTLP/HTTP traces: 4 exporters, each a process of its own posting exports of 512 spans (64
# traces of 8, an OpenAI Agents SDK run as OpenInference traces it) as fast as answered, to
# Kindgi and to the bare parse-and-discard server (bench/otlp_raw_app.py), in turn. Two kinds of
# exporter: the OpenTelemetry SDK's own OTLPSpanExporter, encoding the SDK's spans as an agent's
# process does (the bars), and one posting protobuf it re-serialises with new trace ids, which
# costs the exporters almost nothing (reported: the servers' rates with no exporter in the way).
OTLP_EXPORTERS, OTLP_BATCH, OTLP_TRACE = 4, 512, 8
OTLP_ROUNDS, OTLP_SECONDS = 3, 5  # a round: the raw server, then Kindgi, each this long
OTLP_KINDS = {"sdk": "the SDK's OTLPSpanExporter", "bytes": "pre-encoded protobuf"}
# Grading with matchers: every BFCL entry the example converts (1,258 in 2026.3.23's five
# categories), imported beside the demo's cases, each graded against a perturbed answer; so
# many test runs that the results sent number BFCL_SENT at least
BFCL_RUNS = 8
BFCL_GRADED = f"grade BFCL cases, matchers in each ({SENDERS} clients, {BATCH} a batch)"
BFCL_PLAIN = f"grade the demo's cases, no matchers, alike ({SENDERS} clients, {BATCH} a batch)"

# Revising cases (issue 24): 1,000 cases each revised once by 4 clients at once, through HTTP,
# then the freeze that follows them (a new version of the whole set, each case's revision kept)
REVISERS, REVISED = 4, 1_000
REVISE = f"revise a case ({REVISERS} clients, If-Match)"
FREEZE_REVISED = f"freeze after {REVISED:,} revisions"
# Quick runs (bench/quick.py): 2,000 cases, 40 past candidates, then 40 more with 200 quick
# runs of 100 cases each against their full runs
QUICK_CASES, QUICK_HISTORY, QUICK_CANDIDATES, QUICK_RUNS, QUICK_SIZE = 2_000, 40, 40, 200, 100
QUICK_MAE, QUICK_COVERAGE = "quick run: mean absolute error", "quick run: 95 % interval covers"
PLAIN_MAE, PLAIN_COVERAGE = (
    "plain random sample: mean absolute error",
    "plain random sample: 95 % interval covers",
)
# At scale, on the demo's largest set (313,711 cases at 1M): SCALE_HISTORY full runs ended first
# (their outcomes written by SQL, each ended as the results endpoint ends it), then a quick run
# of 100 started through the API, the set's health computed the first time, and read again
SCALE_HISTORY = 5
QUICK_START = "start a quick run of 100 (POST, version unchanged)"
HEALTH_FIRST, HEALTH_AGAIN = "test-set health, first compute (GET)", "test-set health, read again"
RUN_END = "a full run's end (its cases' records rewritten)"

# Tags: 1 % of the set's cases (every hundredth by id) tagged 500 a request, each request
# timed; then the cases list filtered by that tag, its first page, against the plain list's
TAG_BATCH, RARE_TAG = 500, "bench-one-percent"
TAGGING = f"tag {TAG_BATCH} cases in one request"
TAGGED = f"list first page (25), tag={RARE_TAG} (~1 %)"


def otlp_what(stored: bool, kind: str) -> str:
    """A figure's name: Kindgi's stored spans or the bare server's, fed by this kind of exporter."""
    server = f"stored ({OTLP_BATCH} spans a batch)" if stored else "raw parse-and-discard"
    return f"OTLP export, {server}, {OTLP_EXPORTERS} exporters: {OTLP_KINDS[kind]}"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- what is measured


@dataclass
class Figure:
    """One measured figure and the command that produced it."""

    engine: str
    what: str
    cases: int
    command: str
    rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int | None = None
    cpu_ms: float | None = None  # the server's workers' CPU time per request
    value: float | None = None  # seconds (a build) or MB (peak RSS)
    unit: str = ""
    note: str = ""
    rounds: int = 1


@dataclass
class Results:
    figures: list[Figure] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # the commands that served the figures

    def get(self, engine: str, what: str, cases: int) -> Figure | None:
        for f in self.figures:
            if (f.engine, f.what, f.cases) == (engine, what, cases):
                return f
        return None


# ---------------------------------------------------------------- databases


class Database:
    """One size's database: a SQLite file in the work folder, or a PostgreSQL database."""

    def __init__(
        self,
        engine: str,
        cases: int,
        workdir: Path,
        server: str,
        prefix: str,
        runs: int | None = None,
    ) -> None:
        self.engine, self.cases, self.runs = engine, cases, runs
        self.size = runs or cases  # what its figures are measured at: its runs, or its cases
        label = f"runs-{runs}" if runs else str(cases)
        if engine == "sqlite":
            self.path = workdir / f"kindgi-{label}.sqlite"
            self.url = f"sqlite:///{self.path}"
            self.raw = str(self.path)
            self.file = str(
                self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
            )
            self.shown = f"sqlite:///{self.file}"
        else:
            self.server = server.replace("postgresql+psycopg://", "postgresql://")
            self.name = f"{prefix}_{label.replace('-', '_')}"
            self.raw = re.sub(r"/[^/]*$", f"/{self.name}", self.server)
            self.url = self.raw.replace("postgresql://", "postgresql+psycopg://", 1)
            self.shown = self.url

    def create(self) -> None:
        """An empty database (the demo command makes the schema)."""
        if self.engine == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return
        self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        self._admin(f'CREATE DATABASE "{self.name}"')

    def settle(self) -> None:
        """On PostgreSQL, vacuum and analyze the fresh tables now, as autovacuum would soon:
        otherwise it would do so in the middle of the measures."""
        if self.engine == "postgresql":
            import psycopg

            with psycopg.connect(self.raw, autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE)")

    def flush(self) -> None:
        """Its pages written to disk now: the SQLite file's (and its log's) fsynced, PostgreSQL
        checkpointed. Only this database's: `sync` waits on every file system the kernel holds,
        on a shared CI host everyone's writes (the likely end of a smoke run killed at 300 s)."""
        if self.engine == "postgresql":
            self._admin("CHECKPOINT")
            return
        for suffix in ("", "-wal"):
            with suppress(FileNotFoundError), open(f"{self.path}{suffix}", "rb") as file:
                os.fsync(file.fileno())

    def drop(self) -> None:
        if self.engine == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        else:
            self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(sql)


def build(db: Database, results: Results) -> dict[str, str]:
    """Load the demo world of `db.cases` cases, timed; the demo's credentials."""
    db.create()
    command = [sys.executable, "-m", "flask", "--app", "app", "kindgi", "demo"]
    runs = ["--runs", str(db.runs)] if db.runs else []
    command += ["--cases", str(db.cases), *runs, "--json"]
    env = {**os.environ, **app_env(db)}
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the demo of {db.cases} cases {' '.join(runs)} failed:\n{done.stderr}")
    shown = f"KINDGI_SQLALCHEMY_DATABASE_URI={db.shown} flask --app app kindgi demo"
    results.figures.append(
        Figure(
            db.engine,
            "build: kindgi demo" + (", runs world" if db.runs else ""),
            db.size,
            f"time {shown} --cases {db.cases} {' '.join(runs)} --json".replace("  ", " "),
            value=seconds,
            unit="s",
        )
    )
    log(f"{db.engine}: {db.cases:,} cases {' '.join(runs)} built in {seconds:.1f} s")
    db.settle()
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """gunicorn with 2 sync workers, started and stopped by the bench (by its process id)."""

    def __init__(self, app: str, env: dict[str, str], shown: str, logdir: Path, name: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = ["--workers", str(WORKERS), "--bind", f"127.0.0.1:{self.port}"]
        args += ["--log-level", "warning", "--timeout", "60"]
        if app in ("raw_app:app", "otlp_raw_app:app"):
            args += ["--chdir", str(BENCH)]
        self.command = f"{shown} gunicorn {' '.join(args)} {app}".replace(
            str(BENCH), "bench"
        ).strip()
        self.log = logdir / f"{name}.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", *args, app],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait(self, path: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.command} exited:\n{self.log.read_text()}")
            with suppress(requests.RequestException):
                if requests.get(self.base + path, timeout=5).status_code == 200:
                    return
            time.sleep(0.2)
        raise SystemExit(f"{self.command} did not answer {path} in 60 s")

    def workers(self) -> list[int]:
        """The arbiter's children: its workers."""
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:
                    pids.append(int(stat.parent.name))
        return sorted(pids)

    def cpu_seconds(self) -> float:
        """The CPU time (user and system) its workers have used so far."""
        total = 0
        for pid in self.workers():
            with suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        """The largest peak RSS (VmHWM) among the workers, in MB."""
        peaks = [0.0]
        for pid in self.workers():
            with suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                peaks.append(int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024)
        return max(peaks)

    def stop(self, deadline: float | None = None) -> None:
        """SIGTERM, then wait for it to stop until `deadline` (20 s from now), then kill it."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            wait = 20 if deadline is None else max(deadline - time.monotonic(), 0)
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def serving(servers: list[Server]) -> Iterator[None]:
    """Servers started in the block are all stopped at its end."""
    try:
        yield
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.proc.terminate()  # all at once: each one's shutdown waits out the others'
        deadline = time.monotonic() + 20
        for server in servers:
            server.stop(deadline)


# ---------------------------------------------------------------- load generation


def wrk(url: str, headers: dict[str, str], seconds: int, post: str | None = None) -> dict[str, Any]:
    """One wrk run; its results as the Lua script prints them."""
    command = ["wrk", f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "--timeout", "10s"]
    command += ["-s", str(BENCH / "wrk.lua")]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    command.append(url)
    if post is not None:
        command += ["--", "post", post, f"{time.time_ns()}"]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=seconds + 60
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(line.removeprefix("BENCH_JSON "))


def wrk_shown(url: str, headers: dict[str, str], seconds: int, post: str | None) -> str:
    """The wrk command as the results show it: secrets and long values by name."""
    parts = [f"wrk -t{THREADS} -c{CONNECTIONS} -d{seconds}s --timeout 10s -s bench/wrk.lua"]
    parts += [f"-H '{name}: {value}'" for name, value in headers.items()]
    parts.append(f"'{url}'")
    if post is not None:
        parts.append(f"-- post '{post}' $NONCE")
    return " ".join(parts)


def ensure_wrk() -> None:
    """wrk is Debian's package; install it where it is missing and we may (as in CI)."""
    if shutil.which("wrk"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("wrk is missing: installing Debian's package")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, env=env)
    if not shutil.which("wrk"):
        raise SystemExit("the bench needs wrk: apt-get install wrk")


# ---------------------------------------------------------------- one size, ready to drive


@dataclass
class Target:
    """What the measures of one size need: its servers, credentials and requests."""

    db: Database
    app: Server
    raw: Server
    quiet: Server | None = None  # the app with KINDGI_METRICS=false
    loud: Server | None = None  # its twin with metrics on
    requests: dict[str, tuple[str, dict[str, str], str | None]] = field(default_factory=dict)
    shown: dict[str, str] = field(default_factory=dict)  # secrets named, e.g. $TOKEN
    depth: int = 0
    run_cases: int = 0  # how many cases the measured test run has

    def server_of(self, what: str) -> Server:
        """Which of its servers a measure drives."""
        twins = {QUIET: self.quiet, LOUD: self.loud}
        return self.raw if what == RAW else twins.get(what) or self.app


def prepare(target: Target, creds: dict[str, str]) -> None:
    """Sign in, walk to a deep cursor, pick a case and a run: every request of every measure."""
    base, token = target.app.base, creds["token"]
    auth = {"Authorization": f"Bearer {token}"}
    v1 = f"{base}/v1/agents/{AGENT}"
    cases = f"{v1}/test-set/cases?projectId={PROJECT}"
    http = requests.Session()

    def get(url: str) -> Any:
        resp = http.get(url, headers=auth, timeout=60)
        resp.raise_for_status()
        return resp.json()

    active = get(f"{v1}/test-set?projectId={PROJECT}")["cases"]["active"]
    depth = min(DEEP, (active - 100) // 100 * 100)
    cursor, walked, started = None, 0, time.monotonic()
    while walked < depth:
        page = get(cases + "&limit=100" + (f"&cursor={cursor}" if cursor else ""))
        cursor, walked = page["nextCursor"], walked + len(page["data"])
    # The demo's cases differ in size (a deep page once carried 25% more `expect` than the
    # first): step on, a case at a time, to a page as heavy as the first page (±2%), so the
    # two differ in depth alone.
    first = len(json.dumps(get(cases)["data"]))
    for _ in range(2000):
        page = get(cases + (f"&cursor={cursor}" if cursor else ""))
        if abs(len(json.dumps(page["data"])) - first) <= first * 0.02 or not page.get("nextCursor"):
            break
        cursor, walked = get(cases + f"&limit=1&cursor={cursor}")["nextCursor"], walked + 1
    log(
        f"{target.db.engine} {target.db.cases:,}: a cursor {walked:,} deep, walked in "
        f"{time.monotonic() - started:.1f} s"
    )
    deep_url = cases + (f"&cursor={cursor}" if cursor else "")
    case_id = get(deep_url)["data"][0]["id"]
    run = get(f"{v1}/runs?projectId={PROJECT}&status=finished&limit=1")["data"][0]["id"]

    browser = {"User-Agent": BROWSER}
    cookie = sign_in(base, creds)

    search = f"{cases}&q={demo.SELECTIVE_WORD}"
    cursor = None
    for _ in range(SEARCH_DEEP_PAGES):
        page = get(search + (f"&cursor={cursor}" if cursor else ""))
        if not page.get("nextCursor"):
            break  # a small set: its last page is as deep as it goes
        cursor = page["nextCursor"]
    search_deep = search + (f"&cursor={cursor}" if cursor else "")

    body = json.dumps({"runId": run, **HAND_CASE}, separators=(",", ":"))
    target.depth = walked
    target.requests = {
        FIRST: (cases, auth, None),
        DEEP_PAGE: (deep_url, auth, None),
        COUNTS: (f"{v1}/test-set?projectId={PROJECT}", auth, None),
        ONE: (f"{v1}/test-set/cases/{case_id}", auth, None),
        HTML: (
            f"{base}/agents/{AGENT}/test-set/cases?projectId={PROJECT}",
            {"Cookie": cookie, **browser},
            None,
        ),
        RAW: (f"{target.raw.base}/cases?agent=1&project={PROJECT}", {}, None),
        SEARCH: (search, auth, None),
        SEARCH_DEEP: (search_deep, auth, None),
        SEARCH_BROAD: (f"{cases}&q={demo.BROAD_WORD}", auth, None),
        ADD: (f"{v1}/test-set/cases", auth, body),
    }
    for what, twin in ((QUIET, target.quiet), (LOUD, target.loud)):
        if twin:
            target.requests[what] = (cases.replace(base, twin.base), auth, None)
    target.shown = {token: "$TOKEN", cookie: "session=$SESSION"}
    if cursor:
        target.shown[cursor] = "$CURSOR"


def sign_in(base: str, creds: dict[str, str]) -> str:
    """Sign in at /login as the demo's user: the session cookie.

    Signed in as a browser is, with the User-Agent its pages are then read with: the session
    is bound to it (flask-login's session protection), and a page read with another marked the
    session no longer fresh and set its cookie again on every request."""
    http = requests.Session()
    browser = {"User-Agent": BROWSER}
    login = http.get(f"{base}/login", headers=browser, timeout=30)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text).group(1)
    signed_in = http.post(
        f"{base}/login",
        data={"csrf_token": csrf, "email": creds["email"], "password": creds["password"]},
        headers=browser,
        allow_redirects=False,
        timeout=30,
    )
    if signed_in.status_code != 302:
        raise SystemExit(f"signing in failed: {signed_in.status_code}")
    return f"session={http.cookies['session']}"


def prepare_runs(target: Target, creds: dict[str, str], results: Results) -> None:
    """Freeze the set (timed in-process, then again unchanged), open a run over it and send it
    results from several clients at once (timed), finish it, and open a second run with it as
    baseline: the requests of the test-run measures."""
    base, auth = target.app.base, {"Authorization": f"Bearer {creds['token']}"}
    runs = f"{base}/v1/agents/{AGENT}/test-runs"
    engine, cases = target.db.engine, target.db.cases
    first, again = time_freezes(target.db)
    for label, seconds in (("freeze", first), ("freeze again, unchanged", again)):
        results.figures.append(
            Figure(engine, label, cases, FREEZE_SHOWN, value=seconds * 1000, unit="ms")
        )
    http = requests.Session()
    http.headers.update(auth)
    run = http.post(runs, json={"projectId": PROJECT, "candidate": "bench-1"}, timeout=600)
    run.raise_for_status()
    run_id, total = run.json()["id"], run.json()["cases"]["total"]
    ids, cursor = [], None
    while len(ids) < min(SENT, total):
        page = http.get(
            f"{runs}/{run_id}/cases?limit=500" + (f"&cursor={cursor}" if cursor else ""),
            timeout=60,
        ).json()
        ids += [row["caseId"] for row in page["data"]]
        cursor = page.get("nextCursor")
    batches = [
        json.dumps({"results": [result_of(i) for i in ids[at : at + BATCH]]})
        for at in range(0, len(ids), BATCH)
    ]
    started = time.monotonic()
    url = f"{runs}/{run_id}/results"
    with ProcessPoolExecutor(SENDERS) as pool:
        shares = [batches[k::SENDERS] for k in range(SENDERS)]
        sent = list(pool.map(send_batches, [url] * SENDERS, [creds["token"]] * SENDERS, shares))
    took = time.monotonic() - started
    errors = sum(e for _, e in sent)
    results.figures.append(
        Figure(
            engine,
            f"send {len(ids):,} results ({SENDERS} clients, {BATCH} a batch)",
            cases,
            f"POST /v1/agents/{AGENT}/test-runs/$RUN/results from {SENDERS} processes "
            "(bench/run.py send_batches)",
            value=len(ids) / took,
            unit="results/s",
            errors=errors,
        )
    )
    log(f"{engine} {cases:,}: {len(ids):,} results in {took:.1f} s, {errors} errors")
    if http.get(f"{runs}/{run_id}", timeout=60).json()["status"] == "open":  # results missing
        http.post(f"{runs}/{run_id}/finish", json={}, timeout=600).raise_for_status()
    second = http.post(
        runs, json={"projectId": PROJECT, "candidate": "bench-2", "baseline": run_id}, timeout=600
    )
    second.raise_for_status()
    results_url = f"{runs}/{run_id}/results"
    deep, walked = None, 0
    while walked < min(DEEP, len(ids) - 100):
        page = http.get(results_url + "?limit=100" + (f"&cursor={deep}" if deep else "")).json()
        deep, walked = page["nextCursor"], walked + len(page["data"])
    target.run_cases = total
    target.requests.update(
        {
            RUN: (f"{runs}/{run_id}", auth, None),
            RESULTS: (results_url, auth, None),
            RESULTS_DEEP: (results_url + (f"?cursor={deep}" if deep else ""), auth, None),
            COMPARE: (f"{runs}/{second.json()['id']}/compare/{run_id}", auth, None),
            RUN_PAGE: (f"{base}/agents/{AGENT}/test-runs/{run_id}", target.requests[HTML][1], None),
        }
    )
    target.shown[run_id] = "$RUN"
    target.shown[second.json()["id"]] = "$RUN2"
    if deep:
        target.shown[deep] = "$RESULTS_CURSOR"


FREEZE_SHOWN = "kindgi.service.versions.freeze(…) in-process on the demo's largest test set"


def time_freezes(db: Database) -> tuple[float, float]:
    """Seconds to freeze the demo's largest test set, then to freeze it again unchanged."""
    from kindgi import create_app, service
    from kindgi.database import commit, set_writing
    from kindgi.service.access import find_agent
    from kindgi.service.versions import freeze

    app = create_app({"SQLALCHEMY_DATABASE_URI": db.url, "SECRET_KEY": SECRET})
    took = []
    with app.app_context():
        set_writing(True)
        caller = service.user_principal(demo.USER)
        agent = find_agent(caller, AGENT)
        for _ in range(2):
            started = time.monotonic()
            freeze(caller, agent, PROJECT)
            commit()
            took.append(time.monotonic() - started)
        app.extensions["sqlalchemy"].engine.dispose()
    return took[0], took[1]


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    """A command run from the repository's root, its output kept: seconds, and how it ended."""
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    return time.monotonic() - started, done


def measure_ci(target: Target, token: str, protocol: str, results: Results) -> None:
    """`kindgi test-run` over the whole demo.drafting set with the example agent, 4 jobs, end
    to end (fetch, run, send, wait): cases a second."""
    agent = [
        sys.executable,
        "docs/examples/agent.py",
        *(["--jsonl"] if protocol == "jsonl" else []),
    ]
    args = ["test-run", "--agent", AGENT, "--project", PROJECT, "--candidate", f"ci-{protocol}"]
    args += ["--protocol", protocol, "--jobs", "4"]
    took, done = _timed([str(KINDGI), *args, "--url", target.app.base, "--", *agent],
                        {"KINDGI_TOKEN": token})  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"kindgi test-run failed:\n{done.stderr[-2000:]}")
    total = int(re.search(r"cases: (\d+)", done.stdout).group(1))
    shown = (
        f"KINDGI_TOKEN=$TOKEN kindgi {' '.join(args)} --url $URL -- python {' '.join(agent[1:])}"
    )
    results.figures.append(
        Figure(
            target.db.engine,
            f"kindgi test-run, {protocol}, 4 jobs",
            target.db.cases,
            shown,
            value=total / took,
            unit=f"cases/s ({total:,} cases in {took:.1f} s)",
        )
    )
    log(f"{target.db.engine} {target.db.cases:,}: kindgi test-run {protocol}: {total:,} cases "
        f"in {took:.1f} s")  # fmt: skip


# The pytest plugin: the docs' example test, a test a case, against plain parametrized tests
# calling the same agent on as many inputs, each with pytest-xdist's -n 4 and no other plugin
# (the virtualenv's hypothesis and schemathesis would add seconds to every process's start)
PYTEST_EXAMPLE = "docs/examples/test_agent.py"
PYTEST_PLUGIN, PYTEST_PLAIN = "pytest plugin, -n 4", "plain parametrized pytest, -n 4"
ALONE = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # only the plugins named with -p
PLAIN_TESTS = """import argparse
import sys

import pytest

sys.path.insert(0, {examples!r})
from agent import answer  # the example agent the plugin's test answers with

NO_FLAWS = argparse.Namespace(crash_on=None, sleep=0, call=[], reverse=False)


@pytest.mark.parametrize("n", range({n}))
def test_the_agent_on_an_input(n):
    said = answer({{"q": f"question {{n}}"}}, NO_FLAWS)
    assert said["calls"]
"""


def measure_pytest(target: Target, token: str, workdir: Path, results: Results) -> None:
    """The docs' example test through the pytest plugin over the whole demo.drafting set,
    `-n 4`, end to end (open the run, a test a case, each sent and its grade read, finish):
    cases a second; then as many plain parametrized tests calling the same agent, `-n 4`, the
    plugin left out, timed alike: what the plugin adds."""
    pytest = [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "4", "-q", "--tb=no"]
    pytest += ["-p", "no:cacheprovider"]
    options = ["-p", "kindgi.pytest_plugin", "--kindgi-agent", AGENT, "--kindgi-project"]
    options += [PROJECT, "--kindgi-candidate", "ci-pytest"]
    env = {**ALONE, "KINDGI_URL": target.app.base, "KINDGI_TOKEN": token}
    took, done = _timed([*pytest, PYTEST_EXAMPLE, *options], env)
    said = re.search(r"kindgi test run (\S+)", done.stdout)
    if done.returncode not in (0, 1) or not said:  # 1: some cases failed
        raise SystemExit(f"pytest with the plugin failed:\n{done.stdout[-2000:]}{done.stderr}")
    run = requests.get(
        f"{target.app.base}/v1/agents/{AGENT}/test-runs/{said.group(1)}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    ).json()
    total = run["cases"]["total"]
    if run["status"] != "done" or run["cases"]["awaiting"]:
        raise SystemExit(f"the plugin's run did not end whole: {run}")
    plain = workdir / "test_plain_pytest.py"
    plain.write_text(PLAIN_TESTS.format(examples=str(ROOT / "docs/examples"), n=total))
    plain_took, plain_done = _timed([*pytest, str(plain)], ALONE)
    if plain_done.returncode != 0:
        raise SystemExit(f"plain pytest failed:\n{plain_done.stdout[-2000:]}{plain_done.stderr}")
    shown = "python " + " ".join(pytest[1:])
    added = (took - plain_took) / total * 1000
    note = (
        f"plain pytest {total / plain_took:,.0f} cases/s: the plugin adds {added:.2f} ms a case, "
        f"{took / plain_took:.1f} times the time"
    )
    for what, seconds, command, said_too in (
        (PYTEST_PLUGIN, took, f"KINDGI_URL=$URL KINDGI_TOKEN=$TOKEN {shown} {PYTEST_EXAMPLE} "
         f"{' '.join(options)}", note),
        (PYTEST_PLAIN, plain_took, f"{shown} $WORKDIR/test_plain_pytest.py  ({total:,} tests, "
         "each calling the example agent)", ""),
    ):  # fmt: skip
        results.figures.append(
            Figure(
                target.db.engine,
                what,
                target.db.cases,
                f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {command}",
                value=total / seconds,
                unit=f"cases/s ({total:,} cases in {seconds:.1f} s)",
                note=said_too,
            )
        )
    log(f"{target.db.engine} {target.db.cases:,}: pytest plugin, {total:,} cases in {took:.1f} s; "
        f"plain pytest {plain_took:.1f} s")  # fmt: skip


def measure_export(target: Target, token: str, form: str, results: Results) -> None:
    """Stream the whole test set (retired cases too) as one client would, counting its lines:
    cases a second, from the request to the last byte."""
    url = (
        f"{target.app.base}/v1/agents/{AGENT}/test-set/export?projectId={PROJECT}"
        f"&include=retired&format={form}"
    )
    started = time.monotonic()
    with requests.get(url, headers={"Authorization": f"Bearer {token}"}, stream=True) as resp:
        resp.raise_for_status()
        lines = sum(chunk.count(b"\n") for chunk in resp.iter_content(1 << 16))
    took = time.monotonic() - started
    cases = lines if form == "jsonl" else None
    if cases is None:  # a CSV row may hold newlines inside quotes: count the cases by the API
        counts = requests.get(
            f"{target.app.base}/v1/agents/{AGENT}/test-set?projectId={PROJECT}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        ).json()["cases"]
        cases = counts["active"] + counts["retired"]
    shown = url.replace(target.app.base, f"http://127.0.0.1:$PORT_{server_no(results, target.app)}")
    results.figures.append(
        Figure(
            target.db.engine,
            f"export ({form})",
            target.db.cases,
            f"curl -H 'Authorization: Bearer $TOKEN' '{shown}' > /dev/null",
            value=cases / took,
            unit="cases/s",
            note=f"{cases:,} cases in {took:.1f} s",
        )
    )
    log(f"{target.db.engine} {target.db.cases:,}: export {form}, {cases:,} cases in {took:.1f} s")


def measure_judge(
    target: Target,
    token: str,
    backend: str,
    queue_url: str | None,
    answers: int,
    args: argparse.Namespace,
    results: Results,
) -> None:
    """A run whose `answers` answer cases wait for a stub judge (200 ms a call) through the
    queue, graded by one `flask kindgi worker` with 8 threads: verdicts a second, from the
    first result sent to the run's `done`, and how long `done` came after the last result."""
    engine = target.db.engine
    env = {
        "KINDGI_SQLALCHEMY_DATABASE_URI": target.db.url,
        "KINDGI_SECRET_KEY": SECRET,
        "KINDGI_JUDGE_MODEL": "bench-judge",
        "KINDGI_JUDGE_CONCURRENCY": str(JUDGE_CONCURRENCY),
        "KINDGI_QUEUE_NAME": f"bench-{os.getpid()}-{backend}",
        **({"KINDGI_QUEUE_URL": queue_url} if queue_url else {}),
    }
    with fake_judge(lambda _: Reply(delay=JUDGE_DELAY)) as stub:
        env["KINDGI_JUDGE_URL"] = stub.url
        name = f"{engine}-judge-{backend}"
        app = Server("app:app", env, "KINDGI_JUDGE_URL=$STUB …", args.workdir, name)
        worker = subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "app", "kindgi", "worker"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=(args.workdir / f"{name}-worker.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        try:
            app.wait("/v1/openapi.json")
            http = requests.Session()
            http.headers["Authorization"] = f"Bearer {token}"
            runs = f"{app.base}/v1/agents/{AGENT}/test-runs"
            run = http.post(runs, json={"projectId": PROJECT, "candidate": f"judged-{backend}"})
            run.raise_for_status()
            run_id = run.json()["id"]
            ids, cursor = [], None
            while len(ids) < answers:
                query = f"?limit=500{f'&cursor={cursor}' if cursor else ''}"
                page = http.get(f"{runs}/{run_id}/cases{query}", timeout=60).json()
                ids += [row["caseId"] for row in page["data"] if "answer" in row["parts"]]
                cursor = page.get("nextCursor")
                if not cursor:
                    break
            ids = ids[:answers]
            started = time.monotonic()
            for at in range(0, len(ids), BATCH):
                batch = [
                    {"caseId": i, "output": {"answer": f"{run_id} on {i}"}, "calls": []}
                    for i in ids[at : at + BATCH]
                ]
                http.post(f"{runs}/{run_id}/results", json={"results": batch}).raise_for_status()
            http.post(f"{runs}/{run_id}/finish", json={}).raise_for_status()
            last = time.monotonic()
            while http.get(f"{runs}/{run_id}", timeout=60).json()["status"] != "done":
                if time.monotonic() - last > 1800:
                    raise SystemExit(f"the judge's run on {backend} is not done after 30 min")
                time.sleep(0.2)
            done = time.monotonic()
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            app.stop()
        asked = len(stub.asked)
    results.figures.append(
        Figure(
            engine,
            f"judge verdicts, {backend} queue",
            target.db.cases,
            f"{len(ids):,} answer cases judged by a stub answering in {JUDGE_DELAY * 1000:.0f} ms "
            f"(KINDGI_JUDGE_CONCURRENCY={JUDGE_CONCURRENCY}), one `flask kindgi worker`"
            + (f", KINDGI_QUEUE_URL={queue_url}" if queue_url else ""),
            value=asked / (done - started),
            unit=f"verdicts/s ({asked:,} verdicts for {len(ids):,} answer cases; done "
            f"{done - last:.1f} s after the last result)",
        )
    )
    log(f"{engine} judge on {backend}: {asked:,} verdicts in {done - started:.1f} s")


def result_of(case_id: str) -> dict[str, Any]:
    """A candidate's result, the same for every case (grading differs by the expectation)."""
    return {
        "caseId": case_id,
        "output": demo.OUTPUT,
        "calls": [{"tool": "lookup", "args": {"q": "notice period"}}],
    }


def send_batches(url: str, token: str, batches: list[str]) -> tuple[int, int]:
    """One client: post each batch in turn; (results sent, requests that failed)."""
    http = requests.Session()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    sent = errors = 0
    for n, batch in enumerate(batches):
        key = {"Idempotency-Key": f"bench-{os.getpid()}-{n}"}
        resp = http.post(url, data=batch, headers={**headers, **key}, timeout=120)
        if resp.status_code == 200:
            sent += resp.json()["accepted"]
        else:
            errors += 1
    return sent, errors


def otlp_exporter(
    url: str, token: str | None, seconds: float, start_at: float, seed: int, kind: str
) -> dict:
    """One exporter: post exports of OTLP_BATCH spans, each of new traces, one after another
    for `seconds` from `start_at`, as `kind` says (OTLP_KINDS); the spans acknowledged (200),
    the failures, and each export's time in ms."""
    request = export(
        *[s for n in range(OTLP_BATCH // OTLP_TRACE) for s in agents_sdk_trace(n + 1)],
        **{"kindgi.agent.id": AGENT, "kindgi.project.id": PROJECT, "service.version": "bench"},
    )
    spans = request.resource_spans[0].scope_spans[0].spans
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    send = _sdk_sender(url, headers, request) if kind == "sdk" else _bytes_sender(url, headers)
    ok = errors = 0
    took: list[float] = []
    time.sleep(max(start_at - time.time(), 0))
    end = time.monotonic() + seconds
    number = 0
    while time.monotonic() < end:
        number += 1
        traces = [(seed << 64) | (number << 16) | (at // OTLP_TRACE) for at in range(len(spans))]
        started, good = send(request, traces)
        took.append((time.perf_counter() - started) * 1000)
        ok, errors = (ok + len(spans), errors) if good else (ok, errors + 1)
    return {"spans": ok, "errors": errors, "took": took}


def _bytes_sender(url: str, headers: dict[str, str]) -> Callable:
    """Posts the template export, its spans' trace ids replaced, as protobuf bytes."""
    http = requests.Session()
    headers = {**headers, "Content-Type": "application/x-protobuf"}

    def send(request: Any, traces: list[int]) -> tuple[float, bool]:
        for span, trace in zip(request.resource_spans[0].scope_spans[0].spans, traces, strict=True):
            span.trace_id = trace.to_bytes(16, "big")
        body = request.SerializeToString()
        started = time.perf_counter()
        try:
            return started, http.post(url, data=body, headers=headers, timeout=60).ok
        except requests.RequestException:
            return started, False

    return send


def _sdk_sender(url: str, headers: dict[str, str], request: Any) -> Callable:
    """Hands the SDK's exporter the template's spans as the SDK's own ReadableSpans, made
    anew with each export's trace ids (as a BatchSpanProcessor hands it finished spans)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    group = request.resource_spans[0]
    resource = Resource({kv.key: kv.value.string_value for kv in group.resource.attributes})
    scope = InstrumentationScope("openinference.instrumentation.openai_agents")
    template = [
        (
            span.name,
            int.from_bytes(span.span_id, "big"),
            int.from_bytes(span.parent_span_id, "big"),
            {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes},
            span.start_time_unix_nano,
            span.end_time_unix_nano,
        )
        for span in group.scope_spans[0].spans
    ]
    exporter = OTLPSpanExporter(endpoint=url, headers=headers, timeout=60)
    flags = TraceFlags(TraceFlags.SAMPLED)

    def send(_: Any, traces: list[int]) -> tuple[float, bool]:
        batch = [
            ReadableSpan(
                name=name,
                context=SpanContext(trace, span_id, False, flags),
                parent=SpanContext(trace, parent, False, flags) if parent else None,
                resource=resource,
                attributes=attributes,
                kind=SpanKind.INTERNAL,
                start_time=start,
                end_time=end,
                instrumentation_scope=scope,
            )
            for trace, (name, span_id, parent, attributes, start, end) in zip(
                traces, template, strict=True
            )
        ]
        started = time.perf_counter()
        return started, exporter.export(batch) is SpanExportResult.SUCCESS

    return send


def _stored_spans(db: Database) -> tuple[int, int]:
    """The spans kept, and the runs whole that traces made: finished (their root came), with
    an input and an output (their model calls came) and both calls (their tools came)."""
    statements = (
        "SELECT count(*) FROM trace_spans",
        "SELECT count(*) FROM runs WHERE trace_id IS NOT NULL AND status = 'finished' "
        "AND input IS NOT NULL AND output IS NOT NULL AND json_array_length(calls) = 2",
    )
    if db.engine == "sqlite":
        with sqlite3.connect(db.raw) as conn:
            return tuple(conn.execute(q).fetchone()[0] for q in statements)
    import psycopg

    with psycopg.connect(db.raw) as conn:
        return tuple(conn.execute(q).fetchone()[0] for q in statements)


def measure_otlp(target: Target, token: str, args: argparse.Namespace, results: Results) -> None:
    """OTLP/HTTP traces: OTLP_EXPORTERS processes post exports to the bare parse-and-discard
    server, then to Kindgi, round after round, with each kind of exporter (OTLP_KINDS); spans a
    second each (acknowledged over the time), each export's p50 and p99, and the spans Kindgi
    acknowledged but did not keep."""
    engine, db = target.db.engine, target.db
    raw = Server("otlp_raw_app:app", {}, "", args.workdir, f"{engine}-otlp-raw")
    servers = {False: raw, True: target.app}
    try:
        raw.wait("/healthz")
        results.servers.append(raw.command)
        rounds, seconds = (1, 1) if args.smoke else (OTLP_ROUNDS, OTLP_SECONDS)
        got: dict[tuple[bool, str], list[dict]] = {
            (stored, kind): [] for kind in OTLP_KINDS for stored in servers
        }
        before = _stored_spans(db)
        seed = 0
        for _ in range(rounds):
            for stored, kind in got:
                start_at = time.time() + 2  # every exporter's process up first
                with ProcessPoolExecutor(OTLP_EXPORTERS) as pool:
                    seeds = range(seed, seed + OTLP_EXPORTERS)
                    seed += OTLP_EXPORTERS
                    n = OTLP_EXPORTERS
                    done = pool.map(otlp_exporter, [f"{servers[stored].base}/v1/traces"] * n,
                                    [token if stored else None] * n, [seconds] * n,
                                    [start_at] * n, seeds, [kind] * n)  # fmt: skip
                    got[stored, kind] += list(done)
                acknowledged = sum(r["spans"] for r in got[stored, kind][-n:])
                log(f"{engine} {otlp_what(stored, kind)}: {acknowledged / seconds:,.0f} spans/s")
        kept = _stored_spans(db)
    finally:
        raw.stop()
    runs = kept[1] - before[1]
    lost = max(sum(r["spans"] for (stored, _), rs in got.items() if stored for r in rs)
               // OTLP_TRACE - runs, 0)  # fmt: skip
    for (stored, kind), done in got.items():
        took = sorted(t for r in done for t in r["took"])
        spans = sum(r["spans"] for r in done)
        errors = sum(r["errors"] for r in done)
        p50, p99 = (took[int(len(took) * q)] if took else float("nan") for q in (0.5, 0.99))
        note = f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, {spans:,} spans in {len(took):,} exports"
        if stored:  # every trace acknowledged, by either kind of exporter, is a run, whole
            note += f"; of both kinds: {kept[0] - before[0]:,} spans kept, {runs:,} runs whole"
            note += f", lost {lost}"
        shown = f"http://127.0.0.1:$PORT_{server_no(results, servers[stored])}/v1/traces"
        results.figures.append(
            Figure(
                engine,
                otlp_what(stored, kind),
                db.cases,
                f"{OTLP_EXPORTERS} processes POST protobuf exports of {OTLP_BATCH} spans "
                f"(bench/run.py otlp_exporter, {kind}) to {shown}, {rounds} x {seconds} s",
                value=spans / (rounds * seconds),
                unit="spans/s",
                p50_ms=p50,
                p99_ms=p99,
                errors=errors,
                note=note,
            )
        )


def measure(target: Target, what: str, seconds: int, warmup: int) -> dict[str, Any]:
    """One round of one measure against one size: wrk's results, and the CPU time the server's
    workers spent on it (which other load on the machine moves less than it moves req/s)."""
    url, headers, post = target.requests[what]
    server = target.server_of(what)
    if warmup:
        wrk(url, headers, warmup, post)
    cpu = server.cpu_seconds()
    got = wrk(url, headers, seconds, post)
    got["cpu_s"] = server.cpu_seconds() - cpu
    log(
        f"{target.db.engine} {target.db.size:>9,} {what:<26} "
        f"{got['requests'] / (got['duration_us'] / 1e6):7.1f} req/s  "
        f"p50 {got['p50_us'] / 1000:6.1f} ms  p99 {got['p99_us'] / 1000:6.1f} ms"
    )
    return got


def percentiles(rounds: list[dict[str, Any]], *ps: float) -> list[float]:
    """Latency percentiles (ms) of all the rounds' requests together, from wrk's histograms."""
    seen: Counter[int] = Counter()
    for r in rounds:
        for pair in filter(None, r["hist"].split(",")):
            value, count = pair.split(":")
            seen[int(value)] += int(count)
    total, out = sum(seen.values()), []
    for p in ps:
        rank, running = p / 100 * total, 0
        for value in sorted(seen):
            running += seen[value]
            if running >= rank:
                out.append(value / 1000)
                break
        else:
            out.append(float("nan"))
    return out


TWIN_PAIRS = 3  # the twins are measured back to back, this many times a round, in turn first


def _turns(what: str, n: int) -> list[str]:
    """The measures one step of round `n` runs: `what`, or for metrics' cost both twins back to
    back, each first in turn, so that a passing disturbance (another process, a checkpoint)
    falls on both alike."""
    if what == QUIET:
        return []  # measured with its twin
    if what != LOUD:
        return [what]
    pair = [LOUD, QUIET] if n % 2 == 0 else [QUIET, LOUD]
    return [each for i in range(TWIN_PAIRS) for each in (pair if i % 2 == 0 else pair[::-1])]


def figure(
    target: Target, what: str, rounds: list[dict[str, Any]], args: Any, results: Results
) -> None:
    """A measure's figure from its rounds: all their requests over all their time, latency
    percentiles of all their requests, every error, and the server's CPU per request."""
    url, headers, post = target.requests[what]
    shown = wrk_shown(url, headers, args.seconds, post)
    for secret, name in target.shown.items():
        shown = shown.replace(secret, name)
    server = target.server_of(what)
    shown = shown.replace(server.base, f"http://127.0.0.1:$PORT_{server_no(results, server)}")
    requests_ = sum(r["requests"] for r in rounds)
    p50, p99 = percentiles(rounds, 50, 99)
    fig = Figure(
        target.db.engine,
        what,
        target.db.size,
        shown,
        rps=requests_ / (sum(r["duration_us"] for r in rounds) / 1e6),
        p50_ms=p50,
        p99_ms=p99,
        errors=sum(r[k] for r in rounds for k in ("connect", "read", "write", "status", "timeout")),
        cpu_ms=1000 * sum(r["cpu_s"] for r in rounds) / max(requests_, 1),
        note=(
            f"cursor {target.depth:,} deep"
            if what == DEEP_PAGE
            else f"a run of {target.run_cases:,} cases"
            if what in (RUN, RESULTS, RESULTS_DEEP, COMPARE, RUN_PAGE)
            else f"{target.db.size:,} runs, {target.db.cases:,} cases"
            if what in INBOX_MEASURES
            else ""
        ),
        rounds=len(rounds),
    )
    results.figures.append(fig)


def server_no(results: Results, server: Server) -> int:
    """The server's number in the results' list of server commands (S1, S2, …)."""
    return results.servers.index(server.command) + 1


# ---------------------------------------------------------------- the runs inbox and retention


def measure_inbox(
    engine: str, args: argparse.Namespace, results: Results, prefix: str, dbs: list[Database]
) -> None:
    """The runs inbox's first page (and the JSON list's) on worlds of as many runs as each size,
    every size in turn, round after round; then retention on the largest, timed, with its
    longest batch's write transaction as the prune itself reports it."""
    sizes = RUN_SIZES[:1] if args.smoke else RUN_SIZES
    worlds = [Database(engine, INBOX_CASES, args.workdir, args.postgres, prefix, runs=n)
              for n in sizes]  # fmt: skip
    dbs += worlds
    creds = {db.runs: build(db, results) for db in worlds}
    servers: list[Server] = []
    targets = []
    with serving(servers):
        for db in worlds:
            env = app_env(db)
            app = Server("app:app", env, f"KINDGI_SQLALCHEMY_DATABASE_URI={db.shown}",
                         args.workdir, f"{engine}-runs-{db.runs}")  # fmt: skip
            servers.append(app)
            results.servers.append(app.command)
            targets.append(Target(db, app, app))
        for target in targets:
            target.app.wait("/v1/openapi.json")
            got = creds[target.db.runs]
            cookie = sign_in(target.app.base, got)
            token = got["token"]
            target.requests = {
                INBOX: (f"{target.app.base}/agents/{AGENT}/runs?projectId={PROJECT}",
                        {"Cookie": cookie, "User-Agent": BROWSER}, None),
                RUNS_LIST: (f"{target.app.base}/v1/agents/{AGENT}/runs?projectId={PROJECT}",
                            {"Authorization": f"Bearer {token}"}, None),
            }  # fmt: skip
            target.shown = {token: "$TOKEN", cookie: "session=$SESSION"}
        rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for n in range(args.rounds):
            for what in INBOX_MEASURES:
                for target in targets:
                    got = measure(target, what, args.seconds, 0 if n else args.warmup)
                    rounds.setdefault((what, target.db.size), []).append(got)
        for what in INBOX_MEASURES:
            for target in targets:
                figure(target, what, rounds[(what, target.db.size)], args, results)
    measure_prune(worlds[-1], results)


def measure_prune(db: Database, results: Results) -> None:
    """`flask kindgi prune --days 1` on a runs world, nothing else running: runs deleted a second,
    and the longest a batch held the write lock (BEGIN to the end of COMMIT, as it says).

    The world's build is written to disk first (`Database.flush`): a gigabyte the build left in
    the page cache was otherwise flushed within the prune's first commit, 0.4 to 1.9 s of waiting
    on SQLite (with 13 ms of CPU), against 0.1 s for its longest batch once on disk."""
    command = [sys.executable, "-m", "flask", "--app", "app", "kindgi", "prune", "--days", "1"]
    env = {**os.environ, **app_env(db)}
    db.flush()
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    said = re.search(
        r"pruned (\d+) runs .* in (\d+) batches; the longest batch held the write lock "
        r"([\d.]+) ms \(99 % of them ([\d.]+) ms",
        done.stdout,
    )
    if done.returncode != 0 or not said:
        raise SystemExit(f"kindgi prune failed:\n{done.stdout}\n{done.stderr[-2000:]}")
    pruned, batches, longest, p99 = int(said[1]), int(said[2]), float(said[3]), float(said[4])
    shown = f"KINDGI_SQLALCHEMY_DATABASE_URI={db.shown} flask --app app kindgi prune --days 1"
    results.figures += [
        Figure(db.engine, PRUNED, db.size, f"time {shown}", value=pruned / took,
               unit=f"runs/s ({pruned:,} runs in {took:.1f} s, {batches:,} batches)"),
        Figure(db.engine, PRUNE_LOCK, db.size, f"{shown} (as it reports it)", value=longest,
               unit=f"ms held the write lock (99 % of the batches {p99:.1f} ms at most)"),
    ]  # fmt: skip
    log(f"{db.engine} {db.size:,} runs: pruned {pruned:,} in {took:.1f} s, {batches:,} batches, "
        f"the longest {longest:.1f} ms, 99 % {p99:.1f} ms at most")  # fmt: skip


# ---------------------------------------------------------------- one engine


def run_engine(engine: str, args: argparse.Namespace, results: Results) -> None:
    """Build every size, serve them all, then drive each measure against each size in turn,
    round after round."""
    prefix = f"kindgi_bench{'_smoke' if args.smoke else ''}_{os.getpid()}"
    if args.only == "inbox":
        worlds: list[Database] = []
        try:
            measure_inbox(engine, args, results, prefix, worlds)
        finally:
            drop_all(worlds, args.keep)
        return
    dbs = [Database(engine, n, args.workdir, args.postgres, prefix) for n in args.sizes]
    creds = {db.cases: build(db, results) for db in dbs}
    targets: list[Target] = []
    servers: list[Server] = []
    try:
        with serving(servers):
            for db in dbs:
                env = app_env(db)
                name = f"{engine}-{db.cases}"
                app = Server(
                    "app:app",
                    env,
                    f"KINDGI_SQLALCHEMY_DATABASE_URI={db.shown}",
                    args.workdir,
                    name,
                )
                raw_shown = db.shown if engine == "postgresql" else db.file
                raw = Server(
                    "raw_app:app",
                    {"RAW_DATABASE": db.raw},
                    f"RAW_DATABASE={raw_shown.replace('+psycopg', '')}",
                    args.workdir,
                    name + "-raw",
                )
                quiet, loud = (
                    Server(
                        "app:app",
                        {**env, "KINDGI_METRICS": flag},
                        f"KINDGI_METRICS={flag} KINDGI_SQLALCHEMY_DATABASE_URI={db.shown}",
                        args.workdir,
                        f"{name}-metrics-{flag}",
                    )
                    for flag in ("false", "true")
                )
                servers += [app, raw, quiet, loud]
                results.servers += [app.command, raw.command, quiet.command, loud.command]
                targets.append(Target(db, app, raw, quiet, loud))
            for target in targets:
                for server in (target.app, target.quiet, target.loud):
                    server.wait("/v1/openapi.json")
                target.raw.wait(f"/cases?agent=1&project={PROJECT}")
                prepare(target, creds[target.db.cases])
                prepare_runs(target, creds[target.db.cases], results)
            # exec starts a process a case: on the smallest set, before adding cases grows it
            measure_ci(targets[0], creds[targets[0].db.cases]["token"], "exec", results)
            rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for group in (MEASURES[:-1], MEASURES[-1:]):  # adding cases last: it grows the sets
                for n in range(args.rounds):
                    for what in group:
                        # the sizes smallest first, then largest first: a drift over the round
                        # falls on a size ratio's two ends alike
                        for target in targets if n % 2 == 0 else targets[::-1]:
                            for each in _turns(what, n):
                                got = measure(target, each, args.seconds, 0 if n else args.warmup)
                                rounds.setdefault((each, target.db.cases), []).append(got)
            for what in MEASURES:
                for target in targets:
                    figure(target, what, rounds[(what, target.db.cases)], args, results)
            smallest = targets[0]
            ci_target = smallest
            if not args.smoke:  # a set of 10,000 cases for jsonl and the pytest plugin
                ci_db = Database(engine, CI_CASES, args.workdir, args.postgres, prefix)
                dbs.append(ci_db)
                creds[CI_CASES] = build(ci_db, results)
                env = app_env(ci_db)
                ci_app = Server("app:app", env, f"KINDGI_SQLALCHEMY_DATABASE_URI={ci_db.shown}",
                                args.workdir, f"{engine}-ci")  # fmt: skip
                servers.append(ci_app)
                results.servers.append(ci_app.command)
                ci_app.wait("/v1/openapi.json")
                ci_target = Target(ci_db, ci_app, ci_app)
            biggest = targets[-1]
            token = creds[biggest.db.cases]["token"]
            if args.smoke:
                measure_judge(biggest, token, "database", None, JUDGE_SMOKE, args, results)
            else:
                # as many answers on both engines: the rate counts the run's finish and end
                # (the records of 313,711 cases, some 10 s), a sixth of a run of 2,000 answers
                measure_judge(biggest, token, "database", None, JUDGE_RUN, args, results)
                if engine == "sqlite":
                    measure_judge(biggest, token, "Redis", REDIS, JUDGE_RATE, args, results)
            measure_ci(ci_target, creds[ci_target.db.cases]["token"], "jsonl", results)
            measure_pytest(ci_target, creds[ci_target.db.cases]["token"], args.workdir, results)
            for form in ("jsonl", "csv"):
                measure_export(biggest, token, form, results)
            measure_otlp(smallest, creds[smallest.db.cases]["token"], args, results)
            for target in targets:
                results.figures.append(
                    Figure(
                        engine,
                        "peak RSS per worker",
                        target.db.cases,
                        f"grep VmHWM /proc/$WORKER/status  (each worker of "
                        f"S{server_no(results, target.app)}, after all its measures)",
                        value=target.app.peak_rss_mb(),
                        unit="MB",
                    )
                )
        measure_inbox(engine, args, results, prefix, dbs)  # the cases' servers stopped
    finally:
        drop_all(dbs, args.keep)


def drop_all(dbs: list[Database], keep: bool) -> None:
    """The bench's databases dropped, unless they are to be kept."""
    if not keep:
        for db in dbs:
            with suppress(Exception):
                db.drop()


def run_revise_only(engine: str, args: argparse.Namespace, results: Results) -> None:
    """`--only revise`: revisions through HTTP, then the freeze after them, on a demo of the
    first size."""
    with demo_database(engine, args, results, "revise") as (db, creds):
        with served(db, args, results, f"{engine}-{db.cases}-revise") as target:
            measure_revisions(target, creds["token"], results)
            measure_tags(target, creds["token"], args, results)
        took, _ = time_freezes(db)
        shown = "bench/run.py time_freezes (in process)"
        results.figures.append(Figure(engine, FREEZE_REVISED, db.size, shown, value=took, unit="s"))
        log(f"{engine}: froze {db.cases:,} cases after {REVISED:,} revisions in {took:.2f} s")


def measure_revisions(target: Target, token: str, results: Results) -> None:
    """`REVISED` active cases of the demo's set, each revised once (If-Match its first ETag)
    by `REVISERS` clients at once: revisions a second, and the slowest."""
    base = f"{target.app.base}/v1/agents/{AGENT}/test-set/cases"
    auth = {"Authorization": f"Bearer {token}"}
    ids: list[str] = []
    cursor = None
    while len(ids) < REVISED:
        query = {"projectId": PROJECT, "limit": 100, "cursor": cursor}
        page = requests.get(base, params=query, headers=auth, timeout=60).json()
        ids += [case["id"] for case in page["data"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    ids = ids[:REVISED]

    shares = [(base, token, ids[i::REVISERS]) for i in range(REVISERS)]
    cpu, started = target.app.cpu_seconds(), time.monotonic()
    with ProcessPoolExecutor(REVISERS) as pool:  # processes: a client's GIL is not the limit
        done = list(pool.map(_revise_each, shares))
    seconds, cpu = time.monotonic() - started, target.app.cpu_seconds() - cpu
    errors = sum(failed for failed, _ in done)
    took = sorted(ms for _, each in done for ms in each)
    figure = Figure(
        target.db.engine,
        REVISE,
        target.db.size,
        f"POST {base}/{{caseId}}/revise, {len(ids):,} cases from {REVISERS} processes",
        rps=len(ids) / seconds,
        p50_ms=took[len(took) // 2],
        p99_ms=took[len(took) * 99 // 100],
        errors=errors,
        cpu_ms=cpu / len(ids) * 1000,
    )
    results.figures.append(figure)
    log(f"{target.db.engine}: {len(ids):,} revisions in {seconds:.2f} s ({errors} failed)")


def measure_tags(target: Target, token: str, args: argparse.Namespace, results: Results) -> None:
    """`TAG_BATCH` cases of the demo's set tagged in one request, timed; then every hundredth
    case (by id) tagged as well, `TAG_BATCH` a request, and wrk on the list's first page
    filtered by that tag and on the plain list's, round after round."""
    from sqlalchemy import select

    from kindgi import create_app
    from kindgi.database import db as database
    from kindgi.models import Agent, Case

    app = create_app({"SQLALCHEMY_DATABASE_URI": target.db.url, "SECRET_KEY": SECRET})
    with app.app_context():
        every = database.session.scalars(
            select(Case.id)
            .join(Agent, Agent.pk == Case.agent_pk)
            .where(Agent.id == AGENT, Case.project_id == PROJECT, Case.is_case)
            .order_by(Case.id)
        ).all()
        database.engine.dispose()
    base = f"{target.app.base}/v1/agents/{AGENT}/test-set/cases"
    auth = {"Authorization": f"Bearer {token}"}

    def tag(ids: list[str], name: str) -> float:
        body = {"projectId": PROJECT, "caseIds": ids, "add": [name]}
        started = time.monotonic()
        resp = requests.post(f"{base}/tags", json=body, headers=auth, timeout=120)
        if resp.status_code != 200:
            raise SystemExit(f"tagging failed: {resp.status_code} {resp.text[:300]}")
        return time.monotonic() - started

    took = tag(every[:TAG_BATCH], "bench-batch")
    shown = f"POST {base}/tags, {min(TAG_BATCH, len(every)):,} cases"
    results.figures.append(
        Figure(target.db.engine, TAGGING, target.db.size, shown, value=took, unit="s")
    )
    rare = every[::100]
    for i in range(0, len(rare), TAG_BATCH):
        tag(rare[i : i + TAG_BATCH], RARE_TAG)
    log(f"{target.db.engine}: {TAG_BATCH} cases tagged in {took:.2f} s; {len(rare):,} with 1 %")
    list_url = f"{base}?projectId={PROJECT}"
    target.requests = {
        FIRST: (list_url, auth, None),
        TAGGED: (f"{list_url}&tag={RARE_TAG}", auth, None),
    }
    target.shown = {token: "$TOKEN"}
    rounds: dict[str, list[dict[str, Any]]] = {FIRST: [], TAGGED: []}
    for n in range(args.rounds):
        for what in (FIRST, TAGGED):
            rounds[what].append(measure(target, what, args.seconds, 0 if n else args.warmup))
    for what in (FIRST, TAGGED):
        figure(target, what, rounds[what], args, results)


def _revise_each(share: tuple[str, str, list[str]]) -> tuple[int, list[float]]:
    """One client's revisions, each case once, one after another: (failed, each one's ms)."""
    base, token, ids = share
    session, failed, took = requests.Session(), 0, []
    headers = {"Authorization": f"Bearer {token}", "If-Match": '"r1"'}
    for n, case_id in enumerate(ids):
        body = {"answer": "wrong", "why": f"Revised by the bench, {n}.", "note": "bench"}
        started = time.monotonic()
        resp = session.post(f"{base}/{case_id}/revise", json=body, headers=headers, timeout=60)
        took.append((time.monotonic() - started) * 1000)
        failed += resp.status_code != 200
    return failed, took


def revise_bars(results: Results, engines: list[str]) -> list[Bar]:
    """Issue 24's bars for revisions: at least 200 a second on SQLite, and the freeze after
    1,000 of them within 2 s."""
    rate, freezing = {}, {}
    for f in results.figures:
        if f.what == REVISE and f.engine in engines:
            met = f.rps >= 200 and not f.errors if f.engine == "sqlite" else None
            rate[f.engine] = (f"{f.rps:,.0f}/s ({f.errors} failed)", met)
        if f.what == FREEZE_REVISED and f.engine in engines:
            freezing[f.engine] = (f"{f.value:.2f} s at {f.cases:,} cases", f.value <= 2)
    tagging, tagged = {}, {}
    for f in results.figures:
        if f.what == TAGGING and f.engine in engines:
            tagging[f.engine] = (f"{f.value:.2f} s at {f.cases:,} cases", f.value <= 1)
        plain = results.get(f.engine, FIRST, f.cases)
        if f.what == TAGGED and f.engine in engines and plain and plain.rps:
            share = f.rps / plain.rps
            tagged[f.engine] = (f"{share:.2f} ({f.rps:,.0f} ÷ {plain.rps:,.0f} req/s, by server "
                                f"CPU {plain.cpu_ms / f.cpu_ms:.2f})", share >= 0.5)  # fmt: skip
    return [
        Bar("Revisions a second (HTTP, 4 clients)", "≥ 200 on SQLite", rate),
        Bar(f"Freezing after {REVISED:,} revisions", "≤ 2 s", freezing),
        Bar(f"Tagging {TAG_BATCH} cases in one request", "≤ 1 s", tagging),
        Bar("A 1 % tag's first page ÷ the plain list's", "≥ 0.5", tagged),
    ]


@contextmanager
def demo_database(
    engine: str, args: argparse.Namespace, results: Results, name: str
) -> Iterator[tuple[Database, dict[str, str]]]:
    """A demo of the first size, built (timed) for one `--only` section, and its credentials;
    dropped after unless `--keep`."""
    db = Database(engine, args.sizes[0], args.workdir, args.postgres,
                  f"kindgi_bench_{name}_{os.getpid()}")  # fmt: skip
    creds = build(db, results)
    try:
        yield db, creds
    finally:
        if not args.keep:
            db.drop()


def app_env(db: Database) -> dict[str, str]:
    """The settings an app (server or command) on `db` runs with."""
    return {"KINDGI_SQLALCHEMY_DATABASE_URI": db.url, "KINDGI_SECRET_KEY": SECRET}


@contextmanager
def served(db: Database, args: argparse.Namespace, results: Results, name: str) -> Iterator[Target]:
    """`db` served by gunicorn while the block runs, its command kept for the results."""
    app = Server("app:app", app_env(db), f"KINDGI_SQLALCHEMY_DATABASE_URI={db.shown}",
                 args.workdir, name)  # fmt: skip
    with serving([app]):
        results.servers.append(app.command)
        app.wait("/v1/openapi.json")
        yield Target(db, app, app)


def run_otlp_only(engine: str, args: argparse.Namespace, results: Results) -> None:
    """`--only otlp`: the OTLP measures alone, on a demo of the smallest size."""
    with (
        demo_database(engine, args, results, "otlp") as (db, creds),
        served(db, args, results, f"{engine}-{db.cases}") as target,
    ):
        measure_otlp(target, creds["token"], args, results)


def run_bfcl_only(engine: str, args: argparse.Namespace, results: Results) -> None:
    """`--only bfcl`: BFCL's entries imported into the smallest demo's set with `flask kindgi
    import`, then results sent to test runs of it, only for those cases, each against a
    perturbed answer (so both outcomes are graded): results graded per second."""
    with demo_database(engine, args, results, "bfcl") as (db, creds):
        unpacked = bfcl_answers.wheel_data()
        entries = bfcl_answers.entries(unpacked, per_category=None)
        path = args.workdir / "bfcl.jsonl"
        path.write_text("".join(json.dumps(e.line) + "\n" for e in entries))
        command = [sys.executable, "-m", "flask", "--app", "app", "kindgi", "import", str(path),
                   "--agent", AGENT, "--project", PROJECT]  # fmt: skip
        took, done = _timed(command, app_env(db))
        if done.returncode != 0:
            raise SystemExit(f"importing BFCL's cases failed:\n{done.stderr}")
        shown = (
            f"KINDGI_SQLALCHEMY_DATABASE_URI={db.shown} flask --app app kindgi import bfcl.jsonl"
        )
        results.figures.append(
            Figure(engine, f"import {len(entries):,} BFCL cases", db.cases,
                   f"time {shown} --agent {AGENT} --project {PROJECT}", value=took, unit="s")
        )  # fmt: skip
        with served(db, args, results, f"{engine}-{db.cases}") as target:
            measure_bfcl(target.app.base, creds["token"], entries, engine, db.cases, results)


def measure_bfcl(
    base: str, token: str, entries: list[Any], engine: str, cases: int, results: Results
) -> None:
    """Send each BFCL case a perturbed answer (the k-th entry the k-th perturbation that
    applies to it, turn by turn), to BFCL_RUNS test runs from SENDERS clients; timed. Then the
    demo's own cases (no matchers) the same way, for the host's state at that moment."""
    http = requests.Session()
    http.headers.update({"Authorization": f"Bearer {token}"})
    exported = http.get(f"{base}/v1/agents/{AGENT}/test-set/export?projectId={PROJECT}")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    bfcl = {c["input"]["bfcl"]: c["id"] for c in lines if "bfcl" in (c["input"] or {})}
    plain = [c["id"] for c in lines if "bfcl" not in (c["input"] or {})]

    def answers(turn: int) -> list[dict[str, Any]]:
        sent = []
        for k, entry in enumerate(entries):
            tried = list(bfcl_answers.perturbations(entry))
            calls = tried[(k + turn) % len(tried)][1]
            sent.append({"caseId": bfcl[entry.id], "output": None,
                         "calls": bfcl_answers.as_kindgi(calls)})  # fmt: skip
        return sent

    measures = (
        (BFCL_GRADED, answers, f"{len(entries):,} BFCL cases"),
        (BFCL_PLAIN, lambda _: [result_of(i) for i in plain], f"the demo's {len(plain):,} cases"),
    )
    for what, make, which in measures:
        sent, errors, took = 0, 0, 0.0
        for turn in range(-1, BFCL_RUNS):  # turn -1 warms the workers up (a first JSON Schema
            # validator, the statements' caches) and is not counted
            batches = [json.dumps({"results": chunk}) for chunk in _chunked(make(turn), BATCH)]
            run = http.post(f"{base}/v1/agents/{AGENT}/test-runs",
                            json={"projectId": PROJECT, "candidate": f"bfcl-{turn}"})  # fmt: skip
            run.raise_for_status()
            url = f"{base}/v1/agents/{AGENT}/test-runs/{run.json()['id']}/results"
            started = time.monotonic()
            with ProcessPoolExecutor(SENDERS) as pool:
                shares = [batches[k::SENDERS] for k in range(SENDERS)]
                done = list(pool.map(send_batches, [url] * SENDERS, [token] * SENDERS, shares))
            if turn >= 0:
                took += time.monotonic() - started
                sent += sum(n for n, _ in done)
                errors += sum(e for _, e in done)
        results.figures.append(
            Figure(engine, what, cases,
                   f"POST /v1/agents/{AGENT}/test-runs/$RUN/results from {SENDERS} processes, "
                   f"{BFCL_RUNS} runs of {which} after one run not counted (bench/run.py "
                   "measure_bfcl)",
                   value=sent / took if took else 0.0, unit="results/s", errors=errors)
        )  # fmt: skip
        log(f"{engine}: {what}: {sent:,} results in {took:.1f} s, {errors} errors")


def _chunked(items: list[Any], size: int) -> list[list[Any]]:
    return [items[at : at + size] for at in range(0, len(items), size)]


def bfcl_bars(results: Results, engines: list[str]) -> list[Bar]:
    """Issue 26's bar: results with matchers graded at 3,000/s or more on SQLite."""
    values = {}
    for engine in engines:
        graded = next((f for f in results.figures if (f.engine, f.what) == (engine, BFCL_GRADED)),
                      None)  # fmt: skip
        if graded:
            values[engine] = (
                f"{graded.value:,.0f} results/s, {graded.errors} errors",
                graded.value >= 3000 and graded.errors == 0 if engine == "sqlite" else None,
            )
    return [Bar(BFCL_GRADED, "≥ 3,000/s on SQLite, 0 errors", values)] if values else []


def run_quick_only(engine: str, args: argparse.Namespace, results: Results) -> None:
    """`--only quick`: the quick runs' proof (bench/quick.py), through the API of an app on a
    fresh database holding the tests' world (its admin token), in this process."""
    from flask_migrate import upgrade

    from kindgi import create_app, world
    from kindgi.database import db as the_db

    prefix = f"kindgi_bench_quick_{os.getpid()}"
    db = Database(engine, QUICK_CASES, args.workdir, args.postgres, prefix)
    db.create()
    app = create_app({"SECRET_KEY": SECRET, "SQLALCHEMY_DATABASE_URI": db.url})
    try:
        with app.app_context():
            upgrade()
            world.load(json.loads((ROOT / "tests" / "world.json").read_text()))
            the_db.session.commit()
        client = app.test_client()
        auth = {"Authorization": "Bearer kgi_admin"}

        def call(method: str, path: str, body: Any) -> tuple[int, Any]:
            resp = client.open(path, method=method, json=body, headers=auth)
            return resp.status_code, resp.get_json()

        started = time.monotonic()
        sizes = (QUICK_CASES, QUICK_HISTORY, QUICK_CANDIDATES, QUICK_RUNS, QUICK_SIZE)
        if args.smoke:
            sizes = (300, 10, 3, 10, 40)
        cases, history, candidates, quick, size = sizes
        got = simulate(call, cases=cases, history=history, candidates=candidates, quick=quick,
                       size=size, say=log)  # fmt: skip
        took = time.monotonic() - started
        log(f"quick runs: {got} in {took:.0f} s")
        _quick_figures(engine, got, cases, args, took, results)
    finally:
        with app.app_context():
            the_db.engine.dispose()
        if not args.keep:
            db.drop()


def run_quick_scale(engine: str, args: argparse.Namespace, results: Results) -> None:
    """`--only quick-scale`: a quick run's start, the set's health and a full run's end, timed
    on a demo of the first size (`time_at_scale`)."""
    with demo_database(engine, args, results, "quick") as (db, creds):
        time_at_scale(db, creds["token"], results)


def answered(session: Any, run: Any, percent: int) -> dict[str, Any]:
    """A full run's every case answered in place, as sending its results would leave it: about
    `percent` % failing (chosen by their ids' CRC, so the same cases each time), the rest
    passing; the tallies to settle it with."""
    import zlib

    from sqlalchemy import select, update

    from kindgi.models import RunCase
    from kindgi.service.test_runs import new_tallies

    ids = session.scalars(select(RunCase.case_id).where(RunCase.run_pk == run.pk))
    failing = [c for c in ids if zlib.crc32(c.encode()) % 100 < percent]
    session.execute(update(RunCase).where(RunCase.run_pk == run.pk).values(outcome="pass"))
    for at in range(0, len(failing), 500):
        session.execute(
            update(RunCase)
            .where(RunCase.run_pk == run.pk, RunCase.case_id.in_(failing[at : at + 500]))
            .values(outcome="fail")
        )
    tallies = new_tallies(run.tallies["cases"]["total"])
    total = tallies["cases"]["total"]
    tallies["cases"].update(awaiting=0, fail=len(failing), **{"pass": total - len(failing)})
    return tallies


def time_at_scale(db: Database, token: str, results: Results) -> None:
    """On the demo's largest set, in this process through the Flask test client: SCALE_HISTORY
    full runs, each started through the API, its outcomes written by SQL (a case's difficulty
    from its id, a run's ability from its number) and ended as the results endpoint ends it
    (`settle`, which rewrites its cases' records: the last one timed); then a quick run of 100
    started through the API and the set's health computed for the first time and read again.
    Each figure: wall seconds, this process's CPU seconds and the SQL statements sent."""
    from sqlalchemy import event, select

    from kindgi import create_app
    from kindgi.database import commit, set_writing
    from kindgi.database import db as the_db
    from kindgi.models import TestRun
    from kindgi.service import set_health
    from kindgi.service.test_runs import settle

    # the history's bulk statements may outlast the usual timeout on a busy host: not measured
    config = {"SQLALCHEMY_DATABASE_URI": db.url, "SECRET_KEY": SECRET,
              "DB_STATEMENT_TIMEOUT_MS": 600_000}  # fmt: skip
    app = create_app(config)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {token}"}
    runs, health = f"/v1/agents/{AGENT}/test-runs", f"/v1/agents/{AGENT}/test-set/health"
    sent = [0]

    def timed(what: str, act: Callable[[], Any], shown: str) -> Any:
        statements, cpu, started = sent[0], time.process_time(), time.monotonic()
        got = act()
        took, cpu = time.monotonic() - started, time.process_time() - cpu
        note = f"CPU {cpu:.2f} s in this process, {sent[0] - statements:,} SQL statements"
        results.figures.append(Figure(db.engine, what, db.size, shown, value=took, unit="s",
                                      note=note))  # fmt: skip
        log(f"{db.engine}: {what}: {took:.2f} s ({note})")
        return got

    def started(body: dict[str, Any]) -> str:
        resp = client.post(runs, json={"projectId": PROJECT, **body}, headers=auth)
        if resp.status_code != 201:
            raise SystemExit(f"starting a run failed: {resp.status_code} {resp.get_data()[:300]}")
        return resp.get_json()["id"]

    with app.app_context():
        event.listen(
            the_db.engine, "before_cursor_execute", lambda *_: sent.__setitem__(0, sent[0] + 1)
        )
        for k in range(SCALE_HISTORY):
            run_id = started({"candidate": f"scale-{k}"})
            set_writing(True)
            run = the_db.session.scalar(select(TestRun).where(TestRun.id == run_id))
            tallies = answered(the_db.session, run, 20 + 10 * k)
            total = tallies["cases"]["total"]
            if k < SCALE_HISTORY - 1:
                settle(run, tallies)
            else:
                shown = f"bench/run.py time_at_scale: service.test_runs.settle, {total:,} cases"
                timed(RUN_END, lambda: settle(run, tallies), shown)  # noqa: B023  (called now)
            commit()
            set_writing(False)
            log(f"{db.engine}: full run {k + 1}/{SCALE_HISTORY} of {total:,} cases ended")
        body = {
            "projectId": PROJECT,
            "candidate": "scale-quick",
            "sample": {"size": 100, "seed": 1},
        }
        resp = timed(QUICK_START, lambda: client.post(runs, json=body, headers=auth),
                     f"POST {runs} {json.dumps(body)} (bench/run.py time_at_scale)")  # fmt: skip
        if resp.status_code != 201:
            raise SystemExit(f"the quick run failed: {resp.status_code} {resp.get_data()[:300]}")
        set_health._cache.clear()
        url = f"{health}?projectId={PROJECT}"
        for what in (HEALTH_FIRST, HEALTH_AGAIN):
            got = timed(
                what,
                lambda: client.get(url, headers=auth),
                f"GET {url} (bench/run.py time_at_scale)",
            )
            if got.status_code != 200:
                raise SystemExit(f"health failed: {got.status_code} {got.get_data()[:300]}")
        the_db.engine.dispose()


def scale_bars(results: Results, engines: list[str]) -> list[Bar]:
    """Issue 25's bars at scale: a quick run of 100 starts in 1 s, the set's health is computed
    in 30 s; a full run's end is reported."""
    bars = []
    for what, text, bar, limit in (
        (QUICK_START, "Starting a quick run of 100 on the demo's largest set", "≤ 1 s", 1.0),
        (HEALTH_FIRST, "The set's health, first computed", "≤ 30 s", 30.0),
        (RUN_END, "A full run's end (its cases' records)", "reported", None),
    ):
        values = {
            f.engine: (
                f"{f.value:.2f} s at {f.cases:,} ({f.note})",
                None if limit is None else (f.value or 0) <= limit,
            )
            for f in results.figures
            if f.what == what and f.engine in engines
        }
        if values:
            bars.append(Bar(text, bar, values))
    return bars


def _quick_figures(
    engine: str, got: Figures, cases: int, args: argparse.Namespace, took: float, results: Results
) -> None:
    command = f"python bench/run.py --only quick --engines {engine}" + (
        " --smoke" if args.smoke else ""
    )
    note = f"{got.quick_runs:,} quick runs, {took:.0f} s in all"
    for what, value, unit in (
        (QUICK_MAE, got.mae, "points"),
        (QUICK_COVERAGE, got.coverage, "%"),
        (PLAIN_MAE, got.plain_mae, "points"),
        (PLAIN_COVERAGE, got.plain_coverage, "%"),
    ):
        results.figures.append(Figure(engine, what, cases, command, value=value, unit=unit,
                                      note=note))  # fmt: skip


def quick_bars(results: Results, engines: list[str]) -> list[Bar]:
    """The quick runs' bars: the estimate within 2 points on average, its 95 % interval
    covering the full run's pass rate in 92 to 98 % of quick runs (plain random samples shown)."""
    mae, coverage = {}, {}
    for engine in engines:
        found = {f.what: f for f in results.figures if f.engine == engine}
        if QUICK_MAE not in found:
            continue
        error, plain = found[QUICK_MAE].value or 0, found[PLAIN_MAE].value or 0
        mae[engine] = (f"{error:.2f} points (plain random {plain:.2f})", error <= 2.0)
        share, plain = found[QUICK_COVERAGE].value or 0, found[PLAIN_COVERAGE].value or 0
        coverage[engine] = (f"{share:.1f} % (plain random {plain:.1f} %)", 92 <= share <= 98)
    if not mae:
        return []
    return [
        Bar("Quick runs of 100: mean absolute error against the full run", "≤ 2.0 points", mae),
        Bar(
            "Quick runs of 100: the 95 % interval covers the full pass rate", "92 to 98 %", coverage
        ),
    ]


def otlp_bars(results: Results, engines: list[str]) -> list[Bar]:
    """The issue's OTLP bars, with the SDK's own exporter feeding both servers: stored spans/s at
    least a tenth of the bare server's on SQLite (PostgreSQL's reported), an export's p99 within
    500 ms, and no span lost; the same ratio with pre-encoded exports, reported beside."""
    ratio: dict[str, dict] = {kind: {} for kind in OTLP_KINDS}
    p99, lost = {}, {}
    for engine in engines:
        found = {
            (stored, kind): next(
                (f for f in results.figures if (f.engine, f.what) == (engine, what)), None
            )
            for kind in OTLP_KINDS
            for stored in (False, True)
            for what in [otlp_what(stored, kind)]
        }
        for kind in OTLP_KINDS:
            raw, stored = found[False, kind], found[True, kind]
            if not (stored and raw and raw.value):
                continue
            share = stored.value / raw.value
            ratio[kind][engine] = (
                f"{share:.3f} ({stored.value:,.0f} ÷ {raw.value:,.0f} spans/s)",
                share >= 0.10 if engine == "sqlite" and kind == "sdk" else None,
            )
        stored, raw = found[True, "sdk"], found[False, "sdk"]
        if stored and raw:
            p99[engine] = (
                f"{stored.p99_ms:.0f} ms (raw {raw.p99_ms:.0f} ms; pre-encoded "
                f"{found[True, 'bytes'].p99_ms if found[True, 'bytes'] else float('nan'):.0f} ms)",
                stored.p99_ms <= 500,
            )
            gone = int(re.search(r"lost (\d+)", stored.note).group(1))
            failed = sum(f.errors for f in (stored, found[True, "bytes"]) if f)
            lost[engine] = (f"{gone} traces, {failed} failed exports ({stored.note})",
                            gone == 0 and not failed)  # fmt: skip
    return [
        Bar(
            "OTLP: spans stored/s ÷ bare parse-and-discard server's (the SDK's exporter)",
            "≥ 0.10 on SQLite",
            ratio["sdk"],
        ),
        Bar(
            "OTLP: the same with pre-encoded exports (the servers alone)",
            "reported",
            ratio["bytes"],
        ),
        Bar("OTLP: an export's p99 (512 spans, the SDK's exporter)", "≤ 500 ms", p99),
        Bar("OTLP: traces acknowledged but not made whole runs, and failed exports", "0", lost),
    ]


# ---------------------------------------------------------------- the bars


@dataclass
class Bar:
    text: str
    need: str
    values: dict[str, tuple[str, bool | None]]  # engine → (measured, met; None: not a bar)


def judge(results: Results, engines: list[str], sizes: list[int]) -> list[Bar]:
    """The issue's bars, each measured within this run."""
    if not ({1_000, 1_000_000} <= set(sizes)):
        return []
    small, big = 1_000, 1_000_000
    bars = []

    def ratio(text: str, a: tuple[str, int], b: tuple[str, int], need: float) -> None:
        values = {}
        for engine in engines:
            fa, fb = results.get(engine, *a), results.get(engine, *b)
            if fa and fb and fb.rps:
                r = fa.rps / fb.rps
                by_cpu = fb.cpu_ms / fa.cpu_ms if fa.cpu_ms else float("nan")
                values[engine] = (
                    f"{r:.2f} ({fa.rps:,.0f} ÷ {fb.rps:,.0f} req/s; by server CPU {by_cpu:.2f})",
                    r >= need,
                )
        bars.append(Bar(text, f"≥ {need}", values))

    ratio("list first page: at 1M ÷ at 1k", (FIRST, big), (FIRST, small), 0.9)
    ratio("list deep page ÷ first page, at 1M", (DEEP_PAGE, big), (FIRST, big), 0.9)
    ratio("counts: at 1M ÷ at 1k", (COUNTS, big), (COUNTS, small), 0.9)
    for n in sizes:
        ratio(f"list first page ÷ raw baseline, at {n:,}", (FIRST, n), (RAW, n), 0.5)
    ratio("HTML cases page ÷ JSON list first page, at 1M", (HTML, big), (FIRST, big), 0.5)
    values = {}
    for engine in engines:
        figs = [results.get(engine, ADD, n) for n in sizes]
        if all(figs):
            slowest = min(figs, key=lambda f: f.rps)
            errors = sum(f.errors for f in figs)
            values[engine] = (  # the issue sets this bar on SQLite; PostgreSQL's is reported
                f"{slowest.rps:,.0f} req/s at worst, {errors} errors",
                slowest.rps >= 300 and errors == 0 if engine == "sqlite" else None,
            )
    bars.append(
        Bar("add a hand case (Idempotency-Key), every size", "≥ 300/s on SQLite, 0 errors", values)
    )
    ratio(
        "search, a word in ~1 %: first page ÷ plain list, at 1M", (SEARCH, big), (FIRST, big), 0.5
    )
    ratio("search, a word in ~1 %: deep page ÷ its first page, at 1M", (SEARCH_DEEP, big),
          (SEARCH, big), 0.9)  # fmt: skip
    values = {}
    for engine in engines:
        f = results.get(engine, SEARCH_BROAD, big)
        if f and f.p99_ms is not None:
            values[engine] = (f"p99 {f.p99_ms:.1f} ms ({f.rps:,.0f} req/s)", f.p99_ms <= 300)
    bars.append(Bar("search, a word in ~50 %: first page p99, at 1M", "≤ 300 ms", values))
    ratio("read a test run: at 1M ÷ at 1k", (RUN, big), (RUN, small), 0.9)
    ratio("run results first page: at 1M ÷ at 1k", (RESULTS, big), (RESULTS, small), 0.9)
    ratio("run results deep page ÷ first page, at 1M", (RESULTS_DEEP, big), (RESULTS, big), 0.9)
    ratio("compare first page: at 1M ÷ at 1k", (COMPARE, big), (COMPARE, small), 0.9)
    ratio("HTML run page: at 1M ÷ at 1k", (RUN_PAGE, big), (RUN_PAGE, small), 0.9)
    ratio("runs inbox first page: at 1M runs ÷ at 1k", (INBOX, big), (INBOX, small), 0.9)
    values = {}
    for engine in engines:
        sent = next(
            (f for f in results.figures
             if (f.engine, f.cases) == (engine, big) and f.what.startswith("send ")),
            None,
        )  # fmt: skip
        if sent:
            values[engine] = (  # the issue sets this bar on SQLite; PostgreSQL's is reported
                f"{sent.value:,.0f} results/s, {sent.errors} errors",
                sent.value >= 3000 and sent.errors == 0 if engine == "sqlite" else None,
            )
    bars.append(
        Bar(f"send {SENT:,} results, {SENDERS} clients, at 1M", "≥ 3,000/s on SQLite, 0 errors",
            values)
    )  # fmt: skip
    values = {}
    for engine in engines:
        for backend in ("database", "Redis"):
            f = results.get(engine, f"judge verdicts, {backend} queue", big)
            if f:
                values[f"{engine}-{backend}"] = (f"{f.value:.1f} {f.unit}", f.value >= 32)
    bars.append(Bar("judge verdicts/s (stub 200 ms, concurrency 8), each queue", "≥ 32/s",
                    {e: v for e, v in _by_engine(values, engines).items()}))  # fmt: skip
    values = {}
    for engine in engines:
        ci = results.get(engine, "kindgi test-run, jsonl, 4 jobs", CI_CASES)
        if ci:  # the issue sets this bar on SQLite; PostgreSQL's is reported
            values[engine] = (
                f"{ci.value:,.0f} {ci.unit}",
                ci.value >= 1000 if engine == "sqlite" else None,
            )
    bars.append(
        Bar(
            "kindgi test-run --protocol jsonl --jobs 4, 10,000 cases",
            "≥ 1,000 cases/s on SQLite",
            values,
        )
    )
    values = {}
    for engine in engines:
        f = results.get(engine, PYTEST_PLUGIN, CI_CASES)
        if f:  # the issue sets this bar on SQLite; PostgreSQL's is reported
            values[engine] = (
                f"{f.value:,.0f} {f.unit}; {f.note}",
                f.value >= 500 if engine == "sqlite" else None,
            )
    bars.append(Bar("pytest plugin, -n 4, 10,000 cases", "≥ 500 cases/s on SQLite", values))
    values = {}
    for engine in engines:
        on, off = results.get(engine, LOUD, big), results.get(engine, QUIET, big)
        if on and off and off.p50_ms:
            values[engine] = (
                f"{on.p50_ms / off.p50_ms:.3f} ({on.p50_ms:.2f} ÷ {off.p50_ms:.2f} ms)",
                on.p50_ms <= 1.05 * off.p50_ms,
            )
    bars.append(Bar("list first page p50 at 1M: metrics on ÷ off (twin servers)", "≤ 1.05", values))
    for form in ("jsonl", "csv"):
        values = {}
        for engine in engines:
            f = results.get(engine, f"export ({form})", big)
            if f:
                values[engine] = (f"{f.value:,.0f} cases/s ({f.note})", f.value >= 20_000)
        bars.append(Bar(f"export the largest test set at 1M, {form}", "≥ 20,000 cases/s", values))
    for what, unit, limit, text in (
        ("freeze", "ms", 20_000, "freeze the largest test set at 1M"),
        ("freeze again, unchanged", "ms", 50, "freeze it again, unchanged, at 1M"),
        (
            "peak RSS per worker",
            "MB",
            150,
            "peak RSS per worker at 1M (sending results and exporting too)",
        ),
        ("build: kindgi demo", "s", 60, "kindgi demo --cases 1000000"),
        (PRUNE_LOCK, "ms", 200, "prune of 1M runs no case was made from: longest write lock"),
    ):
        values = {}
        for engine in engines:
            f = results.get(engine, what, big)
            if f:
                values[engine] = (f"{f.value:.1f} {unit}", f.value <= limit)
        bars.append(Bar(text, f"≤ {limit} {unit}", values))
    errors = {
        engine: sum(f.errors or 0 for f in results.figures if f.engine == engine)
        for engine in engines
    }
    bars.append(
        Bar(
            "errors in all requests of the run",
            "0",
            {engine: (str(n), n == 0) for engine, n in errors.items()},
        )
    )
    return bars


def _by_engine(values: dict[str, tuple[str, bool]], engines: list[str]) -> dict[str, Any]:
    """Figures keyed engine-backend into one cell per engine."""
    out = {}
    for engine in engines:
        cells = [(k.split("-", 1)[1], v) for k, v in values.items() if k.startswith(engine)]
        if cells:
            text = "; ".join(f"{backend} queue {got}" for backend, (got, _) in cells)
            out[engine] = (text, all(met for _, (_, met) in cells))
    return out


# ---------------------------------------------------------------- the report


def machine(engines: list[str], server: str) -> list[str]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    import gunicorn

    lines = [
        f"{os.cpu_count()} cores ({cpu}), {mem / 1024 / 1024:.0f} GiB, {platform.platform()}",
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"gunicorn {gunicorn.__version__}, {wrk_v.split(' [')[0]}",
    ]
    if "postgresql" in engines:
        import psycopg

        with psycopg.connect(server.replace("+psycopg", "")) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
        lines[-1] += f", PostgreSQL {version.split()[0]}"
    return lines


def render(results: Results, bars: list[Bar], meta: dict[str, Any]) -> str:
    engines = meta["engines"]
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    out = ["# Kindgi benchmarks", ""]
    out += [
        f"Run {meta['started']} UTC with `{meta['command']}`, in {meta['took']:.0f} s.",
        "",
        "Machine: " + "; ".join(meta["machine"]) + ".",
        f"Load average (1 min) {meta['load'][0]:.2f} at the start, {meta['load'][1]:.2f} at the "
        "end.",
        "",
        f"Each figure: wrk from a second process on loopback, {THREADS} threads, {CONNECTIONS} "
        f"connections, against gunicorn with {WORKERS} sync workers; {meta['rounds']} round(s) "
        f"of {meta['seconds']} s after a {meta['warmup']} s warm-up. In each round every measure "
        "ran against every size in turn, smallest first one round and largest first the next "
        "(adding cases after all the reads, since it grows the sets), and a ratio's two "
        "measures one after the other, so a passing disturbance falls on both alike; the twin "
        f"servers with metrics on and off {TWIN_PAIRS} times each a round, back to back, each "
        "first in turn. req/s is all requests over all rounds' time; p50 and p99 are of all "
        "their requests (wrk's histograms merged); server CPU is what the server's workers used "
        "per request (from /proc), which other load on the machine moves less than req/s, but "
        "still moves (a busy host's cores and caches run slower). Agent "
        f"`{AGENT}`, project `{PROJECT}` (a third of the cases).",
        "",
    ]
    if bars:
        out += ["## The bars", "", "| bar | needed | " + " | ".join(name[e] for e in engines)]
        out[-1] += " |"
        out.append("| --- | --- |" + " --- |" * len(engines))
        for bar in bars:
            cells = []
            for engine in engines:
                got = bar.values.get(engine)
                mark = {True: "✅ ", False: "❌ MISSED ", None: "(no bar) "}
                cells.append("—" if got is None else mark[got[1]] + got[0])
            out.append(f"| {bar.text} | {bar.need} | " + " | ".join(cells) + " |")
        out += [
            "",
            'Ratios are judged on req/s. "By server CPU" is the same ratio from the workers\' '
            "CPU time per request, which other load on the machine moves less: where the two "
            "disagree, the machine was disturbed during the run.",
            "",
        ]
    else:
        out += ["The bars are judged only on a full run (1,000 and 1,000,000 cases).", ""]
    number = 0
    commands: list[str] = []
    for engine in engines:
        out += [f"## {name[engine]}", ""]
        out += [
            "| measure | cases | req/s | p50 ms | p99 ms | errors | server CPU ms/req | command |"
        ]
        out += ["| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for what in (*MEASURES, *INBOX_MEASURES, REVISE, TAGGED):
            for f in results.figures:
                if f.engine == engine and f.what == what:
                    number += 1
                    times = f" ({f.rounds} rounds)" if f.rounds > 1 else ""
                    commands.append(f"- **W{number}** `{f.command}`{times}")
                    label = f"{what}, {f.note}" if f.note else what
                    out.append(
                        f"| {label} | {f.cases:,} | {f.rps:,.0f} | {f.p50_ms:.1f} | "
                        f"{f.p99_ms:.1f} | {f.errors} | {f.cpu_ms:.2f} | W{number} |"
                    )
        out += ["", "| measure | cases | value | command |", "| --- | ---: | ---: | --- |"]
        for f in results.figures:
            if f.engine == engine and f.value is not None:
                number += 1
                commands.append(f"- **W{number}** `{f.command}`")
                shown = f.what.startswith(("OTLP", PYTEST_PLUGIN))
                note = f" ({f.note})" if f.note and shown else ""
                out.append(f"| {f.what} | {f.cases:,} | {f.value:.1f} {f.unit}{note} | W{number} |")
        out.append("")
    out += ["## Commands", ""]
    out += [
        "Run from the repository root with `.venv/bin` on the PATH; each server got "
        f"`KINDGI_SECRET_KEY` too. `$TOKEN`, `$SESSION` (the session cookie after signing in at "
        f"/login) and `$CURSOR` (walked {DEEP:,} cases deep, 100 a page, or as deep as the set "
        "allows, then on a case at a time to a page as heavy as the first, ±2%) come from the "
        "demo's credentials; `$NONCE` is new for each wrk run, and each "
        "request adds its own number, so every Idempotency-Key is fresh. `$PORT_n` is server "
        "Sn's port."
        + (
            " Each PostgreSQL database had `VACUUM (ANALYZE)` after its build (not timed), as "
            "autovacuum would soon have done, so that it does not run during the measures."
            if "postgresql" in engines
            else ""
        ),
        "",
    ]
    out += [f"- **S{i}** `{cmd}`" for i, cmd in enumerate(results.servers, 1)]
    out += ["", *commands, ""]
    return "\n".join(out)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="1,000 cases, 1 s a figure")
    parser.add_argument("--engines", default="sqlite,postgresql", help="sqlite,postgresql")
    parser.add_argument("--postgres", default=POSTGRES, help="a PostgreSQL server's URL")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    # 2 s a round: in 1 s rounds a ratio of the same code moved by a tenth between two runs
    parser.add_argument("--seconds", type=int, default=2, help="wrk's time for each round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of every measure")
    parser.add_argument("--warmup", type=int, default=1, help="wrk's warm-up before the first")
    parser.add_argument("--out", type=Path, default=BENCH / "results.md")
    parser.add_argument("--workdir", type=Path, default=BENCH / "out")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument(
        "--only",
        choices=("all", "inbox", "otlp", "bfcl", "revise", "quick", "quick-scale"),
        default="all",
        help="inbox: only the runs inbox and retention, on their own worlds; otlp: only the "
        "OTLP exports (smallest size); bfcl: only grading BFCL's cases (smallest size); "
        "revise: only revising cases (the first size); quick: only the quick runs' estimates "
        "(bench/quick.py); quick-scale: a quick run's start, the set's health and a full run's "
        "end (the first size)",
    )
    args = parser.parse_args(argv)
    # Stopped by SIGTERM or Ctrl-C (even where a shell started it with SIGINT ignored), it still
    # stops its servers and drops its databases on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.smoke:
        args.sizes, args.seconds, args.rounds, args.warmup = "1000", 1, 1, 0
    args.sizes = [int(n) for n in args.sizes.split(",")]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.only not in ("quick", "quick-scale"):
        ensure_wrk()

    started, clock = datetime.now(UTC), time.monotonic()
    load_start = os.getloadavg()[0]
    log(f"load average {os.getloadavg()}; engines {engines}; sizes {args.sizes}")
    results = Results()
    only = {
        "otlp": run_otlp_only,
        "bfcl": run_bfcl_only,
        "revise": run_revise_only,
        "quick": run_quick_only,
        "quick-scale": run_quick_scale,
    }
    for engine in engines:
        only.get(args.only, run_engine)(engine, args, results)
    bars = judge(results, engines, args.sizes) if args.only in ("all", "inbox") else []
    # the bars of what this run measured (the full run measures OTLP too)
    section = "otlp" if args.only == "all" else args.only
    more = {"otlp": otlp_bars, "bfcl": bfcl_bars, "revise": revise_bars, "quick": quick_bars,
            "quick-scale": scale_bars}  # fmt: skip
    if not args.smoke and section in more:
        bars += more[section](results, engines)
    command = "python bench/run.py" + (" --smoke" if args.smoke else "")
    if argv:
        command = "python bench/run.py " + " ".join(argv)
    meta = {
        "engines": engines,
        "started": started.strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "took": time.monotonic() - clock,
        "machine": machine(engines, args.postgres),
        "load": (load_start, os.getloadavg()[0]),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "warmup": args.warmup,
    }
    report = render(results, bars, meta)
    print(report)
    args.out.write_text(report)
    log(f"wrote {args.out}")
    missed = [b.text for b in bars for got in b.values.values() if got[1] is False]
    errors = sum(f.errors or 0 for f in results.figures)
    if missed or errors:
        log(f"missed: {missed}; errors: {errors}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
