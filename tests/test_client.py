"""`kindgi.Client` against a live gunicorn, one for the module: every method, every refusal as an
`ApiError` with the envelope's code and request id, the lists walked page by page, and the
retries through a real front that answers faults (tests/live.py) before it lets requests by.

The tests share the server, so each makes the cases and runs it looks at and compares counts
before and after, never with the world's absolute numbers.
"""

from __future__ import annotations

import csv
import inspect
import io
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args, get_type_hints

import httpx
import pytest
from conftest import AGENT, P1, P2, app_on
from live import Fault, Front, free_port, front, gunicorn

import kindgi
from kindgi import ApiError, Client

QUESTION = {"q": "Draft a lease clause"}  # run-1's input
WRONG = {"answer": "wrong", "shouldSay": "Cite clause 7."}  # a revision of a hand case


@pytest.fixture(scope="module")
def served(databases, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A gunicorn on a copy of the test world: its base URL and its log."""
    log = tmp_path_factory.mktemp("client") / "gunicorn.log"
    with (
        app_on(databases, databases.clone()) as app,
        gunicorn(app.config["SQLALCHEMY_DATABASE_URI"], log, 2) as base,
    ):
        yield base, log


@pytest.fixture
def base(served) -> str:
    return served[0]


@pytest.fixture
def kg(base) -> Iterator[Client]:
    with Client(base, "kgi_admin") as client:
        yield client


@contextmanager
def flaky(base: str, faults: list[Fault], **options: Any) -> Iterator[tuple[Front, Client]]:
    """A client of the server through a front answering `faults` first."""
    with front(base, faults) as proxy, Client(proxy.url, "kgi_admin", **options) as client:
        yield proxy, client


def hand_case(kg: Client, **body: Any) -> dict[str, Any]:
    return kg.add_case(AGENT, {"runId": "run-1", "answer": "right", **body})


def active(kg: Client) -> int:
    return kg.counts(AGENT, P1)["cases"]["active"]


# ---------------------------------------------------------------- the package


@pytest.mark.parametrize("module", ["kindgi", "kindgi.runner"])
def test_the_client_and_the_ci_command_load_no_flask(tmp_path, module):
    code = f"import sys, {module}; print(sorted({{'flask', 'sqlalchemy'}} & set(sys.modules)))"
    said = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(Path(kindgi.__file__).parent.parent)},
    ).stdout
    assert said.strip() == "[]"
    assert callable(kindgi.create_app)  # still there, loaded on first use


# ---------------------------------------------------------------- the test set


def test_a_case_is_added_read_retired_and_restored_and_the_counts_follow(kg):
    before = kg.counts(AGENT, P1)
    case = hand_case(kg, why="Cite the clause.")
    assert case["kind"] == "hand" and case["runId"] == "run-1" and "retired" not in case
    assert kg.counts(AGENT, P1)["cases"]["active"] == before["cases"]["active"] + 1
    read = kg.case(AGENT, case["id"])
    assert read["id"] == case["id"] and read["snapshot"]["input"] == QUESTION

    retired = kg.retire(AGENT, case["id"], "duplicate")
    assert retired["retired"]["reason"] == "duplicate"
    assert kg.counts(AGENT, P1)["cases"] == {
        "active": before["cases"]["active"],
        "retired": before["cases"]["retired"] + 1,
    }
    restored = kg.restore(AGENT, case["id"])
    assert "retired" not in restored
    assert active(kg) == before["cases"]["active"] + 1


def test_a_cases_record_and_the_sets_health_are_read(kg):
    made = hand_case(kg)
    assert kg.case_record(AGENT, made["id"])["runs"] == 0
    health = kg.health(AGENT, P1)
    assert made["id"] in health["neverRun"]["caseIds"] and len(health["histogram"]) == 10


def test_cases_are_retired_and_restored_together(kg):
    ids = sorted(hand_case(kg)["id"] for _ in range(3))
    before = kg.counts(AGENT, P1)["cases"]
    retired = kg.retire_cases(AGENT, P1, iter(ids), "superseded")
    assert [c["id"] for c in retired] == ids
    assert all(c["retired"]["reason"] == "superseded" for c in retired)
    after = kg.counts(AGENT, P1)["cases"]
    assert (after["active"], after["retired"]) == (before["active"] - 3, before["retired"] + 3)
    restored = kg.restore_cases(AGENT, P1, ids)
    assert [c["id"] for c in restored] == ids and not any("retired" in c for c in restored)
    assert kg.counts(AGENT, P1)["cases"] == before


def test_a_case_is_revised_from_the_revision_read_and_its_revisions_listed(kg):
    case = hand_case(kg, why="Cite the clause.")
    revised = kg.revise(
        AGENT, case["id"], {**WRONG, "note": "Too curt."}, revision=case["revision"]
    )
    assert (revised["id"], revised["revision"]) == (case["id"], 2)
    assert revised["expect"] != case["expect"] and kg.case(AGENT, case["id"]) == {
        **revised,
        "snapshot": kg.case(AGENT, case["id"])["snapshot"],
    }
    again = kg.revise(
        AGENT, case["id"], {"answer": "right", "why": "Cite the clause.", "note": "Back."}
    )  # reads it first
    assert again["revision"] == 3 and again["expect"] == case["expect"]
    listed = kg.revisions(AGENT, case["id"])
    assert [(r["revision"], r.get("note")) for r in listed] == [
        (3, "Back."),
        (2, "Too curt."),
        (1, None),
    ]
    assert listed[0]["expect"] == again["expect"] and listed[2]["expect"] == case["expect"]


def test_a_stale_revision_is_412_case_changed_raised_once_and_changing_nothing(kg, base):
    case = hand_case(kg)
    kg.revise(AGENT, case["id"], {**WRONG, "note": "First."}, revision=1)
    before = (kg.case(AGENT, case["id"]), kg.revisions(AGENT, case["id"]))
    with flaky(base, []) as (proxy, client), pytest.raises(ApiError) as refused:
        client.revise(AGENT, case["id"], {"answer": "right", "note": "Second."}, revision=1)
    assert (refused.value.status, refused.value.code) == (412, "case-changed")
    assert refused.value.details == {"revision": 2}
    assert [method for method, _, _ in proxy.seen] == ["POST"]  # never read again and retried
    assert (kg.case(AGENT, case["id"]), kg.revisions(AGENT, case["id"])) == before


def test_a_revision_and_a_retirement_name_the_test_run_they_were_made_from(kg):
    case = hand_case(kg)
    run = kg.start_test_run(AGENT, P1, "2.0.0")
    body = {**WRONG, "note": "Seen in the run."}
    kg.revise(AGENT, case["id"], body, revision=1, from_test_run=run["id"])
    assert [r.get("fromTestRun") for r in kg.revisions(AGENT, case["id"])] == [run["id"], None]
    retired = kg.retire(AGENT, case["id"], "obsolete", from_test_run=run["id"])
    assert retired["retired"]["fromTestRun"] == run["id"]
    kg.restore(AGENT, case["id"])
    plain = kg.retire(AGENT, case["id"], "obsolete")
    assert "fromTestRun" not in plain["retired"]
    kg.restore(AGENT, case["id"])  # case-1 stays the one retired case the others see
    kg.cancel_test_run(AGENT, run["id"])


def test_cases_are_tagged_one_and_many_at_once_and_listed_by_tag(kg):
    one, two = hand_case(kg), hand_case(kg)
    tagged = kg.tag(AGENT, one["id"], add=["client-b", "client-a"])
    assert tagged["tags"] == ["client-a", "client-b"] and tagged["revision"] == one["revision"]
    assert kg.tag(AGENT, one["id"], remove="client-a")["tags"] == ["client-b"]
    ids = sorted([one["id"], two["id"]])
    both = kg.tag_cases(AGENT, P1, iter(ids), add="client-bulk", remove=["client-b"])
    assert [(c["id"], c["tags"]) for c in both] == [(i, ["client-bulk"]) for i in ids]
    assert sorted(c["id"] for c in kg.cases(AGENT, P1, tag="client-bulk")) == ids
    gone = kg.tag_cases(AGENT, P1, ids, remove="client-bulk")
    assert not any("tags" in c for c in gone)
    assert list(kg.cases(AGENT, P1, tag=["client-bulk", "client-b"])) == []


def test_the_cases_iterator_follows_next_cursor_through_every_page(kg):
    cases = [hand_case(kg, why=f"Case {i}.") for i in range(5)]
    made = [c["id"] for c in cases]
    whole = [c["id"] for c in kg.cases(AGENT, P1, page_size=100)]
    rows = kg.cases(AGENT, P1, page_size=2)
    assert rows.first["hasMore"] and len(rows.first["data"]) == 2
    paged = [c["id"] for c in rows]
    assert paged == whole and len(set(paged)) == len(paged)  # each once, in order
    assert set(made) <= set(paged) and len(paged) >= 7  # four pages at least

    started = datetime.fromisoformat(cases[0]["addedAt"])  # sent back as RFC 3339
    mine = kg.cases(AGENT, P1, kind="hand", added_after=started, run_id="run-1", page_size=2)
    assert sorted(c["id"] for c in mine) == sorted(made)
    assert all(c["kind"] == "correction" for c in kg.cases(AGENT, P1, kind="correction"))
    retired = [c["id"] for c in kg.cases(AGENT, P1, include="retired", expert=True)]
    assert "case-1" in retired and "case-1" not in whole


def test_a_misspelt_filter_is_a_type_error_before_any_request(kg):
    with pytest.raises(TypeError, match="kinds"):
        kg.cases(AGENT, P1, kinds="hand")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="rerunOf"):
        kg.start_test_run(AGENT, P1, "2.0.0", rerunOf="trun-x")  # type: ignore[call-arg]


def test_the_export_streams_every_case_as_json_lines_or_csv(kg):
    hand_case(kg)
    listed = {c["id"] for c in kg.cases(AGENT, P1, page_size=100)}
    lines = list(kg.export(AGENT, P1))
    assert {c["id"] for c in lines} == listed
    assert all("input" in c and "output" in c for c in lines)
    with_retired = {c["id"] for c in kg.export(AGENT, P1, include="retired")}
    assert with_retired == listed | {"case-1"}
    text = b"".join(kg.export_csv(AGENT, P1)).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["id"] for r in rows} == listed


def test_an_export_is_imported_into_another_set_with_the_same_expectations_and_snapshots(kg):
    hand_case(
        kg,
        decisions="wrong",
        shouldCall=[{"tool": "lookup", "match": {"q": {"text": "x", "ignore": ["case"]}}}],
        exactly=True,
    )
    lines = list(kg.export(AGENT, P1))
    added = kg.import_cases("acme.multi", P2, lines)
    assert [c["expect"] for c in added] == [c["expect"] for c in lines]
    for line, case in zip(lines, added, strict=True):
        snapshot = kg.case("acme.multi", case["id"])["snapshot"]
        assert [snapshot[k] for k in ("input", "output", "calls")] == [
            line[k] for k in ("input", "output", "calls")
        ]
        assert case["projectId"] == P2 and case["runId"] != line["runId"]


# ---------------------------------------------------------------- runs and corrections


def test_a_run_is_recorded_corrected_and_its_correction_leaves_the_set(kg):
    body = {"projectId": P1, "version": "3.0.0", "status": "finished", "output": {"a": 1}}
    run = kg.record_run(AGENT, body)
    assert run["hasCase"] is False
    assert [r["id"] for r in kg.runs(AGENT, P1, version="3.0.0")] == [run["id"]]
    before = active(kg)
    correction = kg.record_correction(AGENT, run["id"], {"answer": "wrong", "why": "Too curt."})
    assert correction["status"] == "open" and correction["runId"] == run["id"]
    assert active(kg) == before + 1
    assert run["id"] in [r["id"] for r in kg.runs(AGENT, P1, has_case=True, page_size=100)]
    moved = kg.set_correction_status(AGENT, correction["id"], "wont-fix")
    assert moved["status"] == "wont-fix" and active(kg) == before


# ---------------------------------------------------------------- test runs


def answer(case: dict[str, Any]) -> dict[str, Any]:
    return {"caseId": case["caseId"], "output": {"answer": "Use clause 7."}, "calls": []}


def test_a_test_run_from_start_to_its_junit_report_and_a_comparison(kg):
    first = kg.start_test_run(AGENT, P1, "2.0.0", label="PR 1", metadata={"commit": "abc"})
    assert first["status"] == "open" and first["label"] == "PR 1"
    assert next(kg.versions(AGENT, P1))["version"] == first["version"]
    cases = list(kg.cases_to_answer(AGENT, first["id"], page_size=1))
    assert len(cases) == first["cases"]["total"] >= 2
    frozen = {c["id"] for c in kg.export(AGENT, P1, version=first["version"])}
    assert frozen == {c["caseId"] for c in cases}
    sent = kg.send_results(AGENT, first["id"], [answer(cases[0])])
    assert (sent["accepted"], sent["duplicates"]) == (1, 0)
    left = [c["caseId"] for c in kg.cases_to_answer(AGENT, first["id"])]
    assert left == [c["caseId"] for c in cases[1:]]
    assert len(list(kg.cases_to_answer(AGENT, first["id"], awaiting=False))) == len(cases)
    again = kg.send_results(AGENT, first["id"], [answer(cases[0])])
    assert (again["accepted"], again["duplicates"]) == (0, 1)
    done = kg.finish_test_run(AGENT, first["id"])
    assert done["status"] == "done" and done["cases"]["awaiting"] == 0
    assert kg.test_run(AGENT, first["id"]) == done
    errors = list(kg.results(AGENT, first["id"], outcome=["error"], page_size=2))
    assert len(errors) == done["cases"]["error"] and all(r["outcome"] == "error" for r in errors)
    unsent = {r["caseId"] for r in errors if r["reason"] == "no-result"}
    assert unsent == {c["caseId"] for c in cases[1:]}
    one = kg.result(AGENT, first["id"], cases[0]["caseId"])
    assert one["caseId"] == cases[0]["caseId"] and one["output"] == {"answer": "Use clause 7."}
    suite = ET.fromstring(kg.junit_report(AGENT, first["id"]))
    assert int(suite.get("tests")) == len(cases)
    assert int(suite.get("errors")) == done["cases"]["error"]

    added = hand_case(kg)
    second = kg.start_test_run(AGENT, P1, "2.1.0", baseline=first["id"])
    assert second["version"] != first["version"]
    kg.send_results(AGENT, second["id"], list(map(answer, kg.cases_to_answer(AGENT, second["id"]))))
    pairs = kg.compare(AGENT, second["id"], first["id"], change="new")
    assert [p["caseId"] for p in pairs] == [added["id"]]
    assert pairs.first["counts"]["new"] == 1 and 0 <= pairs.first["pValue"] <= 1
    diff = kg.diff(AGENT, P1, second["version"], first["version"], change="added")
    assert [d["caseId"] for d in diff] == [added["id"]]
    assert diff.first["counts"] == {"added": 1, "removed": 0, "changed": 0}
    assert next(kg.test_runs(AGENT, P1, candidate="2.1.0"))["id"] == second["id"]


def test_a_run_is_canceled_and_then_closed(kg):
    run = kg.start_test_run(AGENT, P1, "2.0.0", weighting="experts-only")
    canceled = kg.cancel_test_run(AGENT, run["id"])
    assert canceled["status"] == "canceled" and canceled["weighting"] == "experts-only"
    with pytest.raises(ApiError) as refused:
        kg.finish_test_run(AGENT, run["id"])
    assert refused.value.code == "test-run-closed"
    assert refused.value.details["status"] == "canceled"


# ---------------------------------------------------------------- tokens and the document


def test_a_token_is_made_used_listed_and_revoked(kg, base):
    made = kg.create_token("ci", expires_at=datetime(2099, 1, 1, tzinfo=UTC))
    assert made["secret"].startswith("kgi_") and made["expiresAt"].startswith("2099-01-01")
    with Client(base, made["secret"]) as ci:
        assert ci.counts(AGENT, P1)["projectId"] == P1
        listed = {t["id"]: t for t in kg.tokens(page_size=1)}
        assert made["id"] in listed and "secret" not in listed[made["id"]]
        assert kg.revoke_token(made["id"]) is None
        with pytest.raises(ApiError) as refused:
            ci.counts(AGENT, P1)
        assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    kg.revoke_token(made["id"])  # again: no error


def test_the_openapi_document_names_every_route(kg):
    document = kg.openapi()
    assert document["openapi"].startswith("3.1")
    assert "/v1/agents/{agentId}/test-runs/{runId}/report.xml" in document["paths"]


# Each /v1 operation's Client method and arguments for it (`x` for any id). The OTLP endpoint is
# for an OpenTelemetry exporter, not this client (docs/client.md).
METHODS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "agentsTestSetGet": ("counts", ("a", P1), {}),
    "agentsTestSetListCases": ("cases", ("a", P1), {}),
    "agentsTestSetAddCase": ("add_case", ("a", {}), {}),
    "agentsTestSetRetireCases": ("retire_cases", ("a", P1, ["x"], "r"), {}),
    "agentsTestSetRestoreCases": ("restore_cases", ("a", P1, ["x"]), {}),
    "agentsTestSetTagCases": ("tag_cases", ("a", P1, ["x"]), {"add": "t"}),
    "agentsTestSetExport": ("export", ("a", P1), {}),
    "agentsTestSetGetCase": ("case", ("a", "x"), {}),
    "agentsTestSetHealth": ("health", ("a", P1), {}),
    "agentsTestSetGetCaseRecord": ("case_record", ("a", "x"), {}),
    "agentsTestSetRetireCase": ("retire", ("a", "x", "r"), {}),
    "agentsTestSetRestoreCase": ("restore", ("a", "x"), {}),
    "agentsTestSetReviseCase": ("revise", ("a", "x", {}), {"revision": 1}),
    "agentsTestSetTagCase": ("tag", ("a", "x"), {"add": "t"}),
    "agentsTestSetListRevisions": ("revisions", ("a", "x"), {}),
    "agentsListRuns": ("runs", ("a", P1), {}),
    "agentsRecordRun": ("record_run", ("a", {}), {}),
    "agentsRecordCorrection": ("record_correction", ("a", "x", {}), {}),
    "agentsSetCorrectionStatus": ("set_correction_status", ("a", "x", "fixed"), {}),
    "tokensCreate": ("create_token", ("n",), {}),
    "tokensList": ("tokens", (), {}),
    "tokensRevoke": ("revoke_token", ("x",), {}),
    "openapiDocument": ("openapi", (), {}),
    "agentsTestSetListVersions": ("versions", ("a", P1), {}),
    "agentsTestSetDiffVersions": ("diff", ("a", P1, "v1", "v2"), {}),
    "agentsTestRunsStart": ("start_test_run", ("a", P1, "1.0"), {}),
    "agentsTestRunsList": ("test_runs", ("a", P1), {}),
    "agentsTestRunsGet": ("test_run", ("a", "x"), {}),
    "agentsTestRunsCases": ("cases_to_answer", ("a", "x"), {}),
    "agentsTestRunsSendResults": ("send_results", ("a", "x", []), {}),
    "agentsTestRunsListResults": ("results", ("a", "x"), {}),
    "agentsTestRunsFinish": ("finish_test_run", ("a", "x"), {}),
    "agentsTestRunsCancel": ("cancel_test_run", ("a", "x"), {}),
    "agentsTestRunsGetResult": ("result", ("a", "x", "x"), {}),
    "agentsTestRunsCompare": ("compare", ("a", "x", "x"), {}),
    "agentsTestRunsReport": ("junit_report", ("a", "x"), {}),
}
NOT_THE_CLIENTS = {"tracesExport"}
CHOSEN_BY_THE_METHOD = {"cursor", "format"}  # Rows follows the cursor; export or export_csv


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """Each operation of the document: its id, method, path and itself."""
    for path, item in document["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "operationId" in op:
                yield op["operationId"], method.upper(), path, op


def names_taken(method: Callable[..., Any]) -> set[str]:
    """What a Client method lets its caller give, as the API names it: its arguments and the
    fields of the TypedDict its `**` argument unpacks, in camelCase (`page_size` as `limit`)."""
    names: set[str] = set()
    for param in inspect.signature(method).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            (options,) = get_args(get_type_hints(method, include_extras=True)[param.name])
            names |= set(options.__annotations__)
        else:
            names.add(param.name)
    return {"limit" if n == "page_size" else kindgi.client._camel(n) for n in names}


def fields_given(document: dict[str, Any], op: dict[str, Any]) -> set[str]:
    """The query parameters and JSON body fields an operation takes."""

    def fields(schema: dict[str, Any]) -> set[str]:
        ref = schema.get("$ref")
        return set((document["components"]["schemas"][ref.split("/")[-1]] if ref else schema)
                   .get("properties", {}))  # fmt: skip

    given = set()
    for param in op["parameters"]:
        if param["in"] == "query":
            given |= {param["name"]} if "name" in param else fields(param["schema"])
    body = op.get("requestBody", {}).get("content", {}).get("application/json")
    return given | (fields(body["schema"]) if body else set())


def test_every_operation_in_the_openapi_document_has_a_client_method_calling_it(kg):
    """A route the document gains without a method here fails this test; each method is called
    (against a stand-in transport) to show it sends its operation's method and path, and it
    takes every query parameter and body field the operation does (or the API's JSON body)."""
    document = kg.openapi()
    found = {op_id for op_id, *_ in operations(document)}
    assert found - NOT_THE_CLIENTS == set(METHODS), "a /v1 operation without a Client method"
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"data": [], "revision": 1})

    with Client("http://kindgi.test", "kgi_x") as stand_in:
        stand_in.http = httpx.Client(
            base_url="http://kindgi.test/v1", transport=httpx.MockTransport(answer)
        )
        for op_id, method, path, op in operations(document):
            if op_id in NOT_THE_CLIENTS:
                continue
            name, args, kwargs = METHODS[op_id]
            sent.clear()
            getattr(stand_in, name)(*args, **kwargs)
            template = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(path))
            assert [(r.method, bool(re.fullmatch(template, r.url.path))) for r in sent] == [
                (method, True)
            ], op_id
            taken = names_taken(getattr(Client, name))
            missing = fields_given(document, op) - CHOSEN_BY_THE_METHOD - taken
            assert "body" in taken or not missing, f"{name} lacks {sorted(missing)}"


