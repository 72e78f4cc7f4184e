#!/usr/bin/env python3
"""An agent built with the OpenAI Agents SDK whose runs reach Kindgi as OpenTelemetry traces
(README, "Runs from your agent's traces"; tests/test_otlp_live.py runs it). Nothing here names
Kindgi: the standard variables do, e.g.

    OTEL_EXPORTER_OTLP_ENDPOINT=https://kindgi.example
    OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer kgi_…"
    OTEL_RESOURCE_ATTRIBUTES="kindgi.agent.id=acme.drafting,kindgi.project.id=2489e9ad-…,service.version=1.4.0"
    python traced_agent.py "What is the notice period?"

The model is any OpenAI-compatible server (OPENAI_BASE_URL, OPENAI_API_KEY), asked through its
chat completions.
"""

import sys

from agents import Agent, Runner, function_tool, set_default_openai_api
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()  # its resource: OTEL_RESOURCE_ATTRIBUTES
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
set_default_openai_api("chat_completions")


@function_tool
def lookup(q: str) -> str:
    """Look a term up in the handbook."""
    return f"The handbook on {q}: see section 4."


agent = Agent(name="drafter", instructions="Answer briefly.", tools=[lookup], model="gpt-4o-mini")
print(Runner.run_sync(agent, sys.argv[1]).final_output)
provider.shutdown()  # sends what is left before the process ends
