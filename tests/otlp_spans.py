"""OTLP exports built in tests, as an SDK's exporter would send them: protobuf messages of
opentelemetry-proto, or their OTLP/JSON (protobuf's JSON mapping with hex ids)."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
T0 = 1_780_000_000_000_000_000  # a start time (ns): 2026-05-28


def value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, list | tuple):
        out = AnyValue()
        out.array_value.values.extend(value(x) for x in v)
        return out
    if isinstance(v, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(KeyValue(key=k, value=value(x)) for k, x in v.items())
        return out
    return AnyValue(string_value=str(v))


def span(
    trace: int,
    span_id: int,
    parent: int | None = None,
    *,
    name: str = "span",
    start: int = 0,
    error: str | None = None,
    **attrs: Any,
) -> Span:
    """A span of trace number `trace`; attributes by keyword, dots written as `__`."""
    out = Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        start_time_unix_nano=T0 + start * 1_000_000,
        end_time_unix_nano=T0 + start * 1_000_000 + 1_000_000,
    )
    for key, v in attrs.items():
        out.attributes.append(KeyValue(key=key.replace("__", "."), value=value(v)))
    if error is not None:
        out.status.code = Status.STATUS_CODE_ERROR
        out.status.message = error
    return out


def export(*spans: Span, **resource: Any) -> ExportTraceServiceRequest:
    """One resource (attributes by keyword, dots as `__`) with these spans."""
    request = ExportTraceServiceRequest()
    group = request.resource_spans.add()
    for key, v in resource.items():
        group.resource.attributes.append(KeyValue(key=key.replace("__", "."), value=value(v)))
    group.scope_spans.add().spans.extend(spans)
    return request


def as_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP/JSON of an export: protobuf's JSON mapping, ids in hex, enums as numbers."""
    doc = json_format.MessageToDict(request, use_integers_for_enums=True)
    for group in doc.get("resourceSpans", ()):
        for scope in group.get("scopeSpans", ()):
            for s in scope.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return doc


def json_body(request: ExportTraceServiceRequest) -> bytes:
    return json.dumps(as_json(request)).encode()


def agents_sdk_trace(trace: int, *, question: str = "What is the notice period?") -> list[Span]:
    """A trace shaped as the OpenAI Agents SDK's OpenInference instrumentation emitted it
    (tests/test_otlp_live.py runs the real one): a root with no input or output, two turns,
    a model call asking for two tools, both tools, then a model call answering."""
    system = {"message.role": "system", "message.content": "Be brief."}
    user = {"message.role": "user", "message.content": question}

    def messages(prefix: str, *msgs: dict[str, Any]) -> dict[str, Any]:
        flat = {f"{prefix}.{n}.{k}": v for n, m in enumerate(msgs) for k, v in m.items()}
        return {key.replace(".", "__"): v for key, v in flat.items()}

    asks = {
        "message.role": "assistant",
        "message.tool_calls.0.tool_call.id": "call_0",
        "message.tool_calls.0.tool_call.function.name": "lookup",
        "message.tool_calls.0.tool_call.function.arguments": '{"q": "notice period"}',
        "message.tool_calls.1.tool_call.id": "call_1",
        "message.tool_calls.1.tool_call.function.name": "lookup",
        "message.tool_calls.1.tool_call.function.arguments": '{"q": "holidays"}',
    }
    answer = {"message.role": "assistant", "message.content": "Thirty days."}
    llm = {"openinference__span__kind": "LLM", "llm__model_name": "fake"}
    tool = {"openinference__span__kind": "TOOL", "tool__name": "lookup"}
    return [
        span(trace, 1, name="Agent workflow", start=0, openinference__span__kind="AGENT"),
        span(trace, 2, 1, name="drafter", start=1, openinference__span__kind="AGENT"),
        span(trace, 3, 2, name="turn", start=2, openinference__span__kind="CHAIN"),
        span(
            trace,
            4,
            3,
            name="generation",
            start=3,
            **llm,
            **messages("llm.input_messages", system, user),
            **messages("llm.output_messages", asks),
        ),
        span(
            trace,
            5,
            3,
            name="lookup",
            start=4,
            **tool,
            input__value='{"q": "notice period"}',
            input__mime_type="application/json",
        ),
        span(
            trace,
            6,
            3,
            name="lookup",
            start=5,
            **tool,
            input__value='{"q": "holidays"}',
            input__mime_type="application/json",
        ),
        span(trace, 7, 2, name="turn", start=6, openinference__span__kind="CHAIN"),
        span(
            trace,
            8,
            7,
            name="generation",
            start=7,
            **llm,
            **messages("llm.input_messages", system, user, asks),
            **messages("llm.output_messages", answer),
        ),
    ]