# ---------------------------------------------------------------- refusals


def refusals(kg: Client, reader: Client) -> list[tuple[Callable[[], Any], int, str]]:
    nope = "trun-nope"
    result = {"caseId": "cor-1", "output": None, "calls": []}
    revise = {"items": [{"key": "k1", "verdict": "right"}], "note": "Same."}  # case-2's
    return [
        (lambda: kg.counts("acme.nope", P1), 404, "agent-not-found"),
        (lambda: kg.cases(AGENT, P1, kind="robot"), 400, "bad-input"),
        (lambda: kg.cases(AGENT, "not-a-uuid"), 400, "bad-input"),
        (lambda: kg.case(AGENT, "case-nope"), 404, "case-not-found"),
        (lambda: hand_case(kg, answer="wrong"), 400, "bad-input"),
        (
            lambda: kg.add_case(AGENT, {"runId": "run-nope", "answer": "right"}),
            404,
            "run-not-found",
        ),
        (lambda: reader.add_case(AGENT, {"runId": "run-1", "answer": "right"}), 403, "forbidden"),
        (lambda: kg.retire(AGENT, "case-1", "again"), 409, "case-retired"),
        (lambda: kg.restore(AGENT, "case-2"), 409, "case-active"),
        (lambda: kg.retire_cases(AGENT, P1, ["case-2", "case-nope"], "x"), 404, "case-not-found"),
        (lambda: kg.restore_cases(AGENT, P1, ["case-2"]), 409, "case-active"),
        (lambda: kg.retire(AGENT, "case-2", "x", from_test_run=nope), 404, "test-run-not-found"),
        (lambda: kg.revise(AGENT, "case-nope", revise, revision=1), 404, "case-not-found"),
        (lambda: kg.revise(AGENT, "case-2", revise), 409, "no-change"),
        (lambda: kg.revise(AGENT, "case-2", revise, revision=99), 412, "case-changed"),
        (lambda: kg.revise(AGENT, "case-1", revise, revision=1), 409, "case-retired"),
        (lambda: kg.revise(AGENT, "case-2", {"answer": "wrong"}, revision=1), 400, "bad-input"),
        (
            lambda: kg.revise(
                AGENT, "case-2", {**WRONG, "note": "x"}, revision=1, from_test_run=nope
            ),
            404,
            "test-run-not-found",
        ),
        (lambda: reader.revise(AGENT, "case-2", revise, revision=1), 403, "forbidden"),
        (lambda: kg.revisions(AGENT, "case-nope"), 404, "case-not-found"),
        (lambda: kg.tag(AGENT, "case-nope", add="x"), 404, "case-not-found"),
        (lambda: kg.tag(AGENT, "case-2"), 400, "bad-input"),
        (lambda: kg.tag(AGENT, "case-2", add="Not A Tag"), 400, "bad-input"),
        (lambda: reader.tag(AGENT, "case-2", add="x"), 403, "forbidden"),
        (lambda: kg.tag_cases(AGENT, P1, ["case-2", "case-nope"], add="x"), 404, "case-not-found"),
        (lambda: kg.tag_cases(AGENT, P1, ["case-2"], add="x", remove="x"), 400, "bad-input"),
        (lambda: kg.export(AGENT, P1, version="v999"), 404, "version-not-found"),
        (lambda: kg.export_csv(AGENT, "not-a-uuid"), 400, "bad-input"),
        (lambda: kg.versions(AGENT, P1, page_size=1000), 400, "bad-input"),
        (lambda: kg.diff(AGENT, P1, "v998", "v999"), 404, "version-not-found"),
        (lambda: kg.runs(AGENT, P1, status="lost"), 400, "bad-input"),  # type: ignore
        (
            lambda: kg.record_run(AGENT, {"projectId": P2, "version": "1", "status": "finished"}),
            404,
            "project-not-found",
        ),
        (
            lambda: kg.record_correction(AGENT, "run-nope", {"answer": "right"}),
            404,
            "run-not-found",
        ),
        (
            lambda: kg.set_correction_status(AGENT, "cor-nope", "fixed"),
            404,
            "correction-not-found",
        ),
        (lambda: kg.start_test_run(AGENT, P1, "2.0.0", baseline=nope), 404, "test-run-not-found"),
        (lambda: kg.start_test_run(AGENT, P1, "2.0.0", only="failed"), 400, "bad-input"),
        (lambda: kg.test_runs(AGENT, P1, candidate=""), 400, "bad-input"),
        (lambda: kg.test_run(AGENT, nope), 404, "test-run-not-found"),
        (lambda: kg.cases_to_answer(AGENT, nope), 404, "test-run-not-found"),
        (lambda: kg.send_results(AGENT, nope, [result]), 404, "test-run-not-found"),
        (lambda: kg.finish_test_run(AGENT, nope), 404, "test-run-not-found"),
        (lambda: kg.cancel_test_run(AGENT, nope), 404, "test-run-not-found"),
        (lambda: kg.results(AGENT, nope), 404, "test-run-not-found"),
        (lambda: kg.result(AGENT, nope, "cor-1"), 404, "test-run-not-found"),
        (lambda: kg.compare(AGENT, nope, "trun-other"), 404, "test-run-not-found"),
        (lambda: kg.junit_report(AGENT, nope), 404, "test-run-not-found"),
        (lambda: kg.create_token(""), 400, "bad-input"),
        (lambda: kg.revoke_token("tok-nope"), 404, "not-found"),
    ]


