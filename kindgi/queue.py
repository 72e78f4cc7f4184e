"""The judge's task queue: huey, its storage beside the database (a SQLite file beside a SQLite
database, tables in the PostgreSQL database) or Redis when `KINDGI_QUEUE_URL` names one.

Tasks carry a question's key only; what a worker does with one is `service.judging.ask`.
`flask --app app kindgi worker` runs the consumer: threads, since a judge's call waits on I/O.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flask import Flask, current_app
from sqlalchemy.engine import make_url

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
        from .service import judging

        with app.app_context():
            judging.ask(question_pk)

    @huey.periodic_task(crontab(minute="*"), name="requeue")
    def requeue() -> None:
        from .service import judging

        with app.app_context():
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


def queue() -> Any:
    """The current app's queue, made at its first use (a PostgreSQL queue connects then)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    if "kindgi.queue" not in app.extensions:
        app.extensions["kindgi.queue"] = make(app)
    return app.extensions["kindgi.queue"]


def enqueue(question_pks: list[int], after: float = 0) -> None:
    """Ask the workers to put these questions to the judge (`after` seconds from now). Best
    effort: a question the queue could not take stays pending, and is queued again when a
    worker starts or each minute."""
    try:
        for pk in question_pks:
            if after:
                queue().ask.schedule((pk,), delay=after + 0.5)
            else:
                queue().ask(pk)
    except Exception:  # a queue that is down must not fail the request
        log.exception("could not queue %d judge questions; a worker will", len(question_pks))
