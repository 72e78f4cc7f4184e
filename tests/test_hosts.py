"""Two "hosts" (two gunicorn masters, 4 workers each) on one database behave as one service:
Idempotency-Key claims, counts and cursors hold across every process."""

from __future__ import annotations

import itertools
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from conftest import AGENT, P1, app_on
from live import gunicorn

ROUNDS, CONCURRENT = 20, 20
AUTH = {"Authorization": "Bearer kgi_admin"}
CASES = f"/v1/agents/{AGENT}/test-set/cases"
COUNTS = f"/v1/agents/{AGENT}/test-set?projectId={P1}"


@pytest.fixture(scope="module")
def hosts(databases, tmp_path_factory):
    """Both hosts, started once for the file (eight workers' start is most of a test's time):
    each test measures what it changed, from what it read first."""
    logs = tmp_path_factory.mktemp("hosts")
    url = databases.clone()
    with (
        app_on(databases, url),
        gunicorn(url, logs / "a.log") as a,
        gunicorn(url, logs / "b.log") as b,
    ):
        yield a, b


def all_case_ids(bases, **params) -> list[str]:
    """Every case, paging with each next cursor sent to the other host in turn."""
    ids, cursor = [], None
    for base in itertools.cycle(bases):
        query = {"projectId": P1, "limit": 7, **params, **({"cursor": cursor} if cursor else {})}
        resp = requests.get(base + CASES, params=query, headers=AUTH, timeout=10)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        ids += [case["id"] for case in page["data"]]
        cursor = page.get("nextCursor")
        if not page["hasMore"]:
            return ids


def test_same_key_requests_spread_over_two_hosts_make_one_case_per_key(hosts):
    before = set(all_case_ids(hosts))
    body = {"runId": "run-1", "answer": "right"}
    for round_ in range(ROUNDS):
        headers = {**AUTH, "Idempotency-Key": f"hosts-{round_}-{uuid.uuid4().hex}"}
        barrier = threading.Barrier(CONCURRENT)

        def send(i, headers=headers, barrier=barrier):
            barrier.wait(timeout=10)
            resp = requests.post(hosts[i % 2] + CASES, json=body, headers=headers, timeout=30)
            return resp.status_code, resp.content, resp.headers.get("Retry-After")

        with ThreadPoolExecutor(CONCURRENT) as pool:
            answers = list(pool.map(send, range(CONCURRENT), timeout=90))
        created = {content for status, content, _ in answers if status == 201}
        assert len(created) == 1, answers  # every 201 is the same answer, byte for byte
        for status, content, retry_after in answers:
            assert status == 201 or (
                status == 409
                and b"idempotency-key-in-flight" in content
                and retry_after
                and retry_after.isdigit()
            ), content
    after = all_case_ids(hosts)
    assert len(after) == len(set(after))  # paging across hosts saw no case twice
    assert len(set(after) - before) == ROUNDS


def test_counts_stay_exact_when_both_hosts_write_at_once(hosts):
    start = requests.get(hosts[0] + COUNTS, headers=AUTH, timeout=10).json()["cases"]["active"]
    n = 40

    def add(i):
        resp = requests.post(
            hosts[i % 2] + CASES,
            json={"runId": "run-2", "answer": "right"},
            headers=AUTH,
            timeout=30,
        )
        return resp.status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(add, range(n), timeout=120))
    assert statuses.count(201) == n, statuses
    for base in hosts:
        counts = requests.get(base + COUNTS, headers=AUTH, timeout=10).json()["cases"]
        assert counts["active"] == start + n
    assert len(all_case_ids(hosts)) == start + n
