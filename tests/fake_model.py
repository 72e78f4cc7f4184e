"""A stand-in for a hosted model that agents call: a real HTTP server on a loopback port
speaking OpenAI's `POST /v1/chat/completions`. Its agent's turn is scripted: while the
conversation has no tool result yet it asks for the scripted tool calls, then it answers with
the final text, as a model driving an agent does."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fake_judge import serving


@dataclass
class FakeModel:
    """What the model asks for (`calls`: each `(tool, args)`, in one message), then says."""

    calls: list[tuple[str, dict[str, Any]]]
    answer: str
    url: str = ""
    asked: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant's message for this request: the tool calls first, then the answer."""
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        if answered or not self.calls:
            return {"role": "assistant", "content": self.answer}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args)},
                }
                for n, (tool, args) in enumerate(self.calls)
            ],
        }


def _handler(model: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # see tests/fake_judge.py

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            with model.lock:
                model.asked.append(body)
            message = model.reply(body)
            payload = {
                "id": f"chatcmpl-{len(model.asked)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                        "message": message,
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            """Quiet."""

    return Handler


@contextmanager
def fake_model(calls: list[tuple[str, dict[str, Any]]], answer: str) -> Iterator[FakeModel]:
    """A scripted model serving on a free loopback port while the block runs; its `url` is the
    base URL an OpenAI client takes (`…/v1`)."""
    model = FakeModel(calls, answer)
    with serving(_handler(model)) as url:
        model.url = url
        yield model
