"""`POST /v1/traces`, OTLP/HTTP's traces endpoint, through the Flask client on a real database
(docs/design.md §10): an export's spans become one run per trace, whatever their order and
however many requests bring them; what can't be placed is rejected in `partial_success` and
kept nowhere; bodies that aren't exports are refused as `google.rpc.Status`."""

from __future__ import annotations

import gzip
import zlib
from datetime import datetime, timedelta
from urllib.parse import urlencode

import hypothesis
import pytest
from conftest import AGENT, MULTI, P1, P2, PG, app_on, sign_in, snapshot_db
from google.rpc import code_pb2, error_details_pb2, status_pb2
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from otlp_spans import JSON, PROTOBUF, agents_sdk_trace, export, json_body, span

from kindgi import service, traces
from kindgi.database import db

TRACES = "/v1/traces"
RESOURCE = {"kindgi__agent__id": AGENT, "kindgi__project__id": P1, "service__version": "2.0.0"}
RUNS = f"/v1/agents/{AGENT}/runs?projectId={P1}"


def send(api, request, *, form: str = "protobuf", as_: str = "writer", **headers):
    """Post an export in one encoding; the answer."""
    if form == "protobuf":
        body, kind = request.SerializeToString(), PROTOBUF
    else:
        body, kind = json_body(request), JSON
    return api.post(TRACES, data=body, as_=as_, headers={**kind, **headers})


def accepted(resp) -> ExportTraceServiceResponse:
    """The answer of an export: 200, an ExportTraceServiceResponse in the request's encoding."""
    assert resp.status_code == 200, resp.data
    if resp.mimetype == "application/json":
        from google.protobuf import json_format

        return json_format.Parse(resp.data, ExportTraceServiceResponse())
    assert resp.mimetype == "application/x-protobuf"
    return ExportTraceServiceResponse.FromString(resp.data)


def refusal(resp, status: int, reason: str) -> status_pb2.Status:
    """A refusal as OTLP/HTTP answers one: a google.rpc.Status, its ErrorInfo naming the code."""
    assert resp.status_code == status, resp.data
    if resp.mimetype == "application/json":
        from google.protobuf import json_format

        found = json_format.Parse(resp.data, status_pb2.Status())
    else:
        assert resp.mimetype == "application/x-protobuf"
        found = status_pb2.Status.FromString(resp.data)
    info = error_details_pb2.ErrorInfo()
    assert found.details[0].Unpack(info)
    assert info.reason == reason, info
    assert info.metadata["requestId"] == resp.headers["X-Request-Id"]
    assert found.message
    return found


def the_run(api, trace: int, tenant: str = "acme", as_: str = "admin") -> dict:
    """The run a trace made, as the runs list shows it."""
    run_id = traces.run_id(tenant, f"{trace:032x}")
    runs = api.get(RUNS + "&limit=100", as_=as_).get_json()["data"]
    found = [r for r in runs if r["id"] == run_id]
    assert found, f"no run for trace {trace}"
    return found[0]


SYSTEM, USER = {"role": "system", "content": "Be brief."}, {"role": "user"}
ASKED = {
    "role": "assistant",
    "toolCalls": [
        {"tool": "lookup", "args": {"q": "notice period"}, "id": "call_0"},
        {"tool": "lookup", "args": {"q": "holidays"}, "id": "call_1"},
    ],
}
QUESTION = "What is the notice period?"


# ---------------------------------------------------------------- a trace becomes a run


@pytest.mark.parametrize("form", ["protobuf", "json"])
def test_an_agents_trace_becomes_a_finished_run_with_the_input_calls_and_output(api, form):
    """docs/design.md §10: the Agents SDK's root has no input: the first model call's input
    messages are the run's, the last one's output message its output, its tools its calls."""
    resp = send(api, export(*agents_sdk_trace(7), **RESOURCE), form=form)
    assert not accepted(resp).HasField("partial_success")
    run = the_run(api, 7)
    assert run["status"] == "finished" and run["version"] == "2.0.0"
    assert run["input"] == [SYSTEM, {**USER, "content": QUESTION}]
    assert run["output"] == {"role": "assistant", "content": "Thirty days."}
    assert run["calls"] == [
        {"tool": "lookup", "args": {"q": "notice period"}},
        {"tool": "lookup", "args": {"q": "holidays"}},
    ]
    assert "error" not in run
    assert run["at"] == "2026-05-28T20:26:40Z"  # the root's start


