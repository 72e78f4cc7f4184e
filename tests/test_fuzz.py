"""Fuzzing the JSON API from its own OpenAPI document: schemathesis, in process, every operation.

Each operation gets a fresh copy of the test world and a few hundred generated requests, valid
and invalid (schemathesis' positive and negative data, plus its coverage phase: every bound at
and past its edge, every undocumented method). Every answer goes through all of schemathesis'
checks (no 5xx, status codes, content types, headers and bodies as documented, invalid data
refused, auth enforced) and through ours: every 4xx/5xx is the error envelope whose `requestId`
is the `X-Request-Id` header, and no stack trace, SQL or file path ever reaches a client.

Generated ids are mostly noise, so most of the time a valid path or body id, or `projectId`, is
swapped for one the world has (for another valid value only, so an invalid request stays
invalid), and half the valid bodies of a case or correction are drawn to pass its verdict rules
too. The operations of test runs and versions (docs/design.md §9) get a world with test runs in
every state and three versions (see `TEST_RUNS`), whose ids are swapped in the same way (on
their routes `runId` names a test run), and the cases of valid results bodies are the world's.
The answers' tally per operation lands in test-artifacts/fuzz/ (the figures in
docs/reliability.md). `KINDGI_FUZZ_EXAMPLES` sets the generated examples per operation.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

import hypothesis
import jsonschema
import pytest
import schemathesis
import schemathesis._hypothesis as schemathesis_hypothesis
from conftest import AGENT, MULTI, P1, P2, P3, PG, TOKENS, Api
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import _canonicalise, _from_schema, from_schema
from hypothesis_jsonschema._encode import encode_canonical_json
from jsonschema import validators
from schemathesis.checks import ALL_CHECKS
from schemathesis.experimental import COVERAGE_PHASE, OPEN_API_3_1
from schemathesis.generation import DataGenerationMethod, GenerationConfig, coverage
from schemathesis.specs.openapi.checks import (
    missing_required_header,
    negative_data_rejection,
    unsupported_method,
)
from schemathesis.specs.openapi.negative import utils as negative_utils

from kindgi import create_app
from kindgi.openapi import document


def _memoise_hypothesis_jsonschema() -> None:
    """Make hypothesis-jsonschema work out each schema once per process, not once per draw.

    It canonicalises a schema (JSON-encoding it over and over) and builds its strategy anew
    each time it draws an object's property: most of the fuzzing's time, and most of this
    module's import (the verdict rules below). Both are pure functions of the schema: the
    canonical form is kept as JSON (callers change what they get: each gets its own copy), the
    strategy (immutable) for the same schema, alphabet and formats is the one built before.
    What is drawn, and how it shrinks, is unchanged."""
    canonicalish, build = _canonicalise.canonicalish, vars(_from_schema)["__from_schema"]
    canonical: dict[str, str] = {}
    strategies: dict[tuple[str, int, int], tuple[Any, ...]] = {}

    def canonicalish_once(schema: Any) -> Any:
        if isinstance(schema, bool):
            return canonicalish(schema)
        key = encode_canonical_json(schema)
        if key not in canonical:
            canonical[key] = encode_canonical_json(canonicalish(schema))
        return json.loads(canonical[key])

    def from_schema_once(schema: Any, *, alphabet: Any, custom_formats: Any) -> Any:
        key = (encode_canonical_json(schema), id(alphabet), id(custom_formats))
        if key not in strategies:  # alphabet and formats are kept, so their ids stay theirs
            made = build(schema, alphabet=alphabet, custom_formats=custom_formats)
            strategies[key] = (made, alphabet, custom_formats)
        return strategies[key][0]

    for module in (_canonicalise, _from_schema, coverage, negative_utils):
        module.canonicalish = canonicalish_once
    setattr(_from_schema, "__from_schema", from_schema_once)


class _CoverageWhenRun(list):
    """A test's explicit examples, its coverage phase's cases added the first time hypothesis
    reads them: when the test runs."""

    def __init__(self, examples: list[Any], cover: Any) -> None:
        super().__init__(examples)
        self.cover = cover

    def _covered(self) -> None:
        cover, self.cover = self.cover, None
        if cover is not None:
            cover()

    def __iter__(self):
        self._covered()
        return super().__iter__()

    def __reversed__(self):
        self._covered()
        return super().__reversed__()

    def __len__(self) -> int:
        self._covered()
        return super().__len__()


def _cover_operations_when_run() -> None:
    """Make schemathesis build an operation's coverage cases when its test runs, not when it is
    collected: it built every operation's (a few hundred each, drawn and checked against the
    schema) in every xdist worker, most of each worker's collection, though each operation's
    test runs in one worker. The cases are made by the same call, in the same order, as the
    test's explicit examples: what runs is unchanged."""
    add_coverage = schemathesis_hypothesis.add_coverage

    def add_coverage_when_run(test: Any, *args: Any) -> Any:
        examples = _CoverageWhenRun(getattr(test, "hypothesis_explicit_examples", []), None)
        test.hypothesis_explicit_examples = examples
        examples.cover = lambda: add_coverage(test, *args)  # appends to `examples`
        return test

    schemathesis_hypothesis.add_coverage = add_coverage_when_run


