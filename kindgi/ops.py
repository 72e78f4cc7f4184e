"""The operator's routes: liveness and readiness probes for a load balancer or an orchestrator,
and the metrics for Prometheus. No sign-in, and no data of anyone's in any answer."""

from __future__ import annotations

from flask import Blueprint, Response, abort, current_app, jsonify, request

from . import service, telemetry

bp = Blueprint("ops", __name__)


@bp.get("/healthz")
def healthz():
    """The process serves (nothing else is touched)."""
    return jsonify(status="ok")


@bp.get("/readyz")
def readyz():
    """The database answers at the newest schema, and the judge's queue is reachable."""
    checks = service.readiness()
    ready = all(verdict == "ok" for verdict in checks.values())
    return jsonify(status="ready" if ready else "unready", checks=checks), 200 if ready else 503


@bp.get("/metrics")
def metrics() -> Response:
    if not current_app.config["METRICS"]:
        abort(404)
    service.require_metrics_token(request.headers.get("Authorization"))
    return telemetry.exposition(service.questions_waiting())
