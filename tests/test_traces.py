"""The pure rules that make a run of a trace's spans (kindgi/traces.py, docs/design.md §10):
no Flask, no database."""

from __future__ import annotations

import json

from otlp_spans import agents_sdk_trace, export, span

from kindgi import traces

PLACE = {
    "kindgi__agent__id": "acme.drafting",
    "kindgi__project__id": "B1F1C0DE-0000-4000-8000-0000000000AA",
}


def facts(*spans, **resource) -> list[traces.SpanFacts]:
    read = traces.read_export(export(*spans, **resource))
    return [s for group in read.traces.values() for s in group]


def genai(role: str, *parts: dict) -> dict:
    return {"role": role, "parts": list(parts)}


def tool_call(call_id: str, name: str, arguments) -> dict:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def chat(trace: int, span_id: int, start: int, inputs: list, outputs: list, **more):
    return span(
        trace,
        span_id,
        1,
        start=start,
        gen_ai__operation__name="chat",
        gen_ai__input__messages=json.dumps(inputs),
        gen_ai__output__messages=json.dumps(outputs),
        **more,
    )


def test_the_same_spans_in_any_order_make_the_same_run():
    spans = facts(*agents_sdk_trace(1), **PLACE)
    assert traces.assemble(spans) == traces.assemble(list(reversed(spans)))
    made = traces.assemble(spans)
    assert made.finished and made.place == ("acme.drafting", PLACE["kindgi__project__id"].lower())
    assert made.version == "unversioned"


def test_the_roots_own_input_and_output_come_before_the_model_calls():
    root = span(
        1,
        1,
        input__value='{"question": "hi"}',
        input__mime_type="application/json",
        output__value="bye",
    )
    made = traces.assemble(facts(root, *agents_sdk_trace(1)[1:]))
    assert made.input == {"question": "hi"} and made.output == "bye"
    text = span(1, 1, input__value='{"not": "parsed"}', input__mime_type="text/plain")
    assert traces.assemble(facts(text)).input == '{"not": "parsed"}'


def test_genai_root_messages_are_the_runs_input_and_last_output_message():
    root = span(
        1,
        1,
        gen_ai__operation__name="invoke_agent",
        gen_ai__input__messages=json.dumps([genai("user", {"type": "text", "content": "hi"})]),
        gen_ai__output__messages=json.dumps(
            [
                genai("assistant", {"type": "text", "content": "one"}),
                genai(
                    "assistant",
                    {"type": "text", "content": "two"},
                    {"type": "text", "content": "three"},
                ),
            ]
        ),
    )
    made = traces.assemble(facts(root))
    assert made.input == [{"role": "user", "content": "hi"}]
    assert made.output == {"role": "assistant", "content": "two\nthree"}


def test_tool_spans_are_the_calls_and_the_models_tool_calls_are_never_added_to_them():
    """An execute_tool span (GenAI) or a TOOL span (OpenInference) is a call; the model's
    asked-for calls count only in a trace with no tool span at all: never both."""
    asks = [genai("assistant", tool_call("c1", "search", '{"q": "a"}'))]
    spans = [
        span(1, 1, start=0),
        chat(1, 2, 1, [genai("user", {"type": "text", "content": "go"})], asks),
        span(
            1,
            3,
            1,
            start=2,
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__name="search",
            gen_ai__tool__call__arguments='{"q": "a"}',
            gen_ai__tool__call__id="c1",
        ),
    ]
    assert traces.assemble(facts(*spans)).calls == [{"tool": "search", "args": {"q": "a"}}]
    assert traces.assemble(facts(*spans[:2])).calls == [{"tool": "search", "args": {"q": "a"}}]


