"""What the app tells the people who run it: Prometheus metrics and a log line per request.

Metrics live in prometheus_client's registry. Under gunicorn every worker writes its numbers to
files in `PROMETHEUS_MULTIPROC_DIR` (made fresh for each master by `kindgi/gunicorn_conf.py`) and
a scrape of any worker sums them all, so a counter never jumps between scrapes; in one process
(`flask run`, the tests' client) the process's own registry answers. The judge's workers are other
processes, with their own endpoint (`kindgi worker --metrics-port`, guarded by the same token).

Logs: `KINDGI_LOG_FORMAT=json` writes each record as one JSON line, with the request's id; text
is the default. A request's line says who called and how it ended, never a secret, a token, a
password or a body; an error's line names the exception's type and where it was raised, never its
message (which may quote SQL parameters).
"""

from __future__ import annotations

import hmac
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import orjson
import prometheus_client as prom
from flask import Flask, Response, g, has_request_context, request
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

log = logging.getLogger("kindgi")
access = logging.getLogger("kindgi.requests")

REQUESTS = prom.Counter(
    "kindgi_http_requests",
    "Requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
LATENCY = prom.Histogram(
    "kindgi_http_request_duration_seconds",
    "Time to answer a request (to its first byte for a streamed one), by route template.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15),
)
REFUSALS = prom.Counter(
    "kindgi_errors",
    "Refusals and failures answered, by error code: database-busy, forbidden, internal, …",
    ["code"],
)
LOGINS_THROTTLED = prom.Counter(
    "kindgi_logins_throttled", "Sign-ins refused for too many failures with one email."
)
REPLAYS = prom.Counter(
    "kindgi_idempotent_replays", "Writes answered again from their Idempotency-Key's first answer."
)
RESULTS = prom.Counter(
    "kindgi_test_run_results", "Results test runs took in (a batch sent again counts once)."
)
JUDGE_CALLS = prom.Counter(
    "kindgi_judge_calls", "Questions put to the judge, by the verdict's outcome.", ["outcome"]
)
JUDGE_LATENCY = prom.Histogram(
    "kindgi_judge_call_duration_seconds",
    "Time the judge took to answer a question, its retries included.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
JUDGE_CACHE_HITS = prom.Counter(
    "kindgi_judge_cache_hits", "Questions answered from the verdicts kept, without a call."
)


def exposition(queue_depth: int | None) -> Response:
    """The metrics in Prometheus' text format: every worker's (or this process's), then the
    judge's queue depth as read now (left out when the database could not say)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        base = prom.CollectorRegistry()
        MultiProcessCollector(base)
    else:
        base = prom.REGISTRY
    body = prom.generate_latest(base)
    if queue_depth is not None:  # a family of its own: a Gauge would keep a file per worker
        now = GaugeMetricFamily(
            "kindgi_judge_questions_waiting",
            "Questions test runs put to the judge, not yet answered (the judge's queue depth).",
            value=queue_depth,
        )
        body += prom.generate_latest(_Once(now))
    return Response(body, mimetype=prom.CONTENT_TYPE_LATEST)


class _Once:
    """A registry-like holder of metric families read once, for `generate_latest`."""

    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def serve_worker_metrics(host: str, port: int, token: str | None) -> None:
    """The judge worker's metrics on their own port, in a thread (a worker is one process, so
    its registry is the whole truth); the bearer token guards them as it guards /metrics."""
    wanted = f"Bearer {token}".encode() if token else None
    metrics = prom.make_wsgi_app()

    def guarded(environ: dict[str, Any], start_response: Any) -> Any:
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if wanted is not None and not hmac.compare_digest(given, wanted):
            start_response("401 Unauthorized", [("WWW-Authenticate", "Bearer")])
            return [b"/metrics needs the metrics token as a bearer token.\n"]
        return metrics(environ, start_response)

    server = make_server(host, port, guarded, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        """Scrapes are not logged (a line every few seconds says nothing)."""


# ---------------------------------------------------------------- the request's line and numbers


def _caller() -> dict[str, str] | None:
    """Who called, as recorded of them (a token's public id, never its secret)."""
    caller = g.get("caller") or g.get("_login_user")
    actor = getattr(caller, "actor", None)
    return actor if isinstance(actor, dict) else None


# HTTP's methods (RFC 9110 and PATCH); any other a caller makes up is counted as one `other`,
# or each would be a new series. Routes are templates (`(unmatched)` for a URL no route has),
# statuses the app's own, codes the domain's: every label is bounded by the code, not by callers.
METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


@lru_cache(maxsize=4096)
def _children(route: str, method: str, status: int) -> tuple[Any, Any]:
    """A route's request counter and latency histogram: `labels()` checks and locks at every
    call, on the hot path of every request; routes and statuses are few."""
    return REQUESTS.labels(route, method, str(status)), LATENCY.labels(route, method)


def register(app: Flask) -> None:
    """Time every request, count it, and log its line once its answer is final (register before
    the request boundary's hooks: Flask runs the later-registered `after_request` first, and
    the boundary's commit can still turn an answer into a 503)."""
    metrics = bool(app.config["METRICS"])
    fielded = str(app.config["LOG_FORMAT"]).lower() == "json"  # text shows the message alone

    @app.before_request
    def _start() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def _answered(response: Response) -> Response:
        took = time.perf_counter() - g.get("started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule else "(unmatched)"
        code = g.get("error_code")
        if metrics:
            method = request.method if request.method in METHODS else "other"
            counted, timed = _children(route, method, response.status_code)
            counted.inc()
            timed.observe(took)
            if code:
                REFUSALS.labels(code).inc()
            if g.get("replayed"):
                REPLAYS.inc()
        if not access.isEnabledFor(logging.INFO):
            return response
        fields = None
        if fielded:
            fields = {
                "event": "request",
                "method": request.method,
                "route": route,
                "status": response.status_code,
                "durationMs": round(took * 1000, 2),
                "caller": _caller(),
                **({"code": code} if code else {}),
            }
        access.info(
            "%s %s %s %.1f ms",
            request.method,
            route,
            response.status_code,
            took * 1000,
            extra={"fields": fields},
        )
        return response


# ---------------------------------------------------------------- logs


class JSONLines(logging.Formatter):
    """A record as one JSON line: time, level, request id, message, the record's fields; an
    exception as its type and where it was raised."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if has_request_context() and "request_id" in g:
            line["requestId"] = g.request_id
        fields = getattr(record, "fields", None)
        if fields:
            line.update(fields)
        else:
            line["event"] = "log"
            line["message"] = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            line["event"] = "error"
            line["error"] = {"type": record.exc_info[0].__name__, "where": _where(record)}
        return orjson.dumps(line, default=str).decode()


def _where(record: logging.LogRecord) -> str:
    """The innermost frame of the app's own code the exception passed through."""
    frames = traceback.extract_tb(record.exc_info[2]) if record.exc_info else []
    ours = [f for f in frames if f"{os.sep}kindgi{os.sep}" in f.filename] or frames
    if not ours:
        return ""
    frame = ours[-1]
    return f"{frame.filename.rsplit(os.sep + 'kindgi' + os.sep, 1)[-1]}:{frame.lineno} {frame.name}"


class Text(logging.Formatter):
    """A record for a person: time, level, request id, message; an exception as its type and
    where it was raised, as in JSON (a traceback's lines may quote secrets)."""

    def format(self, record: logging.LogRecord) -> str:
        rid = g.get("request_id", "-") if has_request_context() else "-"
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line = f"{stamp} {record.levelname} [{rid}] {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[0] is not None:
            line += f" ({record.exc_info[0].__name__} at {_where(record)})"
        return line


HANDLER_NAME = "kindgi"


def configure_logging(app: Flask) -> None:
    """The `kindgi` loggers' one handler, on stderr, in the configured format (set once a
    process; the app made last decides). huey's warnings and errors (its consumer's, in the
    judge's workers) go through it too, so none carries a traceback."""
    style = str(app.config["LOG_FORMAT"]).lower()
    if style not in {"text", "json"}:
        raise ValueError(f"KINDGI_LOG_FORMAT must be text or json, not {style!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.name = HANDLER_NAME
    handler.setFormatter(JSONLines() if style == "json" else Text())
    log.setLevel(str(app.config["LOG_LEVEL"]).upper())
    huey = logging.getLogger("huey")
    huey.setLevel(max(log.level, logging.WARNING))  # not a line per task
    for logger in (log, huey):
        for old in [h for h in logger.handlers if h.name == HANDLER_NAME]:
            logger.removeHandler(old)
        logger.addHandler(handler)