def state(kg: Client) -> dict[str, Any]:
    """What a refused call must leave as it was."""
    return {
        "counts": kg.counts(AGENT, P1),
        "cases": [
            (c["updatedAt"], c["revision"], c.get("tags"))
            for c in kg.cases(AGENT, P1, include="retired", page_size=100)
        ],
        "runs": [r["id"] for r in kg.runs(AGENT, P1, page_size=100)],
        "test runs": [r["id"] for r in kg.test_runs(AGENT, P1, page_size=100)],
        "tokens": [t["id"] for t in kg.tokens(page_size=100)],
    }


def test_every_refusal_raises_api_error_with_its_envelope_and_changes_nothing(kg, base, served):
    before = state(kg)
    with Client(base, "kgi_reader") as reader:
        for call, status, code in refusals(kg, reader):
            with pytest.raises(ApiError) as refused:
                call()
            err = refused.value
            assert (err.status, err.code) == (status, code), err
            assert err.message and err.request_id and err.request_id in str(err)
            assert f"[{err.request_id}]" in served[1].read_text()  # the server's own log line
    assert state(kg) == before
    with pytest.raises(ApiError) as refused:
        kg.retire_cases(AGENT, P1, ["case-2", "case-nope"], "x")
    assert refused.value.details["caseIds"] == ["case-nope"]
    with pytest.raises(ApiError) as refused:
        kg.cases(AGENT, P1, kind="robot")
    assert "kind" in refused.value.details["fields"]