def _walk_each_document_once() -> None:
    """Make jsonschema's `$ref` resolver walk a document for its `$id`s and anchors once, not
    once per resolver.

    The walk is cached per resolver (an `lru_cache` on the method), and schemathesis makes a
    resolver for every answer it checks: listing cases' coverage phase walked the whole OpenAPI
    document 34,080 times for its 8,530 answers, about half the fuzzing's time. The walk is a
    pure function of the document (kept here, so its id stays its own), which nothing here
    changes; what is resolved, and every check, is unchanged."""
    walk = validators._RefResolver._get_subschemas_cache.__wrapped__
    walked: dict[int, tuple[Any, Any]] = {}

    def walk_once(resolver: Any) -> Any:
        key = id(resolver.referrer)
        if key not in walked:
            walked[key] = (resolver.referrer, walk(resolver))
        return walked[key][1]

    validators._RefResolver._get_subschemas_cache = walk_once


def _combine_optional_parameters_in_turn() -> None:
    """Make the coverage phase combine an operation's optional parameters in turn, not in every
    subset.

    Its last step meant "one combination for each size from 2 to N-1" but made every one, all
    with the same values: listing cases' 13 optional query parameters made 8,177 of its 8,530
    requests, most of the fuzzing's time (schemathesis 4 bounds them too). Kept: for each size,
    the N runs of that many parameters in a row, taken round the sorted names, so every
    parameter is still in a combination of each size (143 for listing cases). Every other
    coverage case is unchanged."""
    iterate = schemathesis_hypothesis._iter_coverage_cases
    containers = {"query": "query", "header": "headers", "cookie": "cookies"}

    def in_turn(names: list[str]) -> set[frozenset[str]]:
        n = len(names)
        return {
            frozenset(names[(i + j) % n] for j in range(size))
            for size in range(2, n)
            for i in range(n)
        }

    def iterate_in_turn(operation: Any, *args: Any, **kwargs: Any) -> Any:
        optional = {
            location: sorted(p.name for p in getattr(operation, attr) if not p.is_required)
            for location, attr in containers.items()
        }
        kept = {location: in_turn(names) for location, names in optional.items()}
        for case in iterate(operation, *args, **kwargs):
            location = case.meta.parameter_location
            if case.meta.description.startswith("All required and ") and location in kept:
                present = getattr(case, containers[location]) or {}
                if frozenset(present.keys() & set(optional[location])) not in kept[location]:
                    continue
            yield case

    schemathesis_hypothesis._iter_coverage_cases = iterate_in_turn


_memoise_hypothesis_jsonschema()
_walk_each_document_once()
_cover_operations_when_run()
_combine_optional_parameters_in_turn()
OPEN_API_3_1.enable()
schemathesis.openapi.format("uuid", st.uuids().map(str))
COVERAGE_PHASE.enable()

EXAMPLES = int(os.environ.get("KINDGI_FUZZ_EXAMPLES", "100"))
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts" / "fuzz"
AUTH = {"Authorization": f"Bearer {TOKENS['admin']}"}

TEST_RUNS = ["trun-done", "trun-open", "trun-half", "trun-canceled", "trun-multi", "trun-globex"]
# What exists in the test world (tests/world.json), and a few things that don't.
KNOWN = {
    "agentId": [AGENT, MULTI, "acme.nope", "globex.drafting"],
    "caseId": ["case-1", "case-2", "cor-1", "cor-2", "cor-3", "cor-g", "case-nope"],
    "runId": ["run-1", "run-2", "run-running", "run-erased", "run-replay", "run-multi",
              "run-globex", "run-nope"],
    "correctionId": ["cor-1", "cor-2", "cor-3", "cor-g", "case-2", "cor-nope"],
    "tokenId": ["tok-reader", "tok-writer", "tok-globex", "tok-expired", "tok-nope"],  # not ours
    "projectId": [P1, P2, P3, PG, P1.upper(), "0badcafe-0000-4000-8000-000000000000"],
    "replayOf": ["run-1", "run-2", "run-globex", "run-nope"],
    "group": ["grp-restricted", "grp-open", "grp-nope"],
    # made by `with_test_runs` (a test run's `runId` and `caseId`, a compared run, a baseline,
    # a re-run)
    "testRunId": [*TEST_RUNS, "trun-nope"],
    "runCaseId": ["case-2", "cor-1", "cor-3", "case-1", "cor-g", "case-nope"],
    "otherId": [*TEST_RUNS, "trun-nope"],
    "baseline": [*TEST_RUNS, "trun-nope"],
    "rerunOf": [*TEST_RUNS, "trun-nope"],
    "setVersion": ["v1", "v2", "v3", "v9", "1"],  # a version of a test set (not an agent's)
    "otherVersion": ["v1", "v2", "v3", "v9", "1"],
}  # fmt: skip
# Corners of the world where agent, project, run, case and correction belong together.
CORNERS = [
    {"agentId": AGENT, "projectId": P1, "runId": "run-1", "caseId": "case-2",
     "correctionId": "cor-1", "replayOf": "run-1", "testRunId": "trun-half",
     "runCaseId": "case-2", "otherId": "trun-done", "baseline": "trun-done", "setVersion": "v3",
     "otherVersion": "v1"},
    {"agentId": AGENT, "projectId": P1, "runId": "run-2", "caseId": "case-1",
     "correctionId": "cor-2", "replayOf": "run-2", "testRunId": "trun-open",
     "runCaseId": "cor-1", "otherId": "trun-canceled", "rerunOf": "trun-done", "setVersion": "v2",
     "otherVersion": "v3"},
    {"agentId": MULTI, "projectId": P2, "runId": "run-multi", "caseId": "cor-3",
     "correctionId": "cor-3", "group": "grp-restricted", "testRunId": "trun-multi",
     "runCaseId": "cor-3", "otherId": "trun-multi", "setVersion": "v1",
     "otherVersion": "v1"},
    {"agentId": MULTI, "projectId": P3, "group": "grp-open"},
]  # fmt: skip
# The world's cases that test runs grade (cor-3 in acme.multi / P2, the others in P1).
RUN_CASES = ["case-2", "cor-1", "cor-3"]
POSITIVE = DataGenerationMethod.positive