def test_the_new_version_joins_the_agents_versions(app, api):
    send(api, export(*agents_sdk_trace(7), **RESOURCE))
    with app.app_context():
        from kindgi.models import Agent

        agent = db.session.query(Agent).filter_by(tenant_id="acme", id=AGENT).one()
        assert agent.versions == ["1.0.0", "1.1.0", "2.0.0"]


@pytest.mark.parametrize("first, again", [("protobuf", "json"), ("json", "protobuf")])
def test_an_export_retried_in_either_encoding_changes_nothing(app, api, unchanged, first, again):
    request = export(*agents_sdk_trace(7), **RESOURCE)
    accepted(send(api, request, form=first))
    with unchanged():
        accepted(send(api, request, form=again))
        accepted(send(api, request, form=first))


def test_spans_split_over_requests_in_any_order_make_one_run(app, api):
    """BatchSpanProcessor sends children before their root: the run is `running` with what
    has come, and `finished` once the root comes, the same run as in one export."""
    spans = agents_sdk_trace(9)
    root, children = spans[0], spans[1:]
    runs_before = len(api.get(RUNS + "&limit=100").get_json()["data"])
    accepted(send(api, export(*reversed(children[3:]), **RESOURCE)))
    running = the_run(api, 9)
    assert running["status"] == "running"
    assert running["calls"] == [
        {"tool": "lookup", "args": {"q": "notice period"}},
        {"tool": "lookup", "args": {"q": "holidays"}},
    ]
    assert running["input"] == [SYSTEM, {**USER, "content": QUESTION}, ASKED]
    accepted(send(api, export(*children[:3], **RESOURCE), form="json"))
    accepted(send(api, export(root, **RESOURCE)))
    whole = the_run(api, 9)
    accepted(send(api, export(*agents_sdk_trace(10), **RESOURCE)))
    in_one = the_run(api, 10)
    assert whole["status"] == "finished"
    assert {**whole, "id": ""} == {**in_one, "id": ""}
    assert len(api.get(RUNS + "&limit=100").get_json()["data"]) == runs_before + 2


def test_a_run_assembled_from_split_exports_is_found_by_the_tools_it_called(app, api):
    """The runs inbox's tool filter reads `run_tools` (docs/design.md §4.2): a run made from
    a trace keeps them as its assembled calls say, however many exports brought them."""
    spans = agents_sdk_trace(9)
    accepted(send(api, export(*spans[4:], **RESOURCE)))
    accepted(send(api, export(*spans[:4], **RESOURCE)))
    run_id = the_run(api, 9)["id"]
    found = api.get(RUNS + "&tool=lookup&limit=100").get_json()["data"]
    assert run_id in {r["id"] for r in found}
    assert run_id not in {r["id"] for r in api.get(RUNS + "&tool=nope").get_json()["data"]}
    check = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert check.exit_code == 0 and "run tools: ok" in check.output, check.output


def test_a_run_growing_span_by_span_is_found_by_the_words_it_says_now(app, api):
    """The inbox's `q` (docs/design.md §4.2) finds a trace's run by the words of its input and
    output as assembled so far: new words found once their spans come, words it no longer
    says not found, and its calls' never."""

    def found(q: str) -> bool:
        page = api.get(RUNS + "&limit=100&" + urlencode({"q": q})).get_json()["data"]
        return run_id in {r["id"] for r in page}

    spans = agents_sdk_trace(9)
    run_id = traces.run_id("acme", f"{9:032x}")
    accepted(send(api, export(*spans[4:], **RESOURCE)))  # the second model call's alone
    assert found("holidays") and found("Thirty DAYS") and found("call_1")
    accepted(send(api, export(*spans[:4], **RESOURCE)))  # the first's input is the run's
    assert not found("holidays") and not found("call_1")
    assert found("thirty days") and found("notice period") and found("brief")
    spans = agents_sdk_trace(11)
    run_id = traces.run_id("acme", f"{11:032x}")
    accepted(send(api, export(*spans[:3], **RESOURCE)))  # the root: no input, no output yet
    assert not found("thirty")
    accepted(send(api, export(*spans[3:], **RESOURCE)))
    assert found("thirty") and found("WHAT is the notice period?")
    check = app.test_cli_runner().invoke(args=["kindgi", "check"])
    assert check.exit_code == 0 and "run words: ok" in check.output, check.output


