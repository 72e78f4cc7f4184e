"""Live servers for tests that need real processes (and for bench/soak.py): gunicorn masters on
the test's database; for the browser tests, a threaded server on a copy of the test world; and a
front that answers a server's clients with faults before it lets their requests through."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
from werkzeug.serving import make_server

from kindgi import world
from kindgi.database import db

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def threaded(app: Any, more: dict[str, Any]) -> Iterator[str]:
    """A live server (real HTTP, threads) for `app`, with `more` of a world file loaded into
    its database first; its base URL while the block runs."""
    with app.app_context():
        world.load(more)
        db.session.commit()
        db.session.remove()
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn(database_url: str, log_path: Path, workers: int = 4, **env: str) -> Iterator[str]:
    """A gunicorn master with `workers` processes serving the app on `database_url`; its base
    URL while the block runs, and always stopped (killed if it won't stop) afterwards."""
    with gunicorn_master(database_url, log_path, workers, **env) as (_master, base):
        yield base


@contextmanager
def gunicorn_master(
    database_url: str,
    log_path: Path,
    workers: int = 4,
    *,
    app: str = "app:app",
    cwd: Path = ROOT,
    config: str | None = None,
    **env: str,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """As `gunicorn`, with the master's process too (whose children are the workers); `app`
    and `cwd` say what it serves from where (the checkout's `app:app` unless told), `config`
    the settings it reads (`-c`; unless told, the `gunicorn.conf.py` of `cwd`, if any)."""
    port = free_port()
    environ = {
        **os.environ,
        "KINDGI_SQLALCHEMY_DATABASE_URI": database_url,
        "KINDGI_SECRET_KEY": "test-secret",
        # this checkout's kindgi (the shared virtualenv's editable install may be another's):
        # gunicorn.conf.py imports it before gunicorn puts `cwd` on the path
        "PYTHONPATH": str(ROOT),
        **env,
    }
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                str(ROOT / ".venv/bin/gunicorn"),
                "-w",
                str(workers),
                "-b",
                f"127.0.0.1:{port}",
                *(["-c", config] if config else []),
                app,
            ],
            cwd=cwd,
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not answer in 60 s:\n{log_path.read_text()}")
            try:
                requests.get(base + "/v1/openapi.json", timeout=2).raise_for_status()
                break
            except requests.RequestException:  # not listening yet, or a worker still booting
                time.sleep(0.1)
        yield proc, base
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started in a session of its own: asked first, its group killed if it
    won't go in 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# A fault: when it strikes ("before" the server sees the request, "after" it answered: the answer
# lost), and the error answered instead; or ("drop", 0, "") for a connection closed unanswered
Fault = tuple[str, int, str]
PASSED_HEADERS = ("Content-Type", "Retry-After", "Location", "X-Request-Id", "Idempotent-Replayed")


class Front:
    """A real HTTP server in front of `target` (a base URL): each request it gets takes the next
    of `faults`, and once they are spent it passes requests through. `seen` has every request's
    method, path and Idempotency-Key, in order, and `bodies` each one's body."""

    def __init__(self, target: str, faults: list[Fault]) -> None:
        self.target, self.faults = target, list(faults)
        self.seen: list[tuple[str, str, str | None]] = []
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        front = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with front.lock:
                    front.seen.append((self.command, self.path, self.headers["Idempotency-Key"]))
                    front.bodies.append(body)
                    when, status, code = front.faults.pop(0) if front.faults else ("", 0, "")
                if when == "drop":
                    self.close_connection = True
                    return
                if when != "before":
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    url = front.target + self.path
                    resp = requests.request(
                        self.command, url, data=body, headers=headers, timeout=30
                    )
                if when:
                    error = {"code": code, "message": "A faulty front.", "requestId": "front"}
                    headers = {"Retry-After": "0", "Content-Type": "application/json"}
                    self._answer(status, headers, json.dumps({"error": error}).encode())
                else:
                    kept = {k: resp.headers[k] for k in PASSED_HEADERS if k in resp.headers}
                    self._answer(resp.status_code, kept, resp.content)

            def _answer(self, status: int, headers: dict[str, str], content: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PATCH = do_DELETE = _any

            def log_message(self, *args: object) -> None:
                """Quiet."""

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@contextmanager
def front(target: str, faults: list[Fault]) -> Iterator[Front]:
    """A `Front` to `target` serving while the block runs."""
    proxy = Front(target, faults)
    thread = threading.Thread(target=proxy.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.httpd.shutdown()
        proxy.httpd.server_close()
