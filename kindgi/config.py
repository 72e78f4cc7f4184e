"""The app's defaults (each overridden by a `KINDGI_*` environment variable) and the shape of its
URLs."""

from __future__ import annotations

from typing import Any

API_PREFIX = "/v1"  # every JSON route lives under it; everything else is a page

DEFAULTS: dict[str, Any] = {
    "SECRET_KEY": None,  # None: a random key kept in the instance folder
    "MAX_CONTENT_LENGTH": 1024 * 1024,
    "DB_BUSY_TIMEOUT_MS": 5000,
    "DB_STATEMENT_TIMEOUT_MS": 15000,
    # PostgreSQL's statement_timeout for the few bulk statements: a freeze or a run's start
    # copies a test set's ids (a third of a million in a second or two, but never cut at 15 s)
    "DB_BULK_STATEMENT_TIMEOUT_MS": 300000,
    "IDEMPOTENCY_LEASE_SECONDS": 30,
    # Runs no case or correction was made from are deleted after this many days (`kindgi prune`)
    "RUN_RETENTION_DAYS": 30,
    "SESSION_COOKIE_HTTPONLY": True,
    "SESSION_COOKIE_SAMESITE": "Lax",
    "REMEMBER_COOKIE_HTTPONLY": True,
    "REMEMBER_COOKIE_SAMESITE": "Lax",
    "PERMANENT_SESSION_LIFETIME": 12 * 60 * 60,
    # The judge (docs/judge.md): unset URL, no judge, and answers stay ungraded
    "JUDGE_URL": None,  # an OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1
    "JUDGE_MODEL": None,
    "JUDGE_API_KEY": None,
    "JUDGE_CONCURRENCY": 8,  # calls in flight at once, per worker process
    "JUDGE_TIMEOUT": 30,  # seconds a call
    "JUDGE_TRIES": 4,
    # The judge's task queue: beside the database (SQLite or PostgreSQL), or Redis when named
    "QUEUE_URL": None,  # redis://host:6379/0
    "QUEUE_NAME": "kindgi",
    # Operating it (docs/deploy.md): /metrics (a bearer token guards it when set), and the logs
    "METRICS": True,
    "METRICS_TOKEN": None,
    "LOG_FORMAT": "text",  # text | json (one JSON object a line)
    "LOG_LEVEL": "INFO",
    # OTLP/HTTP traces (docs/design.md §10): the largest export once inflated, and how long a
    # span whose trace names no agent or project yet is held for its root
    "OTLP_MAX_BYTES": 16 * 1024 * 1024,
    "OTLP_HOLD_HOURS": 24,
}

# OTLP/HTTP's traces endpoint: its bodies are protobuf or OTLP/JSON, and its errors
# `google.rpc.Status` in the request's encoding (kindgi/otlp.py), not the JSON envelope
OTLP_TRACES_PATH = API_PREFIX + "/traces"

# The probes and the metrics: JSON answers, no session, no sign-in
OPS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def is_api(path: str) -> bool:
    """Whether a request path answers JSON (the API's, or an operator's probe) rather than pages."""
    return path == API_PREFIX or path.startswith(API_PREFIX + "/") or path in OPS_PATHS
