"""The judge's task queue: huey, its storage beside the database (a SQLite file beside a SQLite
database, tables in the PostgreSQL database) or Redis when `KINDGI_QUEUE_URL` names one.

The queue stands on the service, never the other way round: its tasks run `service.judging`'s
`ask` and `requeue`, and the service hands questions to it through the interface it names,
`service.common.Queue`, which `register` puts on the app. Tasks carry a question's key only.
`flask --app app kindgi worker` runs the consumer: threads, since a judge's call waits on I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy.engine import make_url

from .service import judging
from .service.common import QUEUE

log = logging.getLogger("kindgi")


def make(app: Flask) -> Any:
    """The app's queue (a `huey.Huey`), by its configuration, with the judge's tasks registered
    on it. huey (and redis) are imported at the first use, not by every web worker."""
    from huey import Huey, PostgresHuey, RedisHuey, SqliteHuey, crontab

    name, url = app.config["QUEUE_NAME"], app.config["QUEUE_URL"]
    database = make_url(app.config["SQLALCHEMY_DATABASE_URI"])
    if url:
        huey: Huey = RedisHuey(name, url=url)
    elif database.get_backend_name() == "postgresql":
        dsn = database.set(drivername="postgresql").render_as_string(hide_password=False)
        huey = PostgresHuey(name, dsn=dsn)
    else:  # a file beside the database's
        file = database.database
        beside = f"{file}.queue" if file and file != ":memory:" else None
        huey = SqliteHuey(name, filename=beside or str(Path(app.instance_path) / "queue.sqlite"))

    @huey.task(name="ask")
    def ask(question_pk: int) -> None:
        with app.app_context(), logged("a judge's question failed; asked again later"):
            judging.ask(question_pk)

    @huey.periodic_task(crontab(minute="*"), name="requeue")
    def requeue() -> None:
        with app.app_context(), logged("queueing the judge's questions again failed"):
            judging.requeue()

    @huey.periodic_task(crontab(minute="30", hour="3"), name="prune")
    def prune() -> None:
        """Once a day (03:30 UTC), retention: the runs no case was made from, once old."""
        from .service import retention

        with app.app_context():
            pruned = retention.prune_runs()
            log.info("pruned %d runs in %d batches", pruned.runs, pruned.batches)

    huey.ask = ask  # type: ignore[attr-defined]
    return huey


@contextmanager
def logged(what: str) -> Iterator[None]:
    """A task's failure logged as the web's are, by its type and where it was raised (never its
    message or traceback, which quote SQL and its parameters), not by huey with its traceback. A
    question that failed keeps its lease: it is asked again once the lease runs out."""
    try:
        yield
    except Exception:
        log.exception(what)


class TaskQueue:
    """One app's queue (`service.common.Queue`): huey, made at its first use (a PostgreSQL queue
    connects then)."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self._huey: Any = None

    @property
    def huey(self) -> Any:
        """The `huey.Huey`, made now if it is not yet."""
        if self._huey is None:
            self._huey = make(self.app)
        return self._huey

    def enqueue(self, question_pks: list[int], after: float = 0) -> None:
        """Ask the workers to put these questions to the judge (`after` seconds from now). Best
        effort: a question the queue could not take stays pending, and is queued again when a
        worker starts or each minute."""
        try:
            if after:
                for pk in question_pks:
                    self.huey.ask.schedule((pk,), delay=after + 0.5)
            else:
                put_all(self.huey, [self.huey.ask.s(pk) for pk in question_pks])
        except Exception:  # a queue that is down must not fail the request
            log.exception("could not queue %d judge questions; a worker will", len(question_pks))

    def size(self) -> int:
        """Tasks waiting in the queue's storage (which raises when it can't be reached)."""
        return int(self.huey.storage.queue_size())


def put_all(huey: Any, tasks: list[Any]) -> None:
    """Queue `tasks` now. On PostgreSQL in one transaction with one notification: huey's own
    `enqueue` commits each task on its own (a WAL flush apiece, some 4 ms), which held a
    results request of 500 answers 2 s past its commit."""
    from huey import PostgresHuey

    if not tasks:
        return
    if not isinstance(huey, PostgresHuey):
        for task in tasks:
            huey.enqueue(task)
        return
    storage = huey.storage
    rows = [(storage.name, huey.serialize_task(task), task.priority or 0) for task in tasks]
    with storage.db(commit=True) as cursor:
        cursor.executemany(
            f"insert into {storage.table_task} (queue, data, priority) values (%s, %s, %s)", rows
        )
        cursor.execute("select pg_notify(%s, %s)", (storage.channel, ""))


def register(app: Flask) -> None:
    """Give the app its queue, where the service finds it."""
    app.extensions[QUEUE] = TaskQueue(app)


def of(app: Flask) -> TaskQueue:
    """The app's queue (the worker's consumer runs its huey)."""
    queue: TaskQueue = app.extensions[QUEUE]
    return queue
