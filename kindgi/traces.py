"""From OpenTelemetry spans to a run: the pure rules of docs/design.md §10 (no Flask, no
database).

An export's spans are first read into `SpanFacts` (`read_export`): per span only what a run is
made of, in the conventions the frameworks emit (OpenInference, and OpenTelemetry's GenAI
semantic conventions), plus where its resource or its root places it. The service keeps those
facts, so a trace whose spans come over many requests, in any order, is assembled again from
all of them (`assemble`): the same spans always make the same run.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

# Where a run belongs: resource attributes, or the same on the trace's root span
AGENT, PROJECT, VERSION = "kindgi.agent.id", "kindgi.project.id", "kindgi.agent.version"
SERVICE_VERSION = "service.version"  # the version when kindgi.agent.version is not given
UNVERSIONED = "unversioned"
# OpenInference
OI_KIND, OI_INPUT, OI_INPUT_MIME = "openinference.span.kind", "input.value", "input.mime_type"
OI_OUTPUT, OI_OUTPUT_MIME = "output.value", "output.mime_type"
OI_TOOL_NAME, OI_TOOL_CALL_ID = "tool.name", "tool_call.id"
OI_INPUT_MESSAGES, OI_OUTPUT_MESSAGES = "llm.input_messages.", "llm.output_messages."
# OpenTelemetry GenAI
GENAI_OPERATION = "gen_ai.operation.name"
GENAI_INPUT, GENAI_OUTPUT = "gen_ai.input.messages", "gen_ai.output.messages"
GENAI_TOOL_NAME, GENAI_TOOL_ARGS = "gen_ai.tool.name", "gen_ai.tool.call.arguments"
GENAI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GENAI_LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})

_WANTED = frozenset(
    {
        AGENT, PROJECT, VERSION, SERVICE_VERSION, OI_KIND, OI_INPUT, OI_INPUT_MIME, OI_OUTPUT,
        OI_OUTPUT_MIME, OI_TOOL_NAME, OI_TOOL_CALL_ID, GENAI_OPERATION, GENAI_OUTPUT,
        GENAI_TOOL_NAME, GENAI_TOOL_ARGS, GENAI_TOOL_CALL_ID,
    }
)  # fmt: skip
_JSON_MIME = "application/json"


class SpanFacts(NamedTuple):
    """One span as a run needs it (a tuple: an export makes hundreds). `facts` is plain JSON
    (kept as it is by the service): `place` (agent, project, version named by its resource
    or, on a root, by itself), `root` (its input, output and error), `llm` (its input
    messages, output message and the tool calls that asks for) or `tool` (name, args, id)."""

    trace_id: str  # hex
    span_id: str  # hex
    parent_id: str | None
    start_ns: int
    facts: dict[str, Any]

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    @property
    def telling(self) -> bool:
        """Whether the span says anything a run is made of (a root, a model call, a tool):
        the others (an agent's turns, a chain) need not be kept once their trace is placed."""
        return self.is_root or "llm" in self.facts or "tool" in self.facts


@dataclass
class Export:
    """An export read: its spans by trace (hex id), and the spans it could not read."""

    traces: dict[str, list[SpanFacts]] = field(default_factory=dict)
    unreadable: int = 0


@dataclass(frozen=True)
class Assembly:
    """What a trace's spans make of a run: `finished` once its root has come."""

    input: Any
    output: Any
    calls: list[dict[str, Any]]
    finished: bool
    error: str | None
    start_ns: int
    version: str
    place: tuple[str, str] | None  # (agent id, project id)


def run_id(tenant_id: str, trace_id: str) -> str:
    """A run's id from its tenant and its trace: the same trace always makes the same run, and
    the same trace id of two tenants two runs. As long as the ids the server makes (`run-` and
    20 hex digits)."""
    digest = hashlib.sha256(f"kindgi-otlp\0{tenant_id}\0{trace_id}".encode()).hexdigest()
    return f"run-{digest[:20]}"


# ---------------------------------------------------------------- reading an export


def read_export(export: ExportTraceServiceRequest) -> Export:
    """Every span's facts, by trace; a span without a trace id of 16 bytes and a span id of 8
    is unreadable (counted, never kept).

    Of a trace's model calls only the first one's input can be a run's, and the first of all
    is the first of those in its own export, whichever export brings it: only that one's input
    messages (a whole conversation, in each later call) are converted. Each attribute is read
    out of protobuf once (`_read_attributes`): reading is most of an export's cost."""
    out = Export()
    read = []
    first: dict[bytes, tuple[int, bytes]] = {}  # a trace's first model call here
    for resource_spans in export.resource_spans:
        resource, _ = _read_attributes(resource_spans.resource.attributes)
        placed = _place(resource, {})
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id = span.trace_id, span.span_id
                if len(trace_id) != 16 or len(span_id) != 8:
                    out.unreadable += 1
                    continue
                attrs, inputs = _read_attributes(span.attributes)
                read.append((span, resource, placed, attrs, inputs))
                if _is_llm(attrs):
                    at = (span.start_time_unix_nano, span_id)
                    first[trace_id] = min(first.get(trace_id, at), at)
    for span, resource, placed, attrs, inputs in read:
        root = not span.parent_span_id
        if not (root or first.get(span.trace_id) == (span.start_time_unix_nano, span.span_id)):
            inputs = ()
        place = _place(resource, attrs) if root else placed
        facts = span_facts(span, place, attrs, {kv.key: _any(kv.value) for kv in inputs})
        out.traces.setdefault(facts.trace_id, []).append(facts)
    return out


def _is_llm(attrs: dict[str, Any]) -> bool:
    return attrs.get(OI_KIND) == "LLM" or attrs.get(GENAI_OPERATION) in GENAI_LLM_OPERATIONS


def span_facts(
    span: Span,
    place: dict[str, str],
    attrs: dict[str, Any],
    inputs: dict[str, Any] | None = None,
) -> SpanFacts:
    """One span's facts (see `SpanFacts`) from where it is placed, its attributes, and the
    input messages of a model call or root where they were read (`_attributes`)."""
    facts: dict[str, Any] = {"place": place} if place else {}
    if attrs.get(OI_KIND) == "TOOL" or attrs.get(GENAI_OPERATION) == "execute_tool":
        facts["tool"] = _tool(span, attrs)
    elif _is_llm(attrs):
        facts["llm"] = _llm(attrs, inputs or {})
    if not span.parent_span_id:
        facts["root"] = _root(span, {**attrs, **(inputs or {})})
    return SpanFacts(
        span.trace_id.hex(),
        span.span_id.hex(),
        span.parent_span_id.hex() if span.parent_span_id else None,
        int(span.start_time_unix_nano),
        facts,
    )


def _place(resource: dict[str, Any], own: dict[str, Any]) -> dict[str, str]:
    """Agent, project and version as the resource names them, else (on a root) the span."""
    place = {}
    for name, key in (("agent", AGENT), ("project", PROJECT), ("version", VERSION)):
        value = resource.get(key, own.get(key))
        if value is not None:
            place[name] = str(value)
    if "version" not in place and resource.get(SERVICE_VERSION) is not None:
        place["version"] = str(resource[SERVICE_VERSION])
    if "project" in place:
        place["project"] = place["project"].lower()
    return place


def _root(span: Span, attrs: dict[str, Any]) -> dict[str, Any]:
    """A root's own input, output and error, where it has them."""
    root: dict[str, Any] = {}
    if OI_INPUT in attrs:
        root["input"] = _value(attrs[OI_INPUT], attrs.get(OI_INPUT_MIME))
    elif GENAI_INPUT in attrs:
        root["input"] = _genai_messages(attrs[GENAI_INPUT])
    if OI_OUTPUT in attrs:
        root["output"] = _value(attrs[OI_OUTPUT], attrs.get(OI_OUTPUT_MIME))
    elif GENAI_OUTPUT in attrs:
        root["output"] = _last(_genai_messages(attrs[GENAI_OUTPUT]))
    if span.status.code == Status.STATUS_CODE_ERROR:
        root["error"] = _clean(span.status.message) or _exception(span) or "The run failed."
    return root


def _exception(span: Span) -> str | None:
    """The message of the last exception recorded on the span, when its status has none."""
    for event in reversed(span.events):
        if event.name == "exception":
            attrs = {kv.key: _any(kv.value) for kv in event.attributes}
            text = ": ".join(
                str(attrs[k]) for k in ("exception.type", "exception.message") if attrs.get(k)
            )
            if text:
                return _clean(text)
    return None


def _llm(attrs: dict[str, Any], read: dict[str, Any]) -> dict[str, Any]:
    """A model call: its input messages (where they were `read`), its output message, and
    the tool calls it asked for."""
    if GENAI_INPUT in read or GENAI_OUTPUT in attrs:
        inputs = _genai_messages(read.get(GENAI_INPUT))
        outputs = _genai_messages(attrs.get(GENAI_OUTPUT))
    else:
        inputs = _oi_messages(read, OI_INPUT_MESSAGES)
        outputs = _oi_messages(attrs, OI_OUTPUT_MESSAGES)
    calls = [call for message in outputs for call in message.get("toolCalls", ())]
    return {"input": inputs or None, "output": _last(outputs), "calls": calls}


def _tool(span: Span, attrs: dict[str, Any]) -> dict[str, Any]:
    """A tool's execution: its name and arguments (and the call's id, where there is one)."""
    if attrs.get(GENAI_OPERATION) == "execute_tool":
        name, args, call_id = GENAI_TOOL_NAME, GENAI_TOOL_ARGS, GENAI_TOOL_CALL_ID
    else:
        name, args, call_id = OI_TOOL_NAME, OI_INPUT, OI_TOOL_CALL_ID
    tool = {"tool": str(attrs.get(name) or _clean(span.name)), "args": _args(attrs.get(args))}
    if attrs.get(call_id) is not None:
        tool["id"] = str(attrs[call_id])
    return tool


# ---------------------------------------------------------------- messages


def _message(role: Any, texts: list[str], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A message as runs keep it: `{role, content?, toolCalls?}`."""
    message: dict[str, Any] = {"role": role}
    if texts:
        message["content"] = texts[0] if len(texts) == 1 else "\n".join(map(str, texts))
    if calls:
        message["toolCalls"] = calls
    return message


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    call = {"tool": str(name or ""), "args": _args(arguments)}
    if call_id is not None:
        call["id"] = str(call_id)
    return call


def _genai_messages(value: Any) -> list[dict[str, Any]]:
    """GenAI's messages (a JSON string, or structured): `{role, parts: [{type, …}]}`, its
    text, tool-call and tool-call-response parts."""
    messages = _json(value) if isinstance(value, str) else value
    out = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        texts, calls = [], []
        for part in message.get("parts") or ():
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and part.get("content") is not None:
                texts.append(part["content"])
            elif kind == "tool_call":
                calls.append(_call(part.get("id"), part.get("name"), part.get("arguments")))
            elif kind == "tool_call_response" and part.get("response") is not None:
                texts.append(part["response"])
        out.append(_message(message.get("role"), texts, calls))
    return out


def _oi_messages(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's messages, flattened as `{prefix}{n}.message.…` keys: `role`, `content`
    (or its `contents.{m}.message_content.text` parts) and `tool_calls.{m}.tool_call.…`."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        said = _message_key(prefix, key)
        if said is None:
            continue
        index, what, at, name = said
        message = found.get(index)
        if message is None:
            message = found[index] = {"parts": {}, "calls": {}}
        if what == "part":
            if value is not None:
                message["parts"][at] = value
        elif what == "call":
            message["calls"].setdefault(at, {})[name] = value
        elif what:
            message[what] = value
    out = []
    for _, message in sorted(found.items()):
        if "message.content" in message:
            texts = [message["message.content"]]
        else:
            texts = [text for _, text in sorted(message["parts"].items())]
        calls = [
            _call(c.get("tool_call.id"), c.get("tool_call.function.name"),
                  c.get("tool_call.function.arguments"))
            for _, c in sorted(message["calls"].items())
        ]  # fmt: skip
        out.append(_message(message.get("message.role"), texts, calls))
    return out


_PARTS, _CALLS = "message.contents.", "message.tool_calls."


@lru_cache(maxsize=4096)
def _message_key(prefix: str, key: str) -> tuple[int, str, int, str] | None:
    """What a flattened message key says, as (message, what, at, name): `what` is
    `message.role` or `message.content`, `part` (text part `at`), `call` (tool call `at`, its
    field `name`) or empty (a field no run keeps); None for a key of no message. Cached:
    the same keys come again."""
    if not key.startswith(prefix):
        return None
    index, _, rest = key[len(prefix) :].partition(".")
    if not index.isdigit():
        return None
    if rest in ("message.role", "message.content"):
        return int(index), rest, 0, ""
    if rest.startswith(_PARTS):
        part, _, name = rest[len(_PARTS) :].partition(".")
        if part.isdigit() and name == "message_content.text":
            return int(index), "part", int(part), name
    elif rest.startswith(_CALLS):
        call, _, name = rest[len(_CALLS) :].partition(".")
        if call.isdigit():
            return int(index), "call", int(call), name
    return int(index), "", 0, ""  # a message all the same, of a field no run keeps


def _last(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    return messages[-1] if messages else None


# ---------------------------------------------------------------- values


_SKIP, _KEEP, _INPUT = 0, 1, 2  # what an attribute is to a run (`_role`)


@lru_cache(maxsize=4096)
def _role(key: str) -> int:
    """Whether a run is made of the attribute (`_KEEP`), is a model call's input messages
    (`_INPUT`: converted only where they can be a run's input) or neither. Cached: spans of
    one framework carry the same few keys."""
    if key in _WANTED or key.startswith(OI_OUTPUT_MESSAGES):
        return _KEEP
    if key == GENAI_INPUT or key.startswith(OI_INPUT_MESSAGES):
        return _INPUT
    return _SKIP


def _read_attributes(pairs: Iterable[Any]) -> tuple[dict[str, Any], list[Any]]:
    """The attributes a run is made of, converted; and the input messages' pairs as they are
    (the others are never converted)."""
    attrs: dict[str, Any] = {}
    inputs = []
    for kv in pairs:
        key = kv.key
        role = _role(key)
        if role == _KEEP:
            attrs[key] = _any(kv.value)
        elif role == _INPUT:
            inputs.append(kv)
    return attrs, inputs


def _any(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return _clean(value.string_value)
    if kind in ("bool_value", "int_value"):
        return getattr(value, kind)
    if kind == "double_value":  # NaN and the infinities are no JSON: kept as their names
        return value.double_value if math.isfinite(value.double_value) else str(value.double_value)
    if kind == "array_value":
        return [_any(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {_clean(kv.key): _any(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return None


def _clean(text: str) -> str:
    """Text as every database stores it: NUL becomes U+FFFD."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _json(text: str) -> Any:
    """`text` parsed as JSON (NUL escapes made U+FFFD), or None when it is not JSON."""
    try:
        parsed = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return None
    return _cleaned(parsed) if "\\u0000" in text else parsed


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_not_json)  # made once: json.loads makes one a call


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _cleaned(v) for k, v in value.items()}
    return value


def _value(value: Any, mime: Any) -> Any:
    """`input.value`/`output.value`: parsed when its mime type says JSON, else as given."""
    if isinstance(value, str) and mime == _JSON_MIME:
        parsed = _json(value)
        return value if parsed is None else parsed
    return value


def _args(value: Any) -> dict[str, Any]:
    """A call's arguments as a run keeps them, an object: a JSON string is parsed; what is
    not an object is kept as `{"input": …}`."""
    if value is None:
        return {}
    parsed = _json(value) if isinstance(value, str) else value
    if isinstance(parsed, dict):
        return parsed
    return {"input": value if parsed is None else parsed}


# ---------------------------------------------------------------- assembling a run


def _in_order(spans: Iterable[SpanFacts]) -> list[SpanFacts]:
    return sorted(spans, key=lambda s: (s.start_ns, s.span_id))


def placement(spans: Iterable[SpanFacts]) -> tuple[str, str] | None:
    """Where a trace belongs, (agent, project): as its root names it, else as the first of
    its spans that names both."""
    named = [s for s in _in_order(spans) if {"agent", "project"} <= set(s.facts.get("place", ()))]
    if not named:
        return None
    first = next((s for s in named if s.is_root), named[0])
    return first.facts["place"]["agent"], first.facts["place"]["project"]


def named_place(span: SpanFacts) -> tuple[str, str] | None:
    place = span.facts.get("place", {})
    if "agent" in place and "project" in place:
        return place["agent"], place["project"]
    return None


def _version(spans: list[SpanFacts]) -> str:
    """The root's version, else the first span's that names one, else `unversioned`."""
    versions = [s for s in spans if "version" in s.facts.get("place", ())]
    first = next((s for s in versions if s.is_root), versions[0] if versions else None)
    return first.facts["place"]["version"] if first else UNVERSIONED


def _calls(spans: list[SpanFacts]) -> list[dict[str, Any]]:
    """The tools executed, in start order; only when a trace has no tool span, the tool calls
    its model calls asked for. One call per tool-call id either way."""
    tools = [s.facts["tool"] for s in spans if "tool" in s.facts]
    if not tools:
        tools = [c for s in spans if "llm" in s.facts for c in s.facts["llm"].get("calls", ())]
    seen: set[str] = set()
    calls = []
    for call in tools:
        if "id" in call:
            if call["id"] in seen:
                continue
            seen.add(call["id"])
        calls.append({"tool": call["tool"], "args": call["args"]})
    return calls


def assemble(spans: Iterable[SpanFacts]) -> Assembly:
    """The run a trace's spans make (docs/design.md §10): input and output from the root,
    else from its first and last model calls; the calls; finished once the root is there."""
    ordered = _in_order(spans)
    root = next((s for s in ordered if s.is_root), None)
    own = root.facts.get("root", {}) if root else {}
    llms = [s.facts["llm"] for s in ordered if "llm" in s.facts]
    first_input = next((llm["input"] for llm in llms if llm.get("input") is not None), None)
    last_output = next((llm["output"] for llm in reversed(llms) if llm.get("output")), None)
    return Assembly(
        input=own["input"] if own.get("input") is not None else first_input,
        output=own["output"] if own.get("output") is not None else last_output,
        calls=_calls(ordered),
        finished=root is not None,
        error=own.get("error"),
        start_ns=root.start_ns if root else min((s.start_ns for s in ordered), default=0),
        version=_version(ordered),
        place=placement(ordered),
    )
