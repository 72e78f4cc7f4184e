"""The practical limit of an OTLP/HTTP traces endpoint: Flask and opentelemetry-proto alone.

The bench serves this beside Kindgi, with the same gunicorn and workers, and sends both the same
exports. It parses each body into an `ExportTraceServiceRequest` and discards it: no token, no
database, no mapping. What is left is what any Flask app on this machine pays to take an export.

    gunicorn --workers 2 --chdir bench otlp_raw_app:app

POST /v1/traces answers an empty ExportTraceServiceResponse; GET /healthz says it is up.
"""

from __future__ import annotations

from flask import Flask, Response, request
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

app = Flask(__name__)
EMPTY = ExportTraceServiceResponse().SerializeToString()


@app.post("/v1/traces")
def traces() -> Response:
    ExportTraceServiceRequest.FromString(request.get_data())
    return Response(EMPTY, mimetype="application/x-protobuf")


@app.get("/healthz")
def healthz() -> str:
    return "ok"
