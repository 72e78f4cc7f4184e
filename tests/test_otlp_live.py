"""Real agents send their runs to a live gunicorn as OpenTelemetry traces (docs/design.md §10).

Each agent is a process of its own, configured only by the standard variables, and asks a
stand-in model (tests/fake_model.py, OpenAI's HTTP protocol) that answers with two tool calls,
then with its answer. The OpenAI Agents SDK, traced by OpenInference, exports protobuf through
the SDK's OTLP/HTTP exporter, a few spans a request so that children come before their root;
an agent on the plain OpenAI client, traced by OpenTelemetry's official instrumentation (GenAI
conventions), exports OTLP/JSON. The run that arrives has the input, the calls with their
arguments in order, and the output the agent saw. A worker SIGKILLed while it holds an export
loses nothing: the exporter sends it again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import AGENT, P1
from databases import write_lock
from fake_model import FakeModel, fake_model
from live import ROOT, gunicorn, gunicorn_master

TRACED_AGENT = str(ROOT / "docs/examples/traced_agent.py")
OPENAI_V2_AGENT = str(ROOT / "tests/openai_v2_agent.py")
CALLS = [("lookup", {"q": "notice period"}), ("lookup", {"q": "holidays"})]
ANSWER = "Thirty days, and holidays do not count."
GENAI_CONTENT = {  # without these, the official instrumentation records no message at all
    "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
}


def agent_env(base: str, model: FakeModel, **more: str) -> dict[str, str]:
    """What an agent process is told: where Kindgi is, its token, where the run belongs, where
    its model is."""
    return {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": base,
        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer kgi_writer",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "60",
        "OTEL_RESOURCE_ATTRIBUTES": f"kindgi.agent.id={AGENT},kindgi.project.id={P1},"
        "service.version=1.4.0",
        "OPENAI_BASE_URL": model.url,
        "OPENAI_API_KEY": "sk-stand-in",
        **more,
    }


def run_agent(script: str, question: str, env: dict[str, str]) -> str:
    """Run an agent to its end; what it printed (its answer)."""
    done = subprocess.run(
        [sys.executable, script, question], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def run_asked(base: str, question: str) -> dict[str, Any]:
    """The one run whose input has `question` as a user's message."""
    resp = requests.get(
        f"{base}/v1/agents/{AGENT}/runs?projectId={P1}&limit=100",
        headers={"Authorization": "Bearer kgi_admin"},
        timeout=30,
    )
    resp.raise_for_status()
    found = [
        run
        for run in resp.json()["data"]
        if isinstance(run["input"], list) and {"role": "user", "content": question} in run["input"]
    ]
    assert len(found) == 1, resp.json()["data"][:3]
    return found[0]


ASKED_FOR = [{"tool": tool, "args": args} for tool, args in CALLS]


@pytest.fixture
def url(databases):
    """A copy of the test world for the live server; dropped afterwards."""
    copy = databases.clone()
    yield copy
    databases.drop(copy)


def test_an_openai_agents_sdk_run_arrives_whole_though_its_children_came_first(url, tmp_path):
    """Three spans a request: the root comes last, in its own export; one run, finished."""
    question = "What is the notice period?"
    with fake_model(CALLS, ANSWER) as model, gunicorn(url, tmp_path / "g.log", workers=2) as base:
        env = agent_env(base, model, OTEL_BSP_MAX_EXPORT_BATCH_SIZE="3")
        said = run_agent(TRACED_AGENT, question, env)
        run = run_asked(base, question)
    assert said == ANSWER
    assert run["status"] == "finished" and run["version"] == "1.4.0"
    assert run["input"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": question},
    ]
    assert run["calls"] == ASKED_FOR  # the tool spans, in the order they ran
    assert run["output"] == {"role": "assistant", "content": ANSWER}
    assert len(model.asked) == 2


def test_an_agent_traced_by_the_official_openai_instrumentation_arrives_as_otlp_json(url, tmp_path):
    """GenAI conventions: no tool spans, so the run's calls are what the model asked for,
    once each; and without the two settings the instrumentation records no message at all."""
    question = "How long is the notice period?"
    with fake_model(CALLS, ANSWER) as model, gunicorn(url, tmp_path / "g.log", workers=2) as base:
        said = run_agent(OPENAI_V2_AGENT, question, agent_env(base, model, **GENAI_CONTENT))
        run = run_asked(base, question)
        before = requests.get(
            f"{base}/v1/agents/{AGENT}/runs?projectId={P1}&limit=100",
            headers={"Authorization": "Bearer kgi_admin"},
            timeout=30,
        ).json()["data"]
        run_agent(OPENAI_V2_AGENT, "Unseen?", agent_env(base, model))
        after = requests.get(
            f"{base}/v1/agents/{AGENT}/runs?projectId={P1}&limit=100",
            headers={"Authorization": "Bearer kgi_admin"},
            timeout=30,
        ).json()["data"]
    assert said == ANSWER
    assert run["status"] == "finished" and run["version"] == "1.4.0"
    assert run["input"] == [{"role": "user", "content": question}]
    assert run["calls"] == ASKED_FOR
    assert run["output"] == {"role": "assistant", "content": ANSWER}
    blind = [r for r in after if r["id"] not in {b["id"] for b in before}]
    assert [(r["status"], r["input"], r["output"], r["calls"]) for r in blind] == [
        ("finished", None, None, [])
    ]


def _workers(master: int) -> list[int]:
    """The gunicorn master's children: its workers."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            found.append(int(stat.parent.name))
    return found


def _connected(pid: int, port: int) -> bool:
    """Whether process `pid` has a TCP connection open to `port` on loopback."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            sockets.add(link[len("socket:[") : -1])
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()  # local, remote (hex ip:port), state (01: established), inode
        if fields[3] == "01" and int(fields[2].split(":")[1], 16) == port and fields[9] in sockets:
            return True
    return False


def test_a_worker_killed_while_it_holds_an_export_loses_nothing(url, tmp_path):
    """The database's write lock is held elsewhere, so the export waits inside a worker (its
    connection open); every worker is then SIGKILLed. The exporter's request fails, it sends
    it again, and the run arrives whole."""
    question = "Is the notice period longer in the first year?"
    with (
        fake_model(CALLS, ANSWER) as model,
        gunicorn_master(url, tmp_path / "g.log", workers=2) as (master, base),
    ):
        env = agent_env(base, model)
        with write_lock(url):
            agent = subprocess.Popen(
                [sys.executable, TRACED_AGENT, question],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + 120
            port = int(base.rsplit(":", 1)[1])
            while not _connected(agent.pid, port):  # its export waits for the lock, in a worker
                assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()
                time.sleep(0.05)
            time.sleep(0.5)
            assert _connected(agent.pid, port)
            killed = _workers(master.pid)
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        out, err = agent.communicate(timeout=180)
        assert agent.returncode == 0, err[-3000:]
        run = run_asked(base, question)
    assert killed
    assert out.strip() == ANSWER
    assert run["status"] == "finished"
    assert run["calls"] == ASKED_FOR
    assert run["output"] == {"role": "assistant", "content": ANSWER}