def test_prune_deletes_the_spans_held_past_the_hold(app, api, set_clock):
    """`kindgi prune` deletes spans whose trace never named its agent and project, once held
    past KINDGI_OTLP_HOLD_HOURS (docs/design.md §10.2); a run's spans stay."""
    accepted(send(api, export(*agents_sdk_trace(7), **RESOURCE)))
    accepted(send(api, export(*agents_sdk_trace(12)[1:])))  # held, its root never comes
    with app.app_context():
        from kindgi.models import TraceSpan

        def spans_of(trace: int) -> int:
            run_id = traces.run_id("acme", f"{trace:032x}")
            return db.session.query(TraceSpan).filter_by(run_id=run_id).count()

        kept, held = spans_of(7), spans_of(12)
        db.session.rollback()
    assert kept and held == 7
    set_clock(datetime.utcnow() + timedelta(hours=25))
    result = app.test_cli_runner().invoke(args=["kindgi", "prune", "--days", "36500"])
    assert result.exit_code == 0 and "and 7 trace spans" in result.output, result.output
    with app.app_context():
        assert (spans_of(7), spans_of(12)) == (kept, 0)


def test_the_same_trace_id_of_two_tenants_makes_two_runs(api):
    accepted(send(api, export(*agents_sdk_trace(7), **RESOURCE)))
    globex = {**RESOURCE, "kindgi__project__id": PG}
    accepted(send(api, export(*agents_sdk_trace(7), **globex), as_="globex"))
    runs = api.get(f"/v1/agents/{AGENT}/runs?projectId={PG}", as_="globex").get_json()["data"]
    mine = the_run(api, 7)
    assert traces.run_id("globex", f"{7:032x}") in {r["id"] for r in runs}
    assert mine["id"] != traces.run_id("globex", f"{7:032x}")


# ---------------------------------------------------------------- where a run belongs


def test_the_root_span_can_name_the_agent_and_project_and_earlier_spans_wait_for_it(
    app, api, set_clock
):
    """Spans of a trace that names no agent or project yet are held (kept, no run) until its
    root names them; spans held past KINDGI_OTLP_HOLD_HOURS are deleted."""
    spans = agents_sdk_trace(11)
    root = spans[0]
    named = export(kindgi__agent__id=AGENT, kindgi__project__id=P1, kindgi__agent__version="3.1.0")
    root.attributes.extend(named.resource_spans[0].resource.attributes)
    before = {r["id"] for r in api.get(RUNS + "&limit=100").get_json()["data"]}
    assert not accepted(send(api, export(*spans[1:]))).HasField("partial_success")
    assert {r["id"] for r in api.get(RUNS + "&limit=100").get_json()["data"]} == before
    accepted(send(api, export(root, service__version="9.9.9")))
    run = the_run(api, 11)
    assert run["version"] == "3.1.0"  # kindgi.agent.version before service.version
    assert run["status"] == "finished" and len(run["calls"]) == 2

    accepted(send(api, export(*agents_sdk_trace(12)[1:])))  # held, and its root never comes
    with app.app_context():
        from kindgi.models import TraceSpan

        def held() -> int:
            run_id = traces.run_id("acme", f"{12:032x}")
            return db.session.query(TraceSpan).filter_by(run_id=run_id).count()

        assert held() == 7
        later = datetime.utcnow() + timedelta(hours=23)
        assert service.delete_expired_held_spans(later) == 0
        later = datetime.utcnow() + timedelta(hours=25)
        assert service.delete_expired_held_spans(later, limit=5) == 5
        assert service.delete_expired_held_spans(later) == 2
        db.session.commit()
        assert held() == 0
        kept = db.session.query(TraceSpan).filter_by(run_id=run["id"]).count()
        assert kept == 8  # a run's spans are no held spans