# CorrectionBody._rules as the combinations of fields they allow, for drawing bodies that pass
# them (random ones rarely do). Each part of a verdict, and what it may hold: no decisions, or
# `decisions: "right"` alone, or `"wrong"` with a call to make or one not to make (shouldCall and
# mustNotCall only with it, exactly only with a call to make; SOME is a list of one or more, NONE
# the empty one); no answer, or
# `answer: "right"` with or without why, or `"wrong"` with shouldSay or why or both (shouldSay only
# with it, why only with an answer); items or none. A verdict has at least one of the three. (A
# plain list, drawn from directly: the same rules as JSON Schema if/then/else took hypothesis-
# jsonschema seconds to merge and draw from; nor is it in the served document, as schemathesis'
# coverage phase can't walk it.)
ANY, SOME, NONE = "any", "some", "none"
DECISIONS: list[dict[str, str]] = [
    {},
    {"decisions": "right"},
    *(
        {"decisions": "wrong", "shouldCall": SOME, **banned, **exactly}
        for banned in ({}, {"mustNotCall": NONE}, {"mustNotCall": SOME})
        for exactly in ({}, {"exactly": ANY})
    ),
    {"decisions": "wrong", "mustNotCall": SOME},
    {"decisions": "wrong", "shouldCall": NONE, "mustNotCall": SOME},
]
ANSWERS: list[dict[str, str]] = [
    {},
    {"answer": "right"},
    {"answer": "right", "why": ANY},
    {"answer": "wrong", "shouldSay": ANY},
    {"answer": "wrong", "why": ANY},
    {"answer": "wrong", "shouldSay": ANY, "why": ANY},
]
ITEMS: list[dict[str, str]] = [{}, {"items": ANY}]
VERDICTS = [
    {**decisions, **answer, **items}
    for decisions, answer, items in itertools.product(DECISIONS, ANSWERS, ITEMS)
    if decisions or answer or items
]
VERDICT_FIELDS = {field for verdict in VERDICTS for field in verdict}


def _present(*names: str) -> dict[str, Any]:
    return {"required": list(names)}


UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
CALLS = itertools.count()
ENVELOPE = {"code", "message", "requestId"}

LEAKS = re.compile(
    r"Traceback|File \"|\.py\b|line \d+|sqlalchemy|psycopg|sqlite3|werkzeug|"
    r"SELECT |INSERT |UPDATE |DELETE FROM|Exception|Error:",
)


def _raw_document() -> dict[str, Any]:
    """The document /v1/openapi.json serves (it needs no database)."""
    app = create_app({"TESTING": True, "SECRET_KEY": "x", "SQLALCHEMY_DATABASE_URI": "sqlite://"})
    with app.app_context():
        raw = json.loads(json.dumps(document(app)))
    # OTLP's endpoint takes protobuf (or OTLP/JSON) and answers errors as google.rpc.Status, not
    # the envelope: tests/test_otlp.py sends it whatever bytes hypothesis draws
    raw["paths"].pop("/v1/traces")
    return _for_schemathesis(raw)


