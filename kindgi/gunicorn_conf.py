"""gunicorn's settings for Kindgi: a metrics directory that every worker of one master shares.

prometheus_client's multiprocess mode sums what each worker writes into `PROMETHEUS_MULTIPROC_DIR`
(kindgi/telemetry.py). The directory must be named before a worker imports the app, and emptied
when a master starts, so a scrape neither sees one worker's numbers nor an earlier master's. A
checkout's `gunicorn.conf.py` loads this by itself; an installed package names it:
`gunicorn -c python:kindgi.gunicorn_conf "kindgi:create_app()"`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_NAMED = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
_MADE = None if _NAMED else tempfile.mkdtemp(prefix="kindgi-metrics-")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _NAMED or str(_MADE)


def on_starting(server: Any) -> None:
    """Empty the directory of an earlier master's numbers (once, not on a reload)."""
    folder = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()


def on_exit(server: Any) -> None:
    """Remove the directory if this master made it."""
    if _MADE:
        shutil.rmtree(_MADE, ignore_errors=True)