@pytest.mark.parametrize(
    "resource, version",
    [
        ({"kindgi__agent__version": "4.0.0", "service__version": "2.0.0"}, "4.0.0"),
        ({"service__version": "2.0.0"}, "2.0.0"),
        ({}, "unversioned"),
    ],
)
def test_the_version_is_kindgis_else_the_services_else_unversioned(api, resource, version):
    place = {"kindgi__agent__id": AGENT, "kindgi__project__id": P1}
    accepted(send(api, export(*agents_sdk_trace(7), **place, **resource)))
    assert the_run(api, 7)["version"] == version


def test_an_errored_root_keeps_its_message_on_the_run(app, api):
    spans = agents_sdk_trace(7)
    spans[0].status.code = 2  # STATUS_CODE_ERROR
    spans[0].status.message = "MaxTurnsExceeded: the agent ran out of turns"
    accepted(send(api, export(*spans, **RESOURCE)))
    run = the_run(api, 7)
    assert run["error"] == {"message": "MaxTurnsExceeded: the agent ran out of turns"}
    assert run["status"] == "finished"
    page = app.test_client()
    sign_in(page, "publisher@acme.test", "publisher-pass-1")
    html = page.get(f"/agents/{AGENT}/runs/{run['id']}").get_data(as_text=True)
    assert "MaxTurnsExceeded: the agent ran out of turns" in html.split("<h2>Error</h2>")[1]


# ---------------------------------------------------------------- rejected, and kept nowhere


@pytest.mark.parametrize(
    "place, caller, why",
    [
        ({"kindgi__agent__id": "acme.nope", "kindgi__project__id": P1}, "admin", "agent-not-found"),
        ({"kindgi__agent__id": AGENT, "kindgi__project__id": PG}, "admin", "project-not-found"),
        ({"kindgi__agent__id": AGENT, "kindgi__project__id": P2}, "admin", "project-not-found"),
        (
            {"kindgi__agent__id": AGENT, "kindgi__project__id": "not-a-uuid"},
            "admin",
            "project-not-found",
        ),
    ],
)
def test_spans_of_an_unknown_agent_or_another_tenants_project_are_rejected_and_kept_nowhere(
    api, unchanged, place, caller, why
):
    with unchanged():
        resp = send(api, export(*agents_sdk_trace(7), **place), as_=caller)
        partial = accepted(resp).partial_success
    assert partial.rejected_spans == 8
    assert why in partial.error_message and f"{7:032x}" in partial.error_message


def test_a_token_that_may_write_none_of_it_is_403_and_changes_nothing(api, unchanged):
    for caller in ("reader", "expert"):  # read on P1; write on another project only
        with unchanged():
            resp = send(api, export(*agents_sdk_trace(7), **RESOURCE), as_=caller)
            refusal(resp, 403, "forbidden")


def test_a_request_keeps_the_traces_it_may_write_and_rejects_the_others(app, api):
    """One export with three traces: P1's is kept, acme.multi's in P2 (no write there for
    the writer) and the unknown agent's are rejected, in one partial_success."""
    request = export(*agents_sdk_trace(1), **RESOURCE)
    for trace, agent, project in ((2, MULTI, P2), (3, "acme.nope", P1)):
        other = export(
            *agents_sdk_trace(trace), kindgi__agent__id=agent, kindgi__project__id=project
        )
        request.resource_spans.add().CopyFrom(other.resource_spans[0])
    before = snapshot_db(app)
    partial = accepted(send(api, request)).partial_success
    assert partial.rejected_spans == 16
    assert "forbidden" in partial.error_message and "agent-not-found" in partial.error_message
    after = snapshot_db(app)
    # (and on SQLite the runs' search index, `run_search_*`)
    changed = {t for t in after if after[t] != before[t] and not t.startswith("run_search_")}
    assert changed == {"runs", "run_tools", "trace_spans", "agents"}
    kept = traces.run_id("acme", f"{1:032x}")
    assert {row[0] for row in after["runs"]} - {row[0] for row in before["runs"]} == {kept}
    assert {row[0] for row in after["trace_spans"]} == {kept}