def _for_schemathesis(node: Any) -> Any:
    """`{"type": ["string", "null"], …}` as the equal `anyOf`: schemathesis' coverage phase
    can't read a list of types (OpenAPI 3.1 allows one). And a UUID's `format` without its
    `pattern`: the format is registered below, and negating the pattern takes the coverage
    phase half a minute per list."""
    if isinstance(node, list):
        return [_for_schemathesis(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _for_schemathesis(v) for k, v in node.items()}
    if node.get("format") == "uuid":
        node.pop("pattern", None)
    if isinstance(node.get("type"), list):
        types = node.pop("type")
        node = {"anyOf": [{**node, "type": t} if t != "null" else {"type": "null"} for t in types]}
    return node


class CurrentApp:
    """The WSGI app under test: each test points it at its own app on its own database."""

    app: Any = None

    def __call__(self, environ, start_response):
        return self.app(environ, start_response)


CURRENT = CurrentApp()
ISSUED: set[str] = set()  # every X-Request-Id answered so far
RAW = _raw_document()
# ResultIn._rules and ResultsBody's size, as JSON Schema: output and calls unless there is an
# error, and a few results (each gets one of the world's cases, see `_with_world_cases`).
RESULT_RULES: list[dict[str, Any]] = [
    {
        "properties": {
            "results": {
                "maxItems": len(RUN_CASES),
                "items": {"anyOf": [_present("error"), _present("output", "calls")]},
            }
        }
    }
]


def _schema_of(node: dict[str, Any]) -> dict[str, Any]:
    """A schema of the document, able to resolve its references."""
    return {**node, "components": RAW["components"]}


def _field(body: dict[str, Any], name: str, how: str) -> st.SearchStrategy[Any]:
    """Values of the body's field `name` as a verdict's part says: the text it names, or any
    value the document allows (ANY), only non-empty lists (SOME), or the empty list (NONE)."""
    if how not in (ANY, SOME, NONE):
        return st.just(how)
    if how == NONE:
        return st.just([])
    field = body["properties"][name]
    return from_schema(_schema_of({**field, "minItems": 1} if how == SOME else field))


def _verdict_bodies(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies of the document's schema `name` that follow the verdict rules: its other fields
    as the document says, and one of VERDICTS' combinations, each field as it says."""
    body = RAW["components"]["schemas"][name]
    others = {k: v for k, v in body["properties"].items() if k not in VERDICT_FIELDS}
    rest = from_schema(_schema_of({**body, "properties": others}))
    verdicts = st.sampled_from(VERDICTS).flatmap(
        lambda verdict: st.fixed_dictionaries(
            {field: _field(body, field, how) for field, how in verdict.items()}
        )
    )
    return st.builds(lambda rest, verdict: {**rest, **verdict}, rest, verdicts)


# Drawn only by the worker that fuzzes the operation (building a strategy takes seconds).
RULED = {
    "POST /v1/agents/{agentId}/test-set/cases": st.deferred(lambda: _verdict_bodies("AddCaseBody")),
    "POST /v1/agents/{agentId}/runs/{runId}/corrections": st.deferred(
        lambda: _verdict_bodies("RecordCorrectionBody")
    ),
    "POST /v1/agents/{agentId}/test-set/cases/{caseId}/revise": st.deferred(
        lambda: _verdict_bodies("ReviseBody")
    ),
    "POST /v1/agents/{agentId}/test-runs/{runId}/results": st.deferred(
        lambda: from_schema(
            _schema_of({**RAW["components"]["schemas"]["ResultsBody"], "allOf": RESULT_RULES})
        )
    ),
}
schema = schemathesis.from_dict(
    RAW,
    app=CURRENT,
    data_generation_methods=[DataGenerationMethod.positive, DataGenerationMethod.negative],
    generation_config=GenerationConfig(with_security_parameters=False),  # we send the token
)


# ---------------------------------------------------------------- realistic ids


def _valid(name: str, value: Any) -> bool:
    """Whether a generated value is valid where it stands (only those are swapped, for
    another valid one: a request generated invalid stays invalid)."""
    if not isinstance(value, str) or not value:
        return False
    return name != "projectId" or UUID.fullmatch(value) is not None


def _picks(
    values: Any, world: dict[str, str], aliases: dict[str, str]
) -> st.SearchStrategy[dict[str, Any]]:
    """For each valid id among `values`: the drawn corner of the world's (most often, so that
    agent, project, run and case fit together), any id the world knows, or what was generated
    (None). `aliases` says which of the world's ids a name stands for here."""
    if not isinstance(values, dict):
        return st.just({})
    known = {name: aliases.get(name, name) for name in values}
    return st.fixed_dictionaries(
        {
            name: st.one_of(
                st.just(world.get(known[name])), st.just(world.get(known[name])), st.none(),
                st.sampled_from(KNOWN[known[name]]),
            )
            for name, value in values.items()
            if known[name] in KNOWN and _valid(name, value)
        }
    )  # fmt: skip


def _aliases(case) -> dict[str, str]:
    """On a test run's routes, `runId` names a test run and `caseId` one of its cases; on a
    diff's, `version` and `other` name versions of the test set."""
    if "/test-runs/" in case.operation.path:
        return {"runId": "testRunId", "caseId": "runCaseId"}
    if "/versions/" in case.operation.path:
        return {"version": "setVersion", "other": "otherVersion"}
    return {}


def _with_world_cases(body: Any) -> st.SearchStrategy[Any]:
    """A results body as drawn, or (as often) with the world's cases in its results, each once
    (and no more results than that): a generated case id is never one of a test run's."""
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        return st.just(body)

    ids = st.lists(st.sampled_from(RUN_CASES), min_size=1, unique=True)
    return st.one_of(st.just(body), ids.map(lambda ids: _for_cases(body, ids)))


def _for_cases(body: dict[str, Any], ids: list[str]) -> dict[str, Any]:
    """The body's first results, one for each of `ids`, about those cases."""
    results = zip(body["results"], ids, strict=False)
    return {**body, "results": [{**result, "caseId": i} for result, i in results]}


def _swap(values: Any, picked: dict[str, Any]) -> Any:
    if not isinstance(values, dict):
        return values
    return {**values, **{k: v for k, v in picked.items() if v is not None}}


@schema.hook
def before_generate_case(context, strategy):
    """Most of the time, a generated id that is valid becomes one the world has; half the
    valid bodies of a case or correction are drawn to also follow the verdict rules."""

    def realistic(case, world):
        bodies = st.just(case.body)
        positive = case.meta is not None and case.meta.body is POSITIVE
        ruled = RULED.get(case.operation.verbose_name)
        if ruled is not None and positive:
            bodies = st.one_of(bodies, ruled)
        if case.operation.path.endswith("/results") and case.method == "POST" and positive:
            bodies = bodies.flatmap(_with_world_cases)
        aliases = _aliases(case)
        return bodies.flatmap(
            lambda body: st.tuples(
                _picks(case.path_parameters, world, aliases),
                _picks(case.query, world, aliases),
                _picks(body, world, aliases),
            ).map(lambda picked: _apply(case, body, *picked))
        )

    return st.tuples(strategy, st.sampled_from(CORNERS)).flatmap(lambda cw: realistic(*cw))


def _apply(case, body: Any, path: dict, query: dict, picked_body: dict):
    case.path_parameters = _swap(case.path_parameters, path)
    case.query = _swap(case.query, query)
    case.body = _swap(body, picked_body)
    return case


def _fresh_key(case) -> None:
    """Generated keys repeat ("0"), which would make most writes a 422 mismatch: three calls
    in four get a fresh key instead of a valid generated one (the fourth may replay)."""
    key = (case.headers or {}).get("Idempotency-Key")
    valid = isinstance(key, str) and 1 <= len(key) <= 255 and key.isprintable()
    if valid and next(CALLS) % 4:
        case.headers["Idempotency-Key"] = uuid.uuid4().hex


# ---------------------------------------------------------------- our own checks


def _text(response) -> str:
    if hasattr(response, "get_data"):
        return response.get_data(as_text=True)
    return response.text


def error_envelope(ctx, response, case) -> None:
    """Every 4xx/5xx is `{"error": {code, message, details?, requestId}}`, with `requestId`
    equal to `X-Request-Id`; every answer has a request id of its own."""
    request_id = response.headers.get("X-Request-Id")
    assert request_id, "an answer without X-Request-Id"
    assert request_id not in ISSUED, f"X-Request-Id {request_id} given twice"
    ISSUED.add(request_id)
    if response.status_code < 400:
        return
    body = json.loads(_text(response))
    assert set(body) == {"error"}, body
    err = body["error"]
    assert {"code", "message", "requestId"} <= set(err) <= {*ENVELOPE, "details"}, err
    if response.headers.get("Idempotent-Replayed") == "true":  # the first answer, byte for byte
        assert err["requestId"] in ISSUED and err["requestId"] != request_id, err
    else:
        assert err["requestId"] == request_id, (err, request_id)
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", err["code"]), err
    if "details" in err:
        assert isinstance(err["details"], dict), err


def no_internals_leak(ctx, response, case) -> None:
    """No stack trace, SQL, driver or file name in an error answer (whose only echoes of the
    request are the names of unknown fields and the ids of the unknown cases a bulk change
    names, left out here: a case id the fuzzer draws may be "psycopg")."""
    if response.status_code < 400:
        return
    text = _text(response)
    if response.status_code < 500:
        err = json.loads(text)["error"]
        fields = (err.get("details") or {}).pop("fields", {})
        (err.get("details") or {}).pop("caseIds", None)
        text = json.dumps([err, list(fields.values())])
    found = LEAKS.search(text)
    assert found is None, f"leaked {found.group(0)!r}: {text[:500]}"


def negative_data_is_refused(ctx, response, case) -> None:
    """schemathesis' `negative_data_rejection`, where a 405 is a refusal too: an empty path
    segment, the only way to break a string path parameter, names another route. An operation
    with nothing to break (no parameters, no body) has no negative data, and neither has a
    header or path segment "of another type": `{}`, `null` or `0` in a header is text. Nor is
    a query string with parameters the operation doesn't know, which are ignored (API
    conventions 2.3), if the answer's status is the same without them."""
    definition = case.operation.definition.raw
    if not definition.get("parameters") and "requestBody" not in definition:
        return
    meta = case.meta
    if response.status_code < 400 and _answered_as_without_unknown_query_parameters(case, response):
        return
    if meta is not None and meta.parameter_location in ("header", "path"):
        if meta.description == "Incorrect type":
            return  # a header or a path segment is a string whatever its text
    elif meta is not None and meta.parameter_location == "body" and _body_is_valid(case):
        return  # "negated" into a value the schema allows (null where it may be null)
    elif meta is not None and _only_the_query_drawn(case) and _query_reads_valid(case):
        return  # "of another type" in text that reads as valid: `limit` the string "1"
    ctx.config.negative_data_rejection.allowed_statuses.append("405")
    negative_data_rejection(ctx, response, case)


def _answered_as_without_unknown_query_parameters(case, response) -> bool:
    """Whether the query string's only fault is parameters the operation doesn't know: the
    known ones are valid, and the answer's status is the same without the others."""
    params = [p for p in case.operation.definition.raw.get("parameters", []) if p["in"] == "query"]
    query = case.query or {}
    if set(query) <= {p["name"] for p in params} or not _query_is_valid(params, query):
        return False
    again = case.partial_deepcopy()
    again.query = {p["name"]: query[p["name"]] for p in params if p["name"] in query}
    plain = again.call(headers=dict(response.request.headers))
    return plain.status_code == response.status_code


def _only_the_query_drawn(case) -> bool:
    """Whether the query string is all that was drawn: no path parameter, documented header,
    cookie or body (schemathesis calls a part negative even where the operation has none)."""
    documented = {p["name"].lower() for p in case.operation.definition.raw.get("parameters", [])
                  if p["in"] == "header"}  # fmt: skip
    headers = {name.lower() for name in case.headers or {}}
    body = type(case.body).__name__ not in ("NotSet", "NoneType")
    return not (case.path_parameters or case.cookies or headers & documented or body)


def _query_reads_valid(case) -> bool:
    """Whether the query string names only the operation's parameters, each valid as the app
    reads it (a query string is text: a negated type may read as a valid value)."""
    params = [p for p in case.operation.definition.raw.get("parameters", []) if p["in"] == "query"]
    query = case.query or {}
    return set(query) <= {p["name"] for p in params} and _query_is_valid(params, query)


def _query_is_valid(params: list[dict[str, Any]], query: dict[str, Any]) -> bool:
    """The known parameters of `query` by their schemas, read as the app reads them: the first
    of repeated values (none is no parameter), text, and whole numbers where the schema wants
    an integer."""
    values = {}
    for param in params:
        name, value = param["name"], query.get(param["name"])
        if isinstance(value, list):
            value = value[0] if value else None
        if value is None or isinstance(value, (list, dict)):
            if value is not None or param.get("required"):
                return False
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        if param["schema"].get("type") == "integer":
            if not re.fullmatch(r"-?[0-9]+", text):
                return False
            values[name] = int(text)
        else:
            values[name] = text
    root = {
        "type": "object",
        "properties": {p["name"]: p["schema"] for p in params},
        "components": RAW["components"],
    }
    return jsonschema.Draft202012Validator(root).is_valid(values)


def _body_is_valid(case) -> bool:
    body_schema = case.operation.definition.raw["requestBody"]["content"]["application/json"]
    root = {**body_schema["schema"], "components": RAW["components"]}
    return jsonschema.Draft202012Validator(root).is_valid(case.body)


def _served_by_another_template(method: str, path: str) -> bool:
    """Whether another documented path template serves `method` at this concrete path."""
    for template, operations in RAW["paths"].items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if method.lower() in operations and re.fullmatch(pattern, path):
            return True
    return False


def unsupported_method_of_this_url(ctx, response, case) -> None:
    """schemathesis' `unsupported_method`, but where another documented template serves that
    method at the URL it is that route's answer, not a 405: `GET …/test-set/cases/retire` asks
    for the case named `retire` (`GET …/cases/{caseId}`)."""
    if _served_by_another_template(response.request.method, urlsplit(response.request.url).path):
        return
    unsupported_method(ctx, response, case)


CHECKS = (
    *(c for c in ALL_CHECKS if c is not negative_data_rejection),
    negative_data_is_refused,
    missing_required_header,
    unsupported_method_of_this_url,
)
OUR_CHECKS = (error_envelope, no_internals_leak)


def with_test_runs(app, monkeypatch) -> None:
    """Test runs in every state, with known ids, and three versions of acme.drafting / P1's set,
    made through the API by the admins: `trun-done` (v1: case-2 passed, cor-1 erred),
    `trun-canceled` (v2, frozen while case-2 was retired), `trun-open` (v3, against trun-done,
    nothing sent), `trun-half` (v3, case-2 failed, cor-1 awaiting); `trun-multi` (open, in
    acme.multi / P2) and `trun-globex` (done, in globex's acme.drafting / PG)."""
    api = Api(app.test_client())

    def ok(resp) -> dict[str, Any]:
        assert resp.status_code in (200, 201), resp.get_json()
        return resp.get_json()

    def start(run_id: str, project: str = P1, agent: str = AGENT, as_: str = "admin",
              **more: Any) -> None:  # fmt: skip
        body = {"projectId": project, "candidate": "9.9.9", **more}
        with monkeypatch.context() as patch:  # the server's ids are random; these are known
            patch.setattr("kindgi.service.test_runs.new_id", lambda _: run_id)
            ok(api.post(f"/v1/agents/{agent}/test-runs", json=body, as_=as_))

    def send(run_id: str, *results: dict[str, Any], agent: str = AGENT, as_: str = "admin"):
        path = f"/v1/agents/{agent}/test-runs/{run_id}/results"
        return ok(api.post(path, json={"results": list(results)}, as_=as_))

    case_2 = f"/v1/agents/{AGENT}/test-set/cases/case-2"
    start("trun-done")
    send("trun-done", {"caseId": "case-2", "output": {}, "calls": [], "ranked": ["k1"]},
         {"caseId": "cor-1", "error": "crashed"})  # fmt: skip
    ok(api.post(f"{case_2}/retire", json={"reason": "for v2"}))
    start("trun-canceled")
    ok(api.post("/v1/agents/acme.drafting/test-runs/trun-canceled/cancel", json={}))
    ok(api.post(f"{case_2}/restore", json={}))
    start("trun-open", baseline="trun-done")
    start("trun-half")
    send("trun-half", {"caseId": "case-2", "output": {}, "calls": [], "ranked": ["k9", "k1"]})
    start("trun-multi", P2, MULTI)
    start("trun-globex", PG, as_="globex")
    send("trun-globex", {"caseId": "cor-g", "error": "crashed"}, as_="globex")


# The operations fuzzed on a world with test runs: theirs, and the counts (with frozenVersion).
WITH_TEST_RUNS = re.compile(r"/test-runs|/versions|GET /v1/agents/\{agentId\}/test-set\]")


@pytest.fixture
def fuzzed(app, request, monkeypatch):
    """The app under test, and a tally of its answers written to test-artifacts/fuzz/."""
    if WITH_TEST_RUNS.search(request.node.name):  # "test_…[GET /v1/agents/{agentId}/…]"
        with_test_runs(app, monkeypatch)
    CURRENT.app = app
    tally: Counter[str] = Counter()
    yield tally
    CURRENT.app = None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(
        r"[^A-Za-z0-9]+",
        "_",
        request.node.callspec.id if hasattr(request.node, "callspec") else request.node.name,
    )
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(dict(sorted(tally.items())), indent=1))


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
def test_every_operation_answers_every_generated_request_as_its_document_says(fuzzed, case):
    meta = case.meta
    generated_auth = (case.headers or {}).get("Authorization") is not None or (
        meta is not None and (meta.parameter or "").lower() == "authorization"
    )  # the coverage phase's own cases: no token, or a made-up one
    headers = None if generated_auth else AUTH
    if case.headers is None:
        case.headers = {}  # schemathesis' ignored_auth check writes a bad token into it
    _fresh_key(case)
    response = case.call(headers=headers)
    fuzzed[f"{getattr(case.data_generation_method, 'name', '?')} {response.status_code}"] += 1
    case.validate_response(response, checks=CHECKS, additional_checks=OUR_CHECKS, headers=headers)


# ---------------------------------------------------------------- grading whatever a runner sends


def _answer_schema(path: str, method: str = "get") -> dict[str, Any]:
    """The documented 200 answer of `path`, as a schema that resolves its references."""
    answer = RAW["paths"][path][method]["responses"]["200"]["content"]["application/json"]
    return {**answer["schema"], "components": RAW["components"]}


# What XML 1.0 can't carry (control characters but tab and newlines; U+FFFE, U+FFFF): a result's
# error with one makes the JUnit report unreadable, an app bug that test_hostile.py keeps.
NOT_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
P1_CASES = ["case-2", "cor-1"]  # what a run of acme.drafting / P1 grades (items, decisions)
RESULTS_PATH = "/v1/agents/{agentId}/test-runs/{runId}/results"
RUNNER_BODIES = RULED[f"POST {RESULTS_PATH}"].flatmap(
    lambda body: st.lists(st.sampled_from(P1_CASES), min_size=1, unique=True).map(
        lambda ids: _for_cases(body, ids)
    )
)
RUN_ANSWERS = {  # (route's path in the document, what follows the run's own path)
    "the run": ("/v1/agents/{agentId}/test-runs/{runId}", ""),
    "its results": (RESULTS_PATH, "/results?limit=100"),
    "its cases": ("/v1/agents/{agentId}/test-runs/{runId}/cases", "/cases"),
    "against the baseline": ("/v1/agents/{agentId}/test-runs/{runId}/compare/{otherId}",
                             "/compare/{baseline}?limit=100"),
}  # fmt: skip


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@hypothesis.given(
    body=RUNNER_BODIES,
    threshold=st.one_of(st.none(), st.floats(0, 1)),
)
def test_whatever_a_runner_sends_is_graded_or_refused_and_every_answer_is_as_documented(
    app, body, threshold
):
    """Results drawn from the document (any output, calls, ranked keys, errors) for the cases of
    a fresh run against a done baseline: a 200 whose run counts them, or a 400 naming a result;
    then the run, its results, each result, its cases, the comparison and the JUnit report all
    answer as documented; the run's counts, pass rate and comparison agree with its results and
    the comparison's rows; and sending it all again is a harmless duplicate."""
    api, tr = Api(app.test_client()), f"/v1/agents/{AGENT}/test-runs"
    baseline = _a_done_run(api)
    start = {"projectId": P1, "candidate": "fuzz", "baseline": baseline}
    if threshold is not None:
        start["itemsThreshold"] = threshold
    run = api.post(tr, json=start)
    assert run.status_code == 201, run.get_json()
    path = f"{tr}/{run.get_json()['id']}"
    sent = api.post(f"{path}/results", json=body)
    if sent.status_code == 400:  # text no database can store, say: a result is named
        fields = sent.get_json()["error"]["details"]["fields"]
        assert all(f.startswith("results.") for f in fields), fields
        return
    assert sent.status_code == 200, sent.get_data(as_text=True)[:500]
    assert sent.get_json()["accepted"] == len(body["results"])
    jsonschema.validate(sent.get_json(), _answer_schema(RESULTS_PATH, "post"))
    for name, (documented, tail) in RUN_ANSWERS.items():
        resp = api.get(path + tail.format(baseline=baseline))
        assert resp.status_code == 200, (name, resp.get_data(as_text=True)[:500])
        jsonschema.validate(resp.get_json(), _answer_schema(documented))
    counts = api.get(path).get_json()["cases"]
    listed = api.get(f"{path}/results?limit=100").get_json()["data"]
    outcomes = Counter(r["outcome"] for r in listed)
    assert {k: counts[k] for k in outcomes} == dict(outcomes), (counts, listed)
    assert counts["total"] == counts["awaiting"] + sum(
        counts[k] for k in ("pass", "fail", "error", "pending", "ungraded")
    ), counts
    rate = api.get(path).get_json().get("passRate")
    if counts["pass"] + counts["fail"]:
        assert rate["value"] == counts["pass"] / (counts["pass"] + counts["fail"]), rate
        assert 0 <= rate["low"] <= rate["value"] <= rate["high"] <= 1, rate
    else:
        assert rate is None, rate
    compared = api.get(f"{path}/compare/{baseline}?limit=100").get_json()
    changes = Counter(re.sub(r"-(\w)", lambda m: m[1].upper(), r["change"])
                      for r in compared["data"])  # fmt: skip
    assert {k: n for k, n in compared["counts"].items() if n} == dict(changes), compared
    kept = api.get(path).get_json()["comparison"]
    assert kept == {"baseline": baseline, **compared["counts"]}, (kept, compared["counts"])
    detail = _answer_schema("/v1/agents/{agentId}/test-runs/{runId}/results/{caseId}")
    for result in body["results"]:
        one = api.get(f"{path}/results/{result['caseId']}")
        assert one.status_code == 200, one.get_data(as_text=True)[:500]
        jsonschema.validate(one.get_json(), detail)
    report = api.get(f"{path}/report.xml")
    assert report.status_code == 200 and report.mimetype == "application/xml"
    if not any(NOT_IN_XML.search(r.get("error", "")) for r in body["results"]):  # test_hostile
        suite = ElementTree.fromstring(report.get_data())
        assert len(suite.findall("testcase")) == counts["total"]
    again = api.post(f"{path}/results", json=body)
    assert again.status_code == 200, again.get_data(as_text=True)[:500]
    assert (again.get_json()["accepted"], again.get_json()["duplicates"]) == (
        0, len(body["results"]))  # fmt: skip


def _a_done_run(api) -> str:
    """The id of a done run of acme.drafting / P1 (started the first time it is asked for)."""
    tr = f"/v1/agents/{AGENT}/test-runs"
    runs = api.get(f"{tr}?projectId={P1}&candidate=baseline").get_json()["data"]
    if runs:
        return runs[0]["id"]
    run = api.post(tr, json={"projectId": P1, "candidate": "baseline"}).get_json()["id"]
    done = api.post(f"{tr}/{run}/results", json={"results": [
        {"caseId": "case-2", "output": {}, "calls": [], "ranked": ["k1"]},
        {"caseId": "cor-1", "output": {}, "calls": [{"tool": "search", "args": {}}]},
    ]})  # fmt: skip
    assert done.get_json()["run"]["status"] == "done", done.get_json()
    return run
