"""SQLite writers take turns on a lock file beside the database (kindgi/database.py): the turn
is given back even when many threads of a fresh process write at once, as a judge's worker's
threads do."""

from __future__ import annotations

import fcntl
import os
import threading
import time

from kindgi import database


def test_threads_writing_at_once_from_a_fresh_process_leave_the_lock_file_free(
    tmp_path, monkeypatch
):
    turns = database._WriterTurns(str(tmp_path / "kindgi.sqlite"), timeout_s=10)
    real_open = os.open

    def slow_open(*args, **kwargs):  # widen the window two first writers could share
        fd = real_open(*args, **kwargs)
        time.sleep(0.05)
        return fd

    monkeypatch.setattr(database.os, "open", slow_open)
    start, took = threading.Barrier(8), []

    def write() -> None:
        start.wait()
        began = time.monotonic()
        turns.take()
        time.sleep(0.01)  # the transaction
        turns.give_back()
        took.append(time.monotonic() - began)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other = real_open(str(tmp_path / "kindgi.sqlite.writers"), os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if a turn was never given back
    finally:
        os.close(other)
    # no writer waited out the timeout behind a lost turn (eight turns take about 0.5 s; the
    # margin is wide, so that a loaded host is never mistaken for a lost turn)
    assert max(took) < 5
