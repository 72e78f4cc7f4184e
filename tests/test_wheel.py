"""`pip install .` gives a whole app outside any checkout: pages, static files and migrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import requests
from live import ROOT, gunicorn_master


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_installed_wheel_migrates_loads_the_demo_and_serves_its_pages(tmp_path):
    wheels, site, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        ROOT,
        dict(os.environ),
    )
    (wheel,) = wheels.glob("kindgi-*.whl")
    run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        elsewhere,
        dict(os.environ),
    )

    database = f"sqlite:///{tmp_path / 'kindgi.sqlite'}"
    env = {
        **os.environ,
        "PYTHONPATH": str(site),  # the wheel's kindgi before any checkout's
        "KINDGI_SQLALCHEMY_DATABASE_URI": database,
        "KINDGI_SECRET_KEY": "wheel-secret",
    }
    where = run([sys.executable, "-c", "import kindgi; print(kindgi.__file__)"], elsewhere, env)
    assert Path(where.strip()).is_relative_to(site)
    flask = [sys.executable, "-m", "flask", "--app", "kindgi"]
    run([*flask, "db", "upgrade"], elsewhere, env)
    creds = json.loads(run([*flask, "kindgi", "demo", "--cases", "20", "--json"], elsewhere, env))

    log = tmp_path / "gunicorn.log"
    with gunicorn_master(
        database, log, workers=1, app="kindgi:create_app()", cwd=elsewhere, PYTHONPATH=str(site)
    ) as (_, base):
        login = requests.get(f"{base}/login", timeout=10)
        assert login.status_code == 200 and "Sign in" in login.text
        css = requests.get(f"{base}/static/style.css", timeout=10)
        assert css.status_code == 200 and css.content == (ROOT / "static/style.css").read_bytes()
        counts = requests.get(
            f"{base}/v1/agents/{creds['agentId']}/test-set",
            params={"projectId": creds["projectId"]},
            headers={"Authorization": f"Bearer {creds['token']}"},
            timeout=10,
        )
        assert counts.status_code == 200 and counts.json()["cases"]["active"] > 0