def test_the_models_tool_calls_count_once_per_call_id_in_the_order_asked():
    """The same call may be asked again (a retried model call); arguments as JSON text or as
    objects; arguments that are no object are kept as {"input": …}."""
    first = [
        genai(
            "assistant",
            tool_call("c1", "search", {"q": "a"}),
            tool_call("c2", "lookup", "not json"),
        )
    ]
    again = [
        genai("assistant", tool_call("c1", "search", {"q": "a"}), tool_call("c3", "send", "[1, 2]"))
    ]
    spans = [span(1, 1), chat(1, 2, 1, [], first), chat(1, 3, 2, [], again)]
    assert traces.assemble(facts(*spans)).calls == [
        {"tool": "search", "args": {"q": "a"}},
        {"tool": "lookup", "args": {"input": "not json"}},
        {"tool": "send", "args": {"input": [1, 2]}},
    ]


def test_genai_messages_may_come_structured_not_as_json_text():
    structured = [genai("user", {"type": "text", "content": "hi"})]
    root = span(1, 1, gen_ai__operation__name="invoke_agent", gen_ai__input__messages=structured)
    assert traces.assemble(facts(root)).input == [{"role": "user", "content": "hi"}]


def test_openinference_message_contents_parts_are_the_messages_text():
    llm = span(
        1,
        2,
        1,
        openinference__span__kind="LLM",
        **{
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "text",
            "llm.input_messages.0.message.contents.0.message_content.text": "part one",
            "llm.input_messages.0.message.contents.1.message_content.text": "part two",
        },
    )
    made = traces.assemble(facts(span(1, 1), llm))
    assert made.input == [{"role": "user", "content": "part one\npart two"}]


def test_a_trace_is_placed_by_its_root_else_by_its_first_span_naming_both():
    child = span(1, 2, 1, start=0)
    root = span(
        1,
        1,
        start=5,
        kindgi__agent__id="acme.root",
        kindgi__project__id="p-root",
        kindgi__agent__version="7",
    )
    from_resource = facts(child, **PLACE)
    assert traces.placement(from_resource) == (
        "acme.drafting",
        PLACE["kindgi__project__id"].lower(),
    )
    assert traces.placement(facts(child)) is None  # held
    made = traces.assemble([*facts(child), *facts(root)])
    assert made.place == ("acme.root", "p-root") and made.version == "7"
    # a child's own attributes never place it: only a root's do
    assert (
        traces.placement(facts(span(1, 3, 1, kindgi__agent__id="x", kindgi__project__id="y")))
        is None
    )


def test_an_error_status_without_a_message_takes_the_exceptions():
    root = span(1, 1, error="")
    event = root.events.add(name="exception")
    event.attributes.extend(
        export(exception__type="ValueError", exception__message="bad")
        .resource_spans[0]
        .resource.attributes
    )
    assert traces.assemble(facts(root)).error == "ValueError: bad"
    assert traces.assemble(facts(span(1, 1, error="boom"))).error == "boom"
    assert traces.assemble(facts(span(1, 1))).error is None


def test_text_no_database_stores_is_made_storable():
    """NUL becomes U+FFFD; NaN and the infinities (no JSON) are kept as text."""
    root = span(
        1,
        1,
        input__value='{"q": "a\\u0000b", "n": NaN}',
        input__mime_type="application/json",
        output__value="x\x00y",
    )
    made = traces.assemble(facts(root))
    assert made.input == '{"q": "a\\u0000b", "n": NaN}'  # not JSON: kept as given
    assert made.output == "x\ufffdy"
    nul = span(1, 1, input__value='{"q": "a\\u0000b"}', input__mime_type="application/json")
    assert traces.assemble(facts(nul)).input == {"q": "a\ufffdb"}
    tool = span(
        1,
        2,
        1,
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name="t",
        gen_ai__tool__call__arguments={"x": float("nan")},
    )
    assert traces.assemble(facts(tool)).calls == [{"tool": "t", "args": {"x": "nan"}}]


def test_a_runs_id_is_the_same_for_a_trace_and_differs_by_tenant():
    one = traces.run_id("acme", "5b8efff798038103d269b633813fc60c")
    assert one == traces.run_id("acme", "5b8efff798038103d269b633813fc60c")
    assert one != traces.run_id("globex", "5b8efff798038103d269b633813fc60c")
    assert one.startswith("run-") and len(one) == 24
