"""The judge's client (docs/design.md §9.4) against a real HTTP server speaking OpenAI's chat
completions: verdicts, retries on 429 (honouring Retry-After), 5xx and timeouts, a refused
connection and garbage replies each end right, a failing judge is never a `fail`, and never
more calls in flight than the limit."""

from __future__ import annotations

import socket
import threading

import pytest
from fake_judge import Reply, fake_judge, scripted

from kindgi import judge as judge_module
from kindgi.judge import Judge, Question, Settings

RIGHT = Question({"verdict": "right"}, {"answer": "Use clause 7."}, {"answer": "Clause 7 applies."})
WRONG = Question(
    {"verdict": "wrong", "shouldSay": "Cite clause 9.", "why": "Clause 7 was repealed."},
    {"answer": "Use clause 7."},
    {"answer": "Use clause 9, since 7 was repealed."},
)


def judge_at(url: str, **settings) -> tuple[Judge, list[float]]:
    slept: list[float] = []
    judge = Judge(Settings(url=url, model="judge-1", **settings), sleep=slept.append)
    return judge, slept


def test_a_verdict_comes_back_with_its_reason_from_a_question_asked_at_temperature_0():
    with fake_judge(scripted(Reply(verdict="fail", reason="It still cites clause 7."))) as fake:
        judge, _ = judge_at(fake.url)
        verdict = judge.ask(WRONG)
    assert (verdict.outcome, verdict.reason) == ("fail", "It still cites clause 7.")
    (asked,) = fake.asked
    assert asked["model"] == "judge-1" and asked["temperature"] == 0
    assert asked["response_format"] == {"type": "json_object"}
    said = asked["messages"][1]["content"]
    for text in ("Cite clause 9.", "Clause 7 was repealed.", "Use clause 7.", "since 7 was"):
        assert text in said


def test_a_429_is_retried_after_the_time_it_names():
    retry = Reply(status=429, headers={"Retry-After": "2"})
    with fake_judge(scripted(retry, retry)) as fake:
        judge, slept = judge_at(fake.url)
        verdict = judge.ask(RIGHT)
    assert verdict.outcome == "pass" and len(fake.asked) == 3
    assert slept == [2.0, 2.0]


def test_server_errors_are_retried_with_backoff_then_answered():
    with fake_judge(scripted(Reply(status=500), Reply(status=503))) as fake:
        judge, slept = judge_at(fake.url)
        assert judge.ask(RIGHT).outcome == "pass"
    assert len(fake.asked) == 3 and slept == [0.5, 1.0]


@pytest.mark.parametrize(
    ("replies", "said"),
    [
        ([Reply(status=500)] * 4, "after 4 tries: 500 from the judge"),
        ([Reply(delay=1.5)] * 4, "after 4 tries: no answer within 0.3 s"),
        ([Reply(status=429)] * 4, "after 4 tries: 429 too many requests"),
        ([Reply(content="I think it passes.")], "not JSON"),
        ([Reply(content='{"verdict": "maybe", "reason": "?"}')], "no pass/fail verdict"),
        ([Reply(content="[1, 2]")], "no pass/fail verdict"),
        ([Reply(status=400)], "refused the question: 400"),
    ],
)
def test_a_judge_that_fails_gives_an_error_with_its_reason_never_a_fail(replies, said):
    # a short timeout only where the replies are late: on a loaded host a prompt reply may take
    # longer than 0.3 s, and the retry it made was answered by a script that had run out
    timeout = 0.3 if any(reply.delay for reply in replies) else 30
    with fake_judge(scripted(*replies)) as fake:
        judge, _ = judge_at(fake.url, timeout=timeout)
        verdict = judge.ask(RIGHT)
    assert verdict.outcome == "error"
    assert said in verdict.reason


def test_a_refused_connection_is_retried_then_an_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes
    judge, slept = judge_at(f"http://127.0.0.1:{port}/v1")
    verdict = judge.ask(RIGHT)
    assert verdict.outcome == "error" and "can't reach the judge" in verdict.reason
    assert len(slept) == 3


def test_a_fenced_json_reply_is_read():
    fenced = '```json\n{"verdict": "pass", "reason": "Same facts."}\n```'
    with fake_judge(scripted(Reply(content=fenced))) as fake:
        judge, _ = judge_at(fake.url)
        assert judge.ask(RIGHT).outcome == "pass"


def test_never_more_calls_in_flight_than_the_limit():
    with fake_judge(scripted(then=Reply(delay=0.15))) as fake:
        judge, _ = judge_at(fake.url, concurrency=3)
        threads = [threading.Thread(target=judge.ask, args=(RIGHT,)) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(fake.asked) == 12
    assert fake.most_in_flight == 3  # at the limit, never past it


def test_a_questions_key_names_the_model_the_prompt_and_what_was_asked(monkeypatch):
    same = Question({"verdict": "right"}, {"n": 1}, {"n": 2.0})
    key = same.key("m")
    assert key == Question({"verdict": "right"}, {"n": 1.0}, {"n": 2}).key("m")  # JSON values
    assert key != same.key("other-model")
    assert key != Question({"verdict": "right"}, {"n": 1}, {"n": 3}).key("m")
    monkeypatch.setattr(judge_module, "PROMPT_VERSION", "answer-2")
    assert same.key("m") != key
