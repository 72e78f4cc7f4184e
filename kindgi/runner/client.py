"""The HTTP side of `kindgi test-run`: the server's /v1 routes through httpx, retried where a
retry is safe, every write with an Idempotency-Key so a retry never doubles anything."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from ..config import API_PREFIX

RETRY_STATUSES = {503}
RETRY_CODES = {"idempotency-key-in-flight", "database-busy"}


class CannotRun(Exception):
    """Why the command could not run (exit 2): one line, never a traceback."""


class Refused(Exception):
    """The server refused a request with its error envelope."""

    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(f"{status} {error.get('code')}: {error.get('message')}")
        self.status, self.code = status, error.get("code", "")
        self.details = error.get("details") or {}


class Client:
    """One server, one token, one agent."""

    def __init__(self, url: str, token: str, agent: str, *, patience: float = 120) -> None:
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "User-Agent": "kindgi-test-run"},
            timeout=httpx.Timeout(60, connect=10),
        )
        self.agent, self.patience = agent, patience

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, *, json: Any = None, key: str | None = None) -> Any:
        """One request, retried on a refused connection, 503 and an in-flight key (honouring
        `Retry-After`) for up to `patience` seconds; the answer's JSON."""
        headers = {"Idempotency-Key": key} if key else {}
        deadline, wait = time.monotonic() + self.patience, 0.5
        while True:
            try:
                resp = self.http.request(method, path, json=json, headers=headers)
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    where = self.http.base_url
                    raise CannotRun(f"the server at {where} can't be reached: {exc}") from None
                time.sleep(wait)
                wait = min(wait * 2, 5)
                continue
            if resp.status_code < 400:
                return resp.json() if "json" in resp.headers.get("content-type", "") else resp
            error = _error_of(resp)
            retry = resp.status_code in RETRY_STATUSES or error.get("code") in RETRY_CODES
            if retry and time.monotonic() < deadline:
                time.sleep(_retry_after(resp, wait))
                wait = min(wait * 2, 5)
                continue
            if resp.status_code == 401:
                raise CannotRun("the server refused the token (KINDGI_TOKEN): unauthenticated")
            raise Refused(resp.status_code, error)

    def agent_path(self, rest: str) -> str:
        return f"{API_PREFIX}/agents/{self.agent}/{rest}"

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every row of a paged list."""
        cursor = None
        while True:
            query = {**params, **({"cursor": cursor} if cursor else {})}
            page = self.call("GET", str(httpx.URL(path, params=query)))
            yield from page["data"]
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def write(self, path: str, body: Any) -> Any:
        """A POST with a fresh Idempotency-Key, the same on every retry of it."""
        return self.call("POST", path, json=body, key=f"kindgi-{uuid.uuid4()}")


def _error_of(resp: httpx.Response) -> dict[str, Any]:
    try:
        return resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        return {"code": "unexpected", "message": resp.text[:200]}


def _retry_after(resp: httpx.Response, default: float) -> float:
    try:
        return min(float(resp.headers.get("Retry-After", default)), 30)
    except ValueError:
        return default
