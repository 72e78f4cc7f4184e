"""gunicorn's settings for Kindgi: a metrics directory that every worker of one master shares,
a worker timeout that a whole export fits in, and request lines long enough for every URL the
app makes.

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
if _NAMED and os.environ.get("KINDGI_METRICS_DIR_MADE") == _NAMED:
    _NAMED = None  # another master's own (a new master started by USR2 inherits it): not ours
_MADE = None if _NAMED else tempfile.mkdtemp(prefix=f"kindgi-metrics-{os.getpid()}-")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _NAMED or str(_MADE)
if _MADE:
    os.environ["KINDGI_METRICS_DIR_MADE"] = _MADE
# A sync worker tells the master it lives only between requests: an export of a whole test set
# (a million cases stream in about a minute) must not be cut as a hung worker
timeout = 300
# gunicorn answers a request line past its limit itself (414, an HTML page, before the app sees
# it), and its default (4094 bytes) is shorter than the cases list's longest URL: every filter
# at its longest (q and tool 200 characters, each of four UTF-8 bytes percent-encoded, addedBy
# and runId 64) and the longest cursor make a 7,471-byte request line (tests/test_errors.py
# builds it). So the line gets gunicorn's most, 8190 bytes; and a header field room for any URL
# that fits it with the longest scheme and host (a browser's Referer, htmx's HX-Current-URL).
limit_request_line = 8190
limit_request_field_size = limit_request_line + 512


def on_starting(server: Any) -> None:
    """Empty a named directory of an earlier master's numbers (once, not on a reload)."""
    folder = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    """A worker gone: its live gauges go with it (its counters stay in the sums)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    """Remove the directory if this master made it."""
    if _MADE:
        shutil.rmtree(_MADE, ignore_errors=True)