def test_a_span_naming_another_agent_than_its_traces_run_is_rejected(api):
    accepted(send(api, export(*agents_sdk_trace(7)[:3], **RESOURCE)))
    late = export(*agents_sdk_trace(7)[3:], kindgi__agent__id=MULTI, kindgi__project__id=P2)
    partial = accepted(send(api, late, as_="admin")).partial_success
    assert partial.rejected_spans == 5
    assert f"is agent {AGENT}, project {P1}" in partial.error_message
    run = the_run(api, 7)
    assert (run["input"], run["output"], run["calls"]) == (None, None, [])  # not the strays'


def test_spans_of_an_erased_run_are_rejected(api, app, unchanged):
    accepted(send(api, export(*agents_sdk_trace(7)[1:], **RESOURCE)))
    with app.app_context():
        from kindgi.models import Run

        db.session.get(Run, traces.run_id("acme", f"{7:032x}")).erased = True
        db.session.commit()
    with unchanged():
        partial = accepted(send(api, export(*agents_sdk_trace(7)[:1], **RESOURCE))).partial_success
    assert partial.rejected_spans == 1 and "erased" in partial.error_message


def test_a_span_without_proper_ids_is_rejected(api, unchanged):
    bad = span(7, 1)
    bad.trace_id = b"short"
    with unchanged():
        partial = accepted(send(api, export(bad, **RESOURCE))).partial_success
    assert partial.rejected_spans == 1


# ---------------------------------------------------------------- bodies and tokens


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_export_is_read(api, encoding):
    raw = export(*agents_sdk_trace(7), **RESOURCE).SerializeToString()
    body = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    accepted(
        api.post(
            TRACES, data=body, as_="writer", headers={**PROTOBUF, "Content-Encoding": encoding}
        )
    )
    assert the_run(api, 7)["status"] == "finished"


@pytest.mark.parametrize(
    "body, headers",
    [
        pytest.param(b"\x0a\xff\xff\xff", PROTOBUF, id="protobuf cut short"),
        pytest.param(b"{not json", JSON, id="not json"),
        pytest.param(b"[]", JSON, id="not an object"),
        pytest.param(
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            JSON,
            id="an id not in hex",
        ),
        pytest.param(b'{"resourceSpans": "nope"}', JSON, id="not the export's shape"),
        pytest.param(
            gzip.compress(b"x", mtime=0)[:-4],
            {**PROTOBUF, "Content-Encoding": "gzip"},
            id="gzip cut short",
        ),
        pytest.param(b"not gzip", {**JSON, "Content-Encoding": "gzip"}, id="not gzip"),
    ],
)
def test_a_body_that_is_no_export_is_400_as_a_status_in_its_encoding(api, unchanged, body, headers):
    with unchanged():
        resp = api.post(TRACES, data=body, as_="writer", headers=headers)
        found = refusal(resp, 400, "bad-input")
    assert found.code == code_pb2.INVALID_ARGUMENT


