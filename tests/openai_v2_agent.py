"""A small agent on the plain OpenAI client, traced by OpenTelemetry's official OpenAI
instrumentation (GenAI semantic conventions) and exported as OTLP/JSON: its model calls are
spans, its tools are not (the run's calls come from what the model asked for). Its input is
argv[1]; configured by the environment (OTEL_*, OPENAI_BASE_URL) as tests/test_otlp_live.py
runs it."""

import sys

from openai import OpenAI
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
OpenAIInstrumentor().instrument(tracer_provider=provider)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]

client = OpenAI()
messages = [{"role": "user", "content": sys.argv[1]}]
with provider.get_tracer("openai_v2_agent").start_as_current_span("invoke_agent drafter"):
    while True:
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "section 4"})
print(message.content)
provider.shutdown()
