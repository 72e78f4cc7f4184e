"""`kindgi.Client`: the whole `/v1` API from Python, over httpx, with nothing of the server's.

```python
from kindgi import ApiError, Client

with Client("https://kindgi.example", "kgi_…") as kg:
    kg.counts("acme.drafting", project)              # {"cases": {"active": …, "retired": …}, …}
    for case in kg.cases("acme.drafting", project, kind="hand", q="notice"):
        ...                                           # every page, following nextCursor
    try:
        kg.retire("acme.drafting", case_id, "duplicate")
    except ApiError as exc:
        print(exc.code, exc.request_id)               # "case-retired", the X-Request-Id
```

Each method is one route (docs/design.md §6 and §9 list them, `/v1/openapi.json` has every
field; tests/test_client.py fails for an operation without a method). Bodies are the API's
JSON as it is (`add_case`, `revise`, `record_run`, `record_correction`); a method's keyword
arguments are the route's query parameters or body fields in snake_case (`added_by` is
`addedBy`, `rerun_of` is `rerunOf`); a `bool` is sent as `true`/`false`, a list as its items
comma-separated and a `datetime` (with its zone) in RFC 3339. A list comes back as `Rows`, which
reads its pages as it is iterated. A case's revision sends `If-Match` (`revise`): a stale one is
`412 case-changed`, raised, never retried.

Every write (POST, PATCH, DELETE) carries an `Idempotency-Key`, a fresh one per call and the same
on each retry of it, so a retry never does anything twice (docs/API-ROUTE-CONVENTIONS.md §3.1).
What is retried: 429, 503, `409 idempotency-key-in-flight` and a connection that failed or broke,
after `Retry-After` when the answer gives one (else a backoff doubling from `backoff`), each wait
at most `max_wait` seconds, `retries` times at most. Any other error answer, or one still
retriable when the retries run out, raises `ApiError`; a connection still failing then raises its
`httpx.TransportError`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Literal, TypedDict, Unpack
from urllib.parse import quote

import httpx

from . import exchange

RETRIED_STATUSES = {429, 503}
RETRIED_CODES = {"idempotency-key-in-flight"}
# A request that never got an answer; never a URL httpx can't send, which would fail again
RETRIED_FAULTS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
WRITES = {"POST", "PATCH", "DELETE", "PUT"}


class ApiError(Exception):
    """An error answer: its HTTP `status` and its envelope's `code`, `message`, `details` and
    `request_id` (docs/errors.md lists every code; branch on `code`). An answer that is not the
    envelope (a proxy's page) has the code `unexpected-answer` and its first 200 characters as
    the message."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" ({request_id})" if request_id else ""))
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.request_id = request_id

    @classmethod
    def of(cls, resp: httpx.Response) -> ApiError:
        """The error that `resp` answered."""
        try:
            error = resp.json()["error"]
            return cls(
                resp.status_code,
                error["code"],
                error["message"],
                error.get("details"),
                error.get("requestId"),
            )
        except (ValueError, KeyError, TypeError):
            said = resp.text.strip()[:200] or resp.reason_phrase
            request_id = resp.headers.get("X-Request-Id")
            return cls(resp.status_code, "unexpected-answer", said, None, request_id)


# ---------------------------------------------------------------- the lists' filters


class CaseFilters(TypedDict, total=False):
    """The cases list's filters, all combined (docs/design.md §4.1)."""

    include: Literal["retired"]  # retired cases too
    kind: str  # "correction", "hand", or both comma-separated
    q: str  # whole words in the expectation and the run's input and output
    tool: str  # the expectation names this tool
    part: str | list[str]  # cases with any of these parts: decisions, answer, items
    expert: bool  # experts' cases only (True) or the others (False)
    added_by: str  # a user's id or a service token's public id
    run_id: str  # cases of this run
    added_after: datetime | str  # added at or after
    added_before: datetime | str  # added before
    tag: str | list[str]  # cases with any of these tags
    page_size: int  # rows a request, 1..100 (the API's `limit`)


class ExportOptions(TypedDict, total=False):
    """What an export may narrow or widen."""

    include: Literal["retired"]  # retired cases too
    version: str  # a frozen version's cases (`v3`), by id, instead of the live set


class RunFilters(TypedDict, total=False):
    """The runs list's filters, all combined (docs/design.md §4.2)."""

    status: Literal["running", "finished"]
    version: str  # runs of this agent version
    tool: str  # runs that called this tool
    has_case: bool  # runs a case or correction was made from (True) or the others
    after: datetime | str  # at or after
    before: datetime | str  # before
    q: str  # text in the input or output
    page_size: int  # rows a request, 1..100


class TestRunOptions(TypedDict, total=False):
    """What a test run may say beside its project and candidate (docs/design.md §9.2)."""

    weighting: Literal["all", "experts-only"]
    baseline: str  # a done run to compare with
    rerun_of: str  # a done run whose failed or errored cases to grade again
    only: str | list[str]  # with rerun_of: failed, errored or both
    label: str  # a branch, a pull request
    metadata: dict[str, Any]  # a commit, a CI URL… (at most 4000 characters of JSON)
    items_threshold: float  # 0..1, 0.8 unless told
    sample: dict[str, int]  # a quick run: {"size": 100, "seed"?: 7} (docs/design.md §9.9)
    tags: list[str]  # grade only the cases with any of these tags


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _wire(value: Any) -> Any:
    """A query parameter's value as the API reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return value


def _query(**given: Any) -> dict[str, Any]:
    """Keyword arguments as the API's query or body: camelCase names, `page_size` as
    `limit`, values as `_wire` sends them, `None` left out."""
    if "page_size" in given:
        given["limit"] = given.pop("page_size")
    return {_camel(k): _wire(v) for k, v in given.items() if v is not None}


def _checked(given: dict[str, Any], allowed: type) -> dict[str, Any]:
    """`given` if each name is one of the TypedDict `allowed`'s: a misspelt filter is a
    TypeError, never a filter the server would ignore."""
    unknown = set(given) - set(allowed.__annotations__)
    if unknown:
        raise TypeError(f"unknown {allowed.__name__} name: {', '.join(sorted(unknown))}")
    return given


def _tags(add: str | Iterable[str], remove: str | Iterable[str]) -> dict[str, list[str]]:
    """A tags body: the tags given (a `str` is one tag), an empty list left out."""
    given = {"add": _names(add), "remove": _names(remove)}
    return {name: tags for name, tags in given.items() if tags}


def _names(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


def _json_lines(resp: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in _lines(resp):
        yield json.loads(line)


def _lines(resp: httpx.Response) -> Iterator[str]:
    try:
        yield from filter(None, resp.iter_lines())
    finally:
        resp.close()


def _chunks(resp: httpx.Response) -> Iterator[bytes]:
    try:
        yield from resp.iter_bytes()
    finally:
        resp.close()


# ---------------------------------------------------------------- paged lists


class Rows(Iterator[dict[str, Any]]):
    """The rows of a paged list, newest first (or as the route orders them), read a page at a
    time as they are iterated, following `nextCursor`. The first page is read when the list is
    asked for, so a refused query raises there; `first` is that page as answered, with what a
    list carries beside its rows (a comparison's `counts` and `pValue`, a diff's `counts`)."""

    def __init__(self, client: Client, path: str, params: dict[str, Any]) -> None:
        self._client, self._path, self._params = client, path, params
        self.first: dict[str, Any] = client._json("GET", path, params=params)
        self._page = self.first
        self._rows = iter(self.first["data"])

    def __next__(self) -> dict[str, Any]:
        for row in self._rows:
            return row
        while cursor := self._page.get("nextCursor"):
            self._page = self._client._json(
                "GET", self._path, params={**self._params, "cursor": cursor}
            )
            self._rows = iter(self._page["data"])
            for row in self._rows:
                return row
        raise StopIteration


# ---------------------------------------------------------------- the client


class Client:
    """One Kindgi server as one caller: `url` is the server's root (`https://kindgi.example`),
    `token` an API token (`kgi_…`). `retries`, `max_wait` and `backoff` bound the retries (see
    the module); `timeout` is seconds for each request. Use it in a `with` block, or `close()`
    it."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        retries: int = 5,
        max_wait: float = 30.0,
        backoff: float = 0.5,
        timeout: float = 60.0,
    ) -> None:
        self.retries, self.max_wait, self.backoff = retries, max_wait, backoff
        self.http = httpx.Client(
            base_url=url.rstrip("/") + "/v1",
            headers={"Authorization": f"Bearer {token}", "User-Agent": "kindgi-client"},
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10)),
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------ the wire

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        stream: bool = False,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One call: a success's answer (not yet read when `stream`), after the retries the
        module describes; every try of a write carries the same Idempotency-Key (and the same
        `headers`)."""
        headers = dict(headers or {})
        if method in WRITES:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        request = self.http.build_request(method, path, params=params, json=body, headers=headers)
        attempt = 0
        while True:
            try:
                resp = self.http.send(request, stream=stream)
            except RETRIED_FAULTS:
                if attempt == self.retries:
                    raise
                wait = self._wait(attempt, None)
            else:
                if resp.status_code < 400:
                    return resp
                resp.read()
                resp.close()
                error = ApiError.of(resp)
                retried = resp.status_code in RETRIED_STATUSES or (
                    resp.status_code == 409 and error.code in RETRIED_CODES
                )
                if attempt == self.retries or not retried:
                    raise error
                wait = self._wait(attempt, resp.headers.get("Retry-After"))
            time.sleep(wait)
            attempt += 1

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before the next try: `Retry-After` when the answer says (whole seconds),
        else the backoff, doubled each try; never more than `max_wait`."""
        try:
            wait = float(retry_after) if retry_after is not None else None
        except ValueError:  # an HTTP date: the backoff instead
            wait = None
        if wait is None or wait < 0:
            wait = self.backoff * 2**attempt
        return min(wait, self.max_wait)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    @staticmethod
    def _agent(agent: str, *rest: str) -> str:
        return "/".join(["/agents", *(quote(part, safe="") for part in (agent, *rest))])

    # ------------------------------------------------------------ the test set

    def counts(self, agent: str, project_id: str) -> dict[str, Any]:
        """The test set's counts in a project: `{agentId, projectId, cases: {active, retired},
        lastAddedAt?, frozenVersion?}` (docs/reference/test-set-counts.md)."""
        return self._json("GET", self._agent(agent, "test-set"), params={"projectId": project_id})

    def cases(self, agent: str, project_id: str, **filters: Unpack[CaseFilters]) -> Rows:
        """The project's cases of the agent's test set, newest added first, narrowed by
        `filters` (`CaseFilters`); each a case (docs/reference/case.md)."""
        params = _query(project_id=project_id, **_checked(filters, CaseFilters))
        return Rows(self, self._agent(agent, "test-set", "cases"), params)

    def case(self, agent: str, case_id: str) -> dict[str, Any]:
        """One case, with `snapshot: {input, output, calls, takenAt}` of its run."""
        return self._json("GET", self._agent(agent, "test-set", "cases", case_id))

    def case_record(self, agent: str, case_id: str) -> dict[str, Any]:
        """A case's record over its set's last 50 done full runs: `{caseId, runs, outcomes,
        failedBy, flaky, separation, lastFailed?}` (docs/design.md §9.10)."""
        return self._json("GET", self._agent(agent, "test-set", "cases", case_id, "record"))

    def health(self, agent: str, project_id: str) -> dict[str, Any]:
        """The test set's health: `{alwaysFailing, flaky, neverRun, contradicting, histogram}`
        (docs/design.md §9.11)."""
        params = {"projectId": project_id}
        return self._json("GET", self._agent(agent, "test-set", "health"), params=params)

    def add_case(self, agent: str, body: dict[str, Any]) -> dict[str, Any]:
        """Add a case by hand from a finished run: `body` is `{runId, decisions?, shouldCall?,
        mustNotCall?, answer?, shouldSay?, why?, items?}` (docs/reference/add-case.md); the
        case added."""
        return self._json("POST", self._agent(agent, "test-set", "cases"), body=body)

    def retire(
        self, agent: str, case_id: str, reason: str, *, from_test_run: str | None = None
    ) -> dict[str, Any]:
        """Retire a case (no test run checks it), saying why (1..1000 characters); the case.
        `from_test_run` names a test run that graded it, which then lists the retirement
        (docs/design.md §9.12). A retired one is `409 case-retired`."""
        path = self._agent(agent, "test-set", "cases", case_id, "retire")
        return self._json("POST", path, body=_query(reason=reason, from_test_run=from_test_run))

    def revise(
        self,
        agent: str,
        case_id: str,
        body: dict[str, Any],
        *,
        revision: int | None = None,
        from_test_run: str | None = None,
    ) -> dict[str, Any]:
        """Revise a case's expectation: `body` is a hand case's body without `runId`, plus
        `note` (why, 1..1000 characters); the case at its next `revision` (docs/design.md
        §4.4). `revision` is the one the caller read (a case's `revision`), sent as `If-Match`
        (the case's ETag, `"r<revision>"`): a case revised since is `412 case-changed`
        (`details["revision"]` the one now), raised and never retried over. Without it the
        case is read first, which guards only the moment between that read and this write.
        `from_test_run` as for `retire`. A retired case is `409 case-retired`, the same
        expectation `409 no-change`."""
        if revision is None:
            revision = self.case(agent, case_id)["revision"]
        path = self._agent(agent, "test-set", "cases", case_id, "revise")
        sent = {**body, **_query(from_test_run=from_test_run)}
        return self._json("POST", path, body=sent, headers={"If-Match": f'"r{revision}"'})

    def revisions(self, agent: str, case_id: str) -> list[dict[str, Any]]:
        """Every expectation the case has had, the current one first: `{revision, expect,
        note?, by, at, fromTestRun?}`; revision 1 is the case as added, with no note."""
        path = self._agent(agent, "test-set", "cases", case_id, "revisions")
        return self._json("GET", path)["data"]

    def tag(
        self,
        agent: str,
        case_id: str,
        *,
        add: str | Iterable[str] = (),
        remove: str | Iterable[str] = (),
    ) -> dict[str, Any]:
        """Add tags to a case and take others off it (a `str` is one tag; lower-case letters,
        digits and hyphens, at most 20 a case; at least one change, no tag in both); the case,
        `tags` sorted. Tags change no version."""
        path = self._agent(agent, "test-set", "cases", case_id, "tags")
        return self._json("POST", path, body=_tags(add, remove))

    def tag_cases(
        self,
        agent: str,
        project_id: str,
        case_ids: Iterable[str],
        *,
        add: str | Iterable[str] = (),
        remove: str | Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """Tag 1..500 cases of the project's set at once, active or retired, all or none, as
        `tag`; the cases, in id order. Ids it lacks are `404 case-not-found` naming them."""
        body = {"projectId": project_id, "caseIds": list(case_ids), **_tags(add, remove)}
        path = self._agent(agent, "test-set", "cases", "tags")
        return self._json("POST", path, body=body)["data"]

    def restore(self, agent: str, case_id: str) -> dict[str, Any]:
        """Make a retired case active again; the case. An active one is `409 case-active`."""
        return self._json("POST", self._agent(agent, "test-set", "cases", case_id, "restore"))

    def retire_cases(
        self, agent: str, project_id: str, case_ids: Iterable[str], reason: str
    ) -> list[dict[str, Any]]:
        """Retire 1..500 cases of the project's set at once, all or none; the cases, in id
        order. Ids it lacks are `404 case-not-found`, retired ones `409 case-retired`, each
        naming them in `details["caseIds"]`."""
        body = {"projectId": project_id, "caseIds": list(case_ids), "reason": reason}
        path = self._agent(agent, "test-set", "cases", "retire")
        return self._json("POST", path, body=body)["data"]

    def restore_cases(
        self, agent: str, project_id: str, case_ids: Iterable[str]
    ) -> list[dict[str, Any]]:
        """Restore 1..500 retired cases at once, all or none, as `retire_cases` (active ones
        are `409 case-active`)."""
        body = {"projectId": project_id, "caseIds": list(case_ids)}
        path = self._agent(agent, "test-set", "cases", "restore")
        return self._json("POST", path, body=body)["data"]

    def export(
        self, agent: str, project_id: str, **options: Unpack[ExportOptions]
    ) -> Iterator[dict[str, Any]]:
        """The whole test set, streamed: each case as listed plus its run's `input`, `output`
        and `calls`; `options` are `ExportOptions` (the retired cases too, or a version's)."""
        return _json_lines(self._export(agent, project_id, "jsonl", options))

    def export_csv(
        self, agent: str, project_id: str, **options: Unpack[ExportOptions]
    ) -> Iterator[bytes]:
        """The same export as CSV, as chunks of bytes to write to a file (docs/deploy.md lists
        the columns)."""
        return _chunks(self._export(agent, project_id, "csv", options))

    def _export(
        self, agent: str, project_id: str, form: str, options: ExportOptions
    ) -> httpx.Response:
        """The export's answer, its status checked and its body still to read."""
        params = _query(project_id=project_id, format=form, **_checked(options, ExportOptions))
        path = self._agent(agent, "test-set", "export")
        return self._send("GET", path, params=params, stream=True)

    def import_cases(
        self, agent: str, project_id: str, lines: Iterable[str | bytes | dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Add an export's cases (its JSON lines, or the objects `export` yields) to the set
        in `project_id`: for each, a finished run of the exported input, output and calls,
        then a hand case on it with the same expectation; the cases added, in order. Line by
        line, not all or nothing: an `ApiError` leaves the earlier lines added (`flask kindgi
        import` on the server is all or nothing)."""
        added = []
        for line in exchange.read_lines(lines):
            found = exchange.imported(line, project_id)
            run = self.record_run(agent, found.run)
            added.append(self.add_case(agent, {**found.case, "runId": run["id"]}))
        return added

    def versions(self, agent: str, project_id: str, *, page_size: int | None = None) -> Rows:
        """The test set's frozen versions, newest first: `{version, testSetId, frozenAt,
        frozenBy, cases: {total, expert}}`."""
        params = _query(project_id=project_id, page_size=page_size)
        return Rows(self, self._agent(agent, "test-set", "versions"), params)

    def diff(
        self,
        agent: str,
        project_id: str,
        version: str,
        other: str,
        *,
        change: Literal["added", "removed"] | None = None,
        page_size: int | None = None,
    ) -> Rows:
        """The cases in `version` but not in `other` (`change="added"`), the reverse
        (`"removed"`) or both: `{caseId, change, kind, expert}` by case id; `first["counts"]`
        is `{added, removed}`, never filtered. An unknown version is `404 version-not-found`."""
        params = _query(project_id=project_id, change=change, page_size=page_size)
        path = self._agent(agent, "test-set", "versions", version, "diff", other)
        return Rows(self, path, params)

    # ------------------------------------------------------------ runs and corrections

    def runs(self, agent: str, project_id: str, **filters: Unpack[RunFilters]) -> Rows:
        """The agent's runs in the project, newest first, narrowed by `filters` (`RunFilters`):
        `{id, projectId, version, status, input, output, calls, erased, at, hasCase, …}`."""
        params = _query(project_id=project_id, **_checked(filters, RunFilters))
        return Rows(self, self._agent(agent, "runs"), params)

    def record_run(self, agent: str, body: dict[str, Any]) -> dict[str, Any]:
        """Record a run of the agent: `body` is `{projectId, version, status ("running" or
        "finished"), input?, output?, calls?, replayOf?}`; the run, with the id the server
        made."""
        return self._json("POST", self._agent(agent, "runs"), body=body)

    def record_correction(self, agent: str, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Correct a run: `body` is a case's body without `runId`, plus `group?`; the
        correction, `status: "open"`."""
        return self._json("POST", self._agent(agent, "runs", run_id, "corrections"), body=body)

    def set_correction_status(self, agent: str, correction_id: str, status: str) -> dict[str, Any]:
        """Move a correction to `status` (`open`, `fixed`, `wont-fix`, …); the correction.
        The counts follow at once."""
        path = self._agent(agent, "corrections", correction_id)
        return self._json("PATCH", path, body={"status": status})

    # ------------------------------------------------------------ test runs

    def start_test_run(
        self, agent: str, project_id: str, candidate: str, **options: Unpack[TestRunOptions]
    ) -> dict[str, Any]:
        """Freeze the project's test set (or reuse its unchanged version) and open a test run
        of `candidate`, the agent version under test; `options` are `TestRunOptions`. The run
        (docs/design.md §9.2). No case to grade is `409 nothing-to-grade`."""
        options = _checked(options, TestRunOptions)
        body = _query(project_id=project_id, candidate=candidate, **options)
        if "tags" in options:  # a list in the body, not a query's comma-joined text
            body["tags"] = list(options["tags"])
        return self._json("POST", self._agent(agent, "test-runs"), body=body)

    def test_runs(
        self,
        agent: str,
        project_id: str,
        *,
        candidate: str | None = None,
        page_size: int | None = None,
    ) -> Rows:
        """The test set's runs, newest first, of one candidate if named."""
        params = _query(project_id=project_id, candidate=candidate, page_size=page_size)
        return Rows(self, self._agent(agent, "test-runs"), params)

    def test_run(self, agent: str, run_id: str) -> dict[str, Any]:
        """A test run: its status, its cases by outcome, each part's tallies, `passRate?`,
        `comparison?` with its baseline (docs/design.md §9.2)."""
        return self._json("GET", self._agent(agent, "test-runs", run_id))

    def cases_to_answer(
        self, agent: str, run_id: str, *, awaiting: bool = True, page_size: int | None = None
    ) -> Rows:
        """What a runner answers: the run's cases still awaiting a result (every case with
        `awaiting=False`), in a stable order, as `{caseId, kind, expert, input, parts}`;
        `page_size` 1..500, 100 unless told."""
        params = _query(awaiting=awaiting, page_size=page_size)
        return Rows(self, self._agent(agent, "test-runs", run_id, "cases"), params)

    def send_results(
        self, agent: str, run_id: str, results: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Send 1..500 results, `{caseId, output, calls, ranked?}` or `{caseId, error}`,
        graded at once: `{accepted, duplicates, run}`. The same results again are a no-op; a
        different one for a case is `409 result-conflict`, a closed run `409 test-run-closed`,
        a case not in the run `400 bad-input` naming the entry."""
        path = self._agent(agent, "test-runs", run_id, "results")
        return self._json("POST", path, body={"results": results})

    def finish_test_run(self, agent: str, run_id: str) -> dict[str, Any]:
        """No more results: every case without one becomes an error (`no-result`); the run.
        A run no longer open is `409 test-run-closed`."""
        return self._json("POST", self._agent(agent, "test-runs", run_id, "finish"), body={})

    def cancel_test_run(self, agent: str, run_id: str) -> dict[str, Any]:
        """Cancel an open or grading run; the run, `status: "canceled"`."""
        return self._json("POST", self._agent(agent, "test-runs", run_id, "cancel"), body={})

    def results(
        self,
        agent: str,
        run_id: str,
        *,
        outcome: str | list[str] | None = None,
        part: Literal["decisions", "answer", "items"] | None = None,
        page_size: int | None = None,
    ) -> Rows:
        """The run's cases that have a result, by case id; `outcome` (pass, fail, error,
        pending, ungraded) filters on the case's outcome, or with `part` on that part's."""
        params = _query(outcome=outcome, part=part, page_size=page_size)
        return Rows(self, self._agent(agent, "test-runs", run_id, "results"), params)

    def result(self, agent: str, run_id: str, case_id: str) -> dict[str, Any]:
        """One case's result: the candidate's output and calls beside the case's expectation
        and snapshot, each part's grade and why."""
        return self._json("GET", self._agent(agent, "test-runs", run_id, "results", case_id))

    def compare(
        self,
        agent: str,
        run_id: str,
        other_id: str,
        *,
        change: str | list[str] | None = None,
        page_size: int | None = None,
    ) -> Rows:
        """Run `run_id` against the baseline `other_id`, pair by pair: `{caseId, change,
        outcome, baselineOutcome, itemsDelta?}` by case id, `change` (regressed, fixed,
        still-failing, …) filtering them; `first["counts"]` counts every change (never
        filtered) and `first["pValue"]` is the exact McNemar test's (docs/design.md §9.5)."""
        params = _query(change=change, page_size=page_size)
        return Rows(self, self._agent(agent, "test-runs", run_id, "compare", other_id), params)

    def junit_report(self, agent: str, run_id: str) -> bytes:
        """The run as JUnit XML, for a CI test tab: a testsuite, a testcase per case."""
        return self._send("GET", self._agent(agent, "test-runs", run_id, "report.xml")).content

    # ------------------------------------------------------------ tokens and the document

    def create_token(
        self, name: str, *, expires_at: datetime | str | None = None
    ) -> dict[str, Any]:
        """A new API token of the caller: `{id, name, createdAt, expiresAt, secret}`, the only
        answer that shows its secret (never kept for a replay: a retry after a lost answer is
        `409 idempotency-key-replay-withheld`; `tokens()` lists it)."""
        body = _query(name=name, expires_at=expires_at)
        return self._json("POST", "/tokens", body=body)

    def tokens(self, *, page_size: int | None = None) -> Rows:
        """The caller's tokens, newest first, revoked and expired ones too; never a secret."""
        return Rows(self, "/tokens", _query(page_size=page_size))

    def revoke_token(self, token_id: str) -> None:
        """Revoke one of the caller's tokens (again is no error); someone else's is
        `404 not-found`."""
        self._send("DELETE", f"/tokens/{quote(token_id, safe='')}")

    def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI 3.1 document."""
        return self._json("GET", "/openapi.json")