def test_otlp_json_reads_hex_ids_numbers_for_enums_and_int64_as_text(api):
    """The OTLP/JSON a hand-written client sends: camelCase, hex ids, int enums, int64 as
    strings, and fields it does not know (ignored)."""
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "kindgi.agent.id", "value": {"stringValue": AGENT}},
                        {"key": "kindgi.project.id", "value": {"stringValue": P1.upper()}},
                    ]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "agent",
                                "kind": 1,
                                "startTimeUnixNano": "1780000000000000000",
                                "status": {"code": 2, "message": "boom"},
                                "someFutureField": True,
                                "attributes": [
                                    {
                                        "key": "input.value",
                                        "value": {"stringValue": '{"question": "hi"}'},
                                    },
                                    {
                                        "key": "input.mime_type",
                                        "value": {"stringValue": "application/json"},
                                    },
                                    {"key": "output.value", "value": {"stringValue": "hello"}},
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    accepted(api.post(TRACES, json=body, as_="writer"))
    run = next(
        r
        for r in api.get(RUNS + "&limit=100").get_json()["data"]
        if r["id"] == traces.run_id("acme", "5b8efff798038103d269b633813fc60c")
    )
    assert run["input"] == {"question": "hi"} and run["output"] == "hello"
    assert run["error"] == {"message": "boom"} and run["status"] == "finished"


@pytest.mark.parametrize(
    "token, status, reason",
    [
        (None, 401, "unauthenticated"),
        ("kgi_revoked", 401, "unauthenticated"),
    ],
)
@pytest.mark.parametrize("form", ["protobuf", "json"])
def test_a_bad_token_is_401_as_a_status(api, unchanged, token, status, reason, form):
    with unchanged():
        resp = send(api, export(*agents_sdk_trace(7), **RESOURCE), form=form, as_=token)
    found = refusal(resp, status, reason)
    assert found.code == code_pb2.UNAUTHENTICATED
    assert resp.headers["WWW-Authenticate"] == "Bearer"


def test_another_media_type_or_encoding_is_415(api, unchanged):
    with unchanged():
        refusal(
            api.post(TRACES, data=b"x", as_="writer", headers={"Content-Type": "text/plain"}),
            415,
            "unsupported-media-type",
        )
        refusal(
            api.post(
                TRACES, data=b"x", as_="writer", headers={**PROTOBUF, "Content-Encoding": "br"}
            ),
            415,
            "unsupported-media-type",
        )


def test_a_body_over_the_limit_is_413_counted_once_inflated_and_a_bomb_is_never_inflated(
    databases,
):
    """KINDGI_OTLP_MAX_BYTES counts the body after gunzip; a gzip bomb (1 GiB of zeros in
    about a megabyte) stops being inflated at the limit."""
    from conftest import Api

    with app_on(databases, databases.clone(), OTLP_MAX_BYTES=4096) as small:
        api = Api(small.test_client())
        fits = export(*agents_sdk_trace(7), **RESOURCE).SerializeToString()
        assert len(fits) < 4096
        before = snapshot_db(small)
        big = export(*[s for n in range(8) for s in agents_sdk_trace(20 + n)], **RESOURCE)
        raw = big.SerializeToString()
        assert len(gzip.compress(raw)) < 4096 < len(raw)
        for body, headers in (
            (raw, PROTOBUF),
            (gzip.compress(raw), {**PROTOBUF, "Content-Encoding": "gzip"}),
            (bomb(), {**PROTOBUF, "Content-Encoding": "gzip"}),
        ):
            resp = api.post(TRACES, data=body, as_="writer", headers=headers)
            refusal(resp, 413, "request-too-large")
        assert snapshot_db(small) == before
        accepted(
            api.post(
                TRACES,
                data=gzip.compress(fits),
                as_="writer",
                headers={**PROTOBUF, "Content-Encoding": "gzip"},
            )
        )


def bomb() -> bytes:
    """A gzip member of 1 GiB of zeros, made without holding them."""
    out = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join(out.compress(chunk) for _ in range(1024)) + out.flush()


def test_the_default_limit_is_sixteen_mebibytes(app):
    assert app.config["OTLP_MAX_BYTES"] == 16 * 1024 * 1024
    assert app.config["OTLP_HOLD_HOURS"] == 24


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@hypothesis.given(body=st.binary(max_size=300), form=st.sampled_from([PROTOBUF, JSON]))
def test_whatever_bytes_come_the_answer_is_an_export_answer_or_a_400_status(app, body, form):
    """Never a 5xx, never the JSON envelope: an ExportTraceServiceResponse or a Status."""
    from conftest import Api

    resp = Api(app.test_client()).post(TRACES, data=body, as_="writer", headers=form)
    if resp.status_code == 200:
        accepted(resp)
    else:
        refusal(resp, 400, "bad-input")