# ---------------------------------------------------------------- retries


def test_an_answer_lost_twice_arrives_once_with_the_same_idempotency_key(kg, base):
    before = active(kg)
    with flaky(base, [("after", 503, "database-busy")] * 2) as (proxy, client):
        case = hand_case(client)
    assert active(kg) == before + 1  # made once: the retries were replays
    assert kg.case(AGENT, case["id"])["id"] == case["id"]
    keys = {key for _, _, key in proxy.seen}
    assert len(proxy.seen) == 3 and len(keys) == 1 and None not in keys


def test_results_whose_answers_were_lost_are_each_kept_once(kg, base):
    run = kg.start_test_run(AGENT, P1, "2.0.0")
    results = [answer(c) for c in kg.cases_to_answer(AGENT, run["id"])]
    with flaky(base, [("after", 503, "database-busy")] * 2) as (proxy, client):
        sent = client.send_results(AGENT, run["id"], results)
    # the third try got the first one's answer: a new key would have found them all duplicates
    assert (sent["accepted"], sent["duplicates"]) == (len(results), 0)
    assert len({key for _, _, key in proxy.seen}) == 1 and len(proxy.seen) == 3
    assert kg.test_run(AGENT, run["id"])["cases"]["awaiting"] == 0


@pytest.mark.parametrize(
    "fault",
    [
        ("before", 503, "database-busy"),
        ("before", 429, "too-many-attempts"),
        ("before", 409, "idempotency-key-in-flight"),
        ("drop", 0, ""),
    ],
)
def test_each_retried_fault_is_retried_with_the_same_key(kg, base, fault):
    before = active(kg)
    with flaky(base, [fault, fault]) as (proxy, client):
        case = hand_case(client)
        assert client.counts(AGENT, P1)["cases"]["active"] == before + 1
    assert case["kind"] == "hand" and active(kg) == before + 1
    posts = [key for method, _, key in proxy.seen if method == "POST"]
    assert len(posts) == 3 and len(set(posts)) == 1 and posts[0]
    assert [key for method, _, key in proxy.seen if method == "GET"] == [None]


