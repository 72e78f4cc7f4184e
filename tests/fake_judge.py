"""A stand-in for a hosted model: a real HTTP server on a loopback port speaking OpenAI's
`POST /v1/chat/completions`, answering as each test scripts it, and counting what it was asked
and how many calls were in flight at once."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: a verdict as the model's message, or a status, or garbage."""

    status: int = 200
    content: Any = None  # the message's content (None: a well-formed verdict)
    verdict: str = "pass"
    reason: str = "it says the same"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    body: bytes | None = None  # the whole HTTP body instead, as no model server should send


@dataclass
class FakeJudge:
    url: str
    script: Callable[[dict[str, Any]], Reply]
    asked: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(judge: FakeJudge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go in two writes: without TCP_NODELAY, Nagle's algorithm and the
        # client's delayed ACK hold the body back 40 ms, as no real model server does
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            with judge.lock:
                judge.asked.append(body)
                judge.in_flight += 1
                judge.most_in_flight = max(judge.most_in_flight, judge.in_flight)
            try:
                reply = judge.script(body)
                time.sleep(reply.delay)
                if reply.status != 200:
                    payload = {"error": {"message": "scripted", "type": "scripted"}}
                else:
                    content = reply.content
                    if content is None:
                        content = json.dumps({"verdict": reply.verdict, "reason": reply.reason})
                    payload = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                data = json.dumps(payload).encode() if reply.body is None else reply.body
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout test)
            finally:
                with judge.lock:
                    judge.in_flight -= 1

        def log_message(self, *args: object) -> None:
            """Quiet."""

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-call (a judge's worker killed, in bench/chaos.py: the connection
        reset, or the body cut short) is no error."""
        if not isinstance(sys.exc_info()[1], ConnectionError | ValueError):
            super().handle_error(request, client_address)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server for `handler` on a free loopback port while the block runs: the
    base URL an OpenAI client takes (`…/v1`). The stand-in model of tests/fake_model.py too."""
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def fake_judge(script: Callable[[dict[str, Any]], Reply]) -> Iterator[FakeJudge]:
    """A fake judge serving on a free loopback port while the block runs."""
    judge = FakeJudge("", script)
    with serving(_handler(judge)) as url:
        judge.url = url
        yield judge


def scripted(*replies: Reply, then: Reply | None = None) -> Callable[[dict[str, Any]], Reply]:
    """Answer with `replies` in turn, then with `then` (a pass) for every later call."""
    queue = list(replies)
    lock = threading.Lock()

    def script(_: dict[str, Any]) -> Reply:
        with lock:
            return queue.pop(0) if queue else (then or Reply())

    return script
