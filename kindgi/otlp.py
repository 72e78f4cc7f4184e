"""OTLP/HTTP's wire format for traces: a body read into `ExportTraceServiceRequest`, and the
answers the OTLP specification gives (`ExportTraceServiceResponse`, `google.rpc.Status`), in
the encoding of the request. The messages are opentelemetry-proto's; nothing here parses
protobuf by hand. No Flask, no database.

OTLP/JSON is protobuf's JSON mapping but for the trace and span ids, which it writes as hex
(the mapping's bytes are base64): those are rewritten before the mapping reads the rest, so
ints for enums, int64 as strings or numbers and unknown fields (ignored) are the mapping's.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = (PROTOBUF, JSON)
# zlib's window bits for each Content-Encoding: gzip's header, zlib's (HTTP's "deflate")
_INFLATE = {"gzip": 31, "x-gzip": 31, "deflate": 15}
# The answer's gRPC code for each HTTP status, as OTLP/HTTP pairs them
_GRPC = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    409: code_pb2.ABORTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    422: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


class Unreadable(ValueError):
    """The body is not an export in its encoding (400)."""


class TooLarge(ValueError):
    """The body inflates past the limit (413)."""


class UnknownEncoding(ValueError):
    """A Content-Encoding other than gzip, deflate or none (415)."""


def inflate(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body as sent before compression; never inflated past `limit` bytes (a gzip bomb
    stops there), so what is past it is refused, not read."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in _INFLATE:
        raise UnknownEncoding(encoding)
    out = bytearray()
    rest = body
    while rest:  # gzip may have several members, one after another
        stream = zlib.decompressobj(_INFLATE[encoding])
        try:
            out += stream.decompress(rest, limit + 1 - len(out))
        except zlib.error:
            raise Unreadable("The body is not valid compressed data.") from None
        if len(out) > limit:
            raise TooLarge()
        if not stream.eof:
            raise Unreadable("The compressed body is cut short.")
        rest = stream.unused_data
    return bytes(out)


def decode(data: bytes, encoding: str) -> ExportTraceServiceRequest:
    """An export from its body, protobuf or OTLP/JSON (`encoding`, inflated already)."""
    if encoding == PROTOBUF:
        try:
            return ExportTraceServiceRequest.FromString(data)
        except (DecodeError, ValueError, RecursionError):
            raise Unreadable("The body is not an ExportTraceServiceRequest in protobuf.") from None
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        _ids_as_base64(doc)
        return json_format.ParseDict(doc, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (ValueError, TypeError, AttributeError, RecursionError, json_format.ParseError):
        raise Unreadable("The body is not an ExportTraceServiceRequest in OTLP/JSON.") from None


def _field(node: dict[str, Any], camel: str, snake: str) -> Any:
    return node.get(camel, node.get(snake))


def _ids_as_base64(doc: dict[str, Any]) -> None:
    """OTLP/JSON's hex trace and span ids (spans' and their links'), as protobuf's JSON
    mapping writes bytes: base64."""
    for resource in _field(doc, "resourceSpans", "resource_spans") or ():
        for scope in _field(resource, "scopeSpans", "scope_spans") or ():
            for span in _field(scope, "spans", "spans") or ():
                _hex_ids(span)
                for link in span.get("links") or ():
                    _hex_ids(link)


def _hex_ids(node: dict[str, Any]) -> None:
    for key in ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"):
        value = node.get(key)
        if isinstance(value, str) and value:
            try:
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise ValueError(f"{key} is not hex") from None


def answer(rejected: int, message: str, encoding: str) -> bytes:
    """`ExportTraceServiceResponse`: `partial_success` when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if encoding == PROTOBUF:
        return response.SerializeToString()
    return json.dumps(json_format.MessageToDict(response)).encode()


def status(error: Any, request_id: str, encoding: str) -> bytes:
    """A refusal (a `DomainError`) as `google.rpc.Status`: the gRPC code of its HTTP status,
    its message, and an `ErrorInfo` whose reason is its code (docs/errors.md), with the
    request id and its details' plain values."""
    code = _GRPC.get(error.status, code_pb2.INTERNAL)
    found = status_pb2.Status(code=code, message=error.message)
    metadata = {"requestId": request_id}
    for key, value in (error.details or {}).items():
        if isinstance(value, str | int):
            metadata[key] = str(value)
    info = error_details_pb2.ErrorInfo(reason=error.code, domain="kindgi", metadata=metadata)
    found.details.add().Pack(info)
    if encoding == PROTOBUF:
        return found.SerializeToString()
    return json.dumps(json_format.MessageToDict(found)).encode()


def encoding_of(mimetype: str) -> str:
    """The encoding an answer takes: the request's, JSON when it had none we read."""
    return PROTOBUF if mimetype == PROTOBUF else JSON
