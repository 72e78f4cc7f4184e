"""The judge: asks an OpenAI-compatible chat-completions endpoint whether a candidate's answer
does what the experts asked, at temperature 0, with a versioned prompt.

A verdict is `pass` or `fail` with the judge's reason; a reply that can't be read, or a call that
still fails after its tries (429 honouring `Retry-After`, 5xx, timeouts, a refused connection),
is `error` with the reason: never `fail`, since a judge that failed judged nothing. Whatever the
judge sends, the reason is text every database stores, at most `REASON_LENGTH` long: a candidate
can steer what a judge says. At most
`concurrency` calls are in flight at once from one process. No Flask and no database here: the
service stores and caches what this returns.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rfc8785

PROMPT_VERSION = "answer-1"
MAX_WAIT_SECONDS = 60.0  # the longest wait between two tries (a Retry-After is capped there)
REASON_LENGTH = 1000  # characters of a reason kept
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL and lone surrogates: no database stores them
SYSTEM = (
    "You grade an AI agent's answer for a team of domain experts. You are given what the "
    "experts expect, the answer of the run they corrected, and a candidate's answer. Reply "
    'with one JSON object and nothing else: {"verdict": "pass" or "fail", "reason": "one '
    'sentence"}.'
)
ASK = {
    "right": (
        "The experts judged the corrected run's answer right. Does the candidate's answer say "
        "what it said (the same substance and facts; wording, order and length may differ)? "
        "pass if it does, fail if it leaves out or contradicts something that matters."
    ),
    "wrong": (
        "The experts judged the corrected run's answer wrong. Does the candidate's answer do "
        "what the experts ask (their shouldSay and why below)? pass if it does, fail if it "
        "repeats the mistake or misses what they asked for."
    ),
}


@dataclass(frozen=True)
class Question:
    """One question for the judge: an answer part's expectation, the corrected run's output
    and a candidate's output (for calibration, the corrected output itself)."""

    expectation: dict[str, Any]  # {verdict: right | wrong, shouldSay?, why?}
    corrected: Any
    candidate: Any

    def key(self, model: str) -> str:
        """The cache's key: the same question to the same model and prompt is asked once."""
        asked = [model, PROMPT_VERSION, self.expectation, self.corrected, self.candidate]
        try:
            text = rfc8785.dumps(asked)
        except rfc8785.CanonicalizationError:
            text = json.dumps(asked, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(text).hexdigest()

    def messages(self) -> list[dict[str, str]]:
        expected = {k: v for k, v in self.expectation.items() if k != "verdict"}
        user = "\n\n".join(
            [
                ASK[self.expectation["verdict"]],
                "What the experts said: "
                + json.dumps(expected or "nothing more", ensure_ascii=False),
                "The corrected run's answer: " + json.dumps(self.corrected, ensure_ascii=False),
                "The candidate's answer: " + json.dumps(self.candidate, ensure_ascii=False),
            ]
        )
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Verdict:
    """A verdict as it is stored: its reason made storable (each NUL or lone surrogate a U+FFFD)
    and cut to `REASON_LENGTH`, whoever made it."""

    outcome: str  # pass | fail | error
    reason: str

    def __post_init__(self) -> None:
        reason = UNSTORABLE.sub("\ufffd", self.reason[:REASON_LENGTH])
        object.__setattr__(self, "reason", reason)


@dataclass(frozen=True)
class Settings:
    """Where the judge is and how patiently to ask it (from the `KINDGI_JUDGE_*` config)."""

    url: str
    model: str
    api_key: str | None = None
    timeout: float = 30.0  # seconds a call
    tries: int = 4
    concurrency: int = 8  # calls in flight at once, per process


class Judge:
    """A judge behind one endpoint, safe to share between threads."""

    def __init__(self, settings: Settings, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings, self.sleep = settings, sleep
        # imported here, in the workers: the openai package (and pydantic) nearly doubles a
        # process's objects, which every web worker's garbage collections would walk
        self.openai = openai = importlib.import_module("openai")
        self.client = openai.OpenAI(
            base_url=settings.url,
            api_key=settings.api_key or "none",  # local servers take any key
            timeout=settings.timeout,
            max_retries=0,  # retried here, honouring Retry-After, within `tries`
        )
        self.slots = threading.BoundedSemaphore(settings.concurrency)

    def ask(self, question: Question) -> Verdict:
        """The judge's verdict on one question; `error` with why when there is none."""
        openai, last = self.openai, ""
        for attempt in range(self.settings.tries):
            wait = min(2.0**attempt * 0.5, MAX_WAIT_SECONDS)
            try:
                with self.slots:
                    reply = self.client.chat.completions.create(
                        model=self.settings.model,
                        messages=question.messages(),
                        temperature=0,
                        response_format={"type": "json_object"},
                    )
                return read(reply)
            except openai.RateLimitError as exc:
                last = "429 too many requests"
                wait = _retry_after(exc.response, wait)
            except openai.APIStatusError as exc:
                if exc.status_code < 500:  # a request the judge will never take
                    return Verdict("error", f"the judge refused the question: {exc.status_code}")
                last = f"{exc.status_code} from the judge"
            except openai.APITimeoutError:
                last = f"no answer within {self.settings.timeout:g} s"
            except openai.APIConnectionError as exc:
                last = f"can't reach the judge: {exc.__cause__ or exc}"
            except Exception as exc:  # a body the client chokes on: not JSON, nested too deep, …
                return Verdict(
                    "error", f"the judge's reply could not be read: {type(exc).__name__}"
                )
            if attempt + 1 < self.settings.tries:
                self.sleep(wait)
        return Verdict(
            "error", f"the judge gave no verdict after {self.settings.tries} tries: {last}"
        )


def read(reply: Any) -> Verdict:
    """A reply's verdict: a JSON object {verdict: pass | fail, reason}; anything else is an
    error naming what came back."""
    try:
        content = reply.choices[0].message.content or ""
    except (AttributeError, IndexError, KeyError, TypeError):
        return Verdict("error", "the judge's reply has no message")
    if not isinstance(content, str):
        return Verdict("error", f"the judge's reply is not text: {type(content).__name__}")
    text = content.strip()
    if text.startswith("```"):  # a fenced block, as some models write
        text = text.strip("`").removeprefix("json").strip()
    try:
        said = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return Verdict("error", f"the judge's reply is not JSON: {content[:200]!r}")
    if not isinstance(said, dict) or said.get("verdict") not in ("pass", "fail"):
        return Verdict("error", f"the judge's reply has no pass/fail verdict: {content[:200]!r}")
    reason = said.get("reason")
    return Verdict(said["verdict"], str(reason) if reason else "(no reason given)")


def _retry_after(response: Any, default: float) -> float:
    try:
        return min(float(response.headers.get("retry-after", default)), MAX_WAIT_SECONDS)
    except (AttributeError, TypeError, ValueError):
        return default
