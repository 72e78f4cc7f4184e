"""Live servers for tests that need real processes (and for bench/soak.py): gunicorn masters on
the test's database; and for the browser tests, a threaded server on a copy of the test world."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