@pytest.mark.parametrize(
    "fault",
    [
        ("before", 400, "bad-input"),
        ("before", 500, "internal"),
        ("before", 409, "case-retired"),
        ("after", 409, "idempotency-key-replay-withheld"),
    ],
)
def test_no_other_error_is_retried(kg, base, fault):
    with flaky(base, [fault, fault]) as (proxy, client), pytest.raises(ApiError) as refused:
        hand_case(client)
    assert (refused.value.status, refused.value.code) == fault[1:]
    assert len(proxy.seen) == 1


def test_the_retries_are_bounded(kg, base):
    busy = [("before", 503, "database-busy")] * 5
    with flaky(base, busy, retries=2) as (proxy, client), pytest.raises(ApiError) as refused:
        client.counts(AGENT, P1)
    assert refused.value.code == "database-busy" and len(proxy.seen) == 3
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens: refused, retried once
    with (
        Client(nobody, "kgi_admin", retries=1, backoff=0.01) as gone,
        pytest.raises(httpx.ConnectError),
    ):
        gone.counts(AGENT, P1)


def test_the_wait_honours_retry_after_and_caps_it_and_the_backoff():
    client = Client("http://127.0.0.1:9", "kgi_x", max_wait=2, backoff=0.5)
    assert client._wait(0, "1") == 1
    assert client._wait(0, "100") == 2  # capped
    assert [client._wait(n, None) for n in range(4)] == [0.5, 1, 2, 2]  # doubled, capped
    assert client._wait(1, "Wed, 21 Oct 2015 07:28:00 GMT") == 1  # a date: the backoff
    client.close()


def test_an_answer_that_is_no_envelope_is_still_an_api_error(kg):
    with pytest.raises(ApiError) as refused:  # gunicorn's own page, past its longest URL
        kg.cases(AGENT, P1, tool="x" * 9000)
    assert (refused.value.status, refused.value.code) == (414, "unexpected-answer")
    assert refused.value.message and refused.value.details == {}


def test_the_cases_filter_by_tag(base, kg):
    """Issue 24: `tag` filters the cases, a list meaning any of them (tags change no version,
    so the module's other tests see the same set)."""
    url = f"{base}/v1/agents/{AGENT}/test-set/cases/cor-1/tags"
    tagged = httpx.post(url, json={"add": ["smoke"]}, headers={"Authorization": "Bearer kgi_admin"})
    assert tagged.status_code == 200, tagged.text
    assert [c["id"] for c in kg.cases(AGENT, P1, tag=["smoke", "none-yet"])] == ["cor-1"]
    assert [c["id"] for c in kg.cases(AGENT, P1, tag="none-yet")] == []
