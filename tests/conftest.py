"""Fixtures: an app on a fresh real database per test, a client, and a small two-tenant world.

The world (tests/world.json) has one agent served by one project (acme.drafting / P1), one served
by two (acme.multi / P2, P3), and a second tenant whose agent has the same id. Every principal
has a token whose secret is `kgi_<name>`: see `TOKENS`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from databases import Databases, check_server
from flask_migrate import upgrade
from sqlalchemy import inspect, text
from werkzeug.routing import Rule

from kindgi import create_app, world
from kindgi.database import db
from kindgi.service import common, search

# The live server, Chromium and the sign-in of the browser tests, for every file that drives pages;
# pytest's own pytester, which runs the Kindgi plugin in a pytest of its own.
pytest_plugins = ("browsing", "pytester")

HERE = Path(__file__).parent
WORLD = json.loads((HERE / "world.json").read_text())

P1 = "2489e9ad-2ee2-8e00-8ec9-32d5f69181c0"
P2 = "b1f1c0de-0000-4000-8000-000000000002"
P3 = "b1f1c0de-0000-4000-8000-000000000003"
PG = "9c0ffee0-0000-4000-8000-0000000000aa"
AGENT = "acme.drafting"
MULTI = "acme.multi"
TOKENS = {
    name: f"kgi_{name}"
    for name in ("admin", "reader", "publisher", "expert", "writer", "nobody", "ci", "globex")
}


def _compile_each_url_builder_once() -> None:
    """Make werkzeug compile a URL rule's builders once per process, not once per app.

    Binding a rule writes two Python functions (an AST, then `compile()`): 96 % of making an app
    (some 70 ms), and the suite makes an app for nearly every test. A builder is a pure function
    of the rule's text, its parsed parts and its defaults, and reads the rule it builds for only
    through its `self` argument when called, so the one compiled for an equal rule of an
    earlier app is the same code; each rule still binds it to itself."""
    compile_builder = Rule._compile_builder
    built: dict[tuple[Any, ...], Any] = {}

    def compile_once(self: Rule, append_unknown: bool = True) -> Any:
        defaults = repr(sorted((self.defaults or {}).items()))
        key = (self.rule, tuple(self._trace), defaults, append_unknown)
        if key not in built:
            built[key] = compile_builder(self, append_unknown)
        return built[key]

    Rule._compile_builder = compile_once  # type: ignore[method-assign]


_compile_each_url_builder_once()


def make_app(url: str, **config: Any):
    return create_app(
        {"TESTING": True, "SECRET_KEY": "test-secret", "SQLALCHEMY_DATABASE_URI": url, **config}
    )


def pytest_sessionstart(session) -> None:
    check_server()


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that touch the engine under test (make test's PostgreSQL pass: "
        "the others, pure rules and the wheel's own SQLite, ran on SQLite just before)",
    )


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "engine: reaches the engine under test without the `databases` fixture"
    )
    config.addinivalue_line(
        "markers", "one_world: refused or only reads, on a world its file's such tests share"
    )


def touches_the_engine(item) -> bool:
    """Whether a test reaches the database engine the suite runs on: through `databases` (every
    app, client, live server and browser fixture stands on it; the fixtures a fixture overrides
    are followed too, which pytest's own closure leaves out), or marked `engine` (a test that
    hands KINDGI_TEST_DATABASE_URL to a program of its own)."""
    if item.get_closest_marker("engine"):
        return True
    fixtures = item.session._fixturemanager
    seen: set[str] = set()
    todo = list(getattr(item, "fixturenames", ()))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            for fixturedef in fixtures.getfixturedefs(name, item) or ():
                todo.extend(fixturedef.argnames)
    return "databases" in seen


# The files whose tests take longest, longest first (docs/reliability.md, "The suite's time"):
# started first, so that `-n 2` never ends on one worker still fuzzing while the other idles.
LONGEST_FIRST = ("test_fuzz.py", "test_bench_smoke.py", "test_chaos.py", "test_wheel.py")


def pytest_collection_modifyitems(config, items) -> None:
    """The longest files first (each file's tests kept together, in order); with
    --database-tests-only, without the tests no engine changes."""
    order = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(order)))
    if not config.getoption("database_tests_only"):
        return
    kept = [item for item in items if touches_the_engine(item)]
    config.hook.pytest_deselected(items=[item for item in items if not touches_the_engine(item)])
    items[:] = kept


@pytest.fixture(scope="session")
def databases(tmp_path_factory) -> Iterator[Databases]:
    """This session's databases, with the test world loaded once into a template (password
    hashing is slow on purpose); each test gets a database holding what the template holds (on
    PostgreSQL often an earlier test's, refilled: see tests/databases.py)."""
    dbs = Databases(tmp_path_factory.mktemp("databases"))

    def fill(url: str) -> None:
        app = make_app(url)
        with app.app_context():
            upgrade()
            world.load(WORLD)
            db.session.commit()
            if db.engine.dialect.name == "sqlite":
                db.session.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
            db.session.remove()
            db.engine.dispose()

    dbs.make_template(fill)
    yield dbs
    dbs.drop_all()


@contextmanager
def app_on(databases: Databases, url: str, **config: Any) -> Iterator[Any]:
    """An app on the database at `url`, which is dropped afterwards."""
    app = make_app(url, **config)
    try:
        yield app
    finally:
        with app.app_context():
            db.engine.dispose()
        databases.drop(url)


@pytest.fixture
def app(request, databases: Databases):
    """An app on its own copy of the test world; for a test marked `one_world`, the copy its
    file's `one_world` tests share."""
    if request.node.get_closest_marker("one_world"):
        yield request.getfixturevalue("one_world_app")
        return
    with app_on(databases, databases.clone()) as app:
        yield app


@pytest.fixture(scope="module")
def one_world_app(databases: Databases):
    """The app a file's `one_world` tests share (in one worker): each of them is refused or only
    reads, and checks that nothing changed, so none sees what another did; should one change the
    world after all, it fails itself."""
    with app_on(databases, databases.clone()) as app:
        yield app


@pytest.fixture
def client(app):
    return app.test_client()


class Api:
    """The test client speaking JSON as a named principal (`as_="reader"`, or None for no token)."""

    def __init__(self, client) -> None:
        self.client = client

    def call(
        self,
        method: str,
        path: str,
        *,
        as_: str | None = "admin",
        json: Any = None,
        headers: dict[str, str] | None = None,
        **kw: Any,
    ):
        hdrs = dict(headers or {})
        if as_ is not None:
            hdrs.setdefault("Authorization", f"Bearer {TOKENS.get(as_, as_)}")
        return self.client.open(path, method=method, json=json, headers=hdrs, **kw)

    def get(self, path: str, **kw: Any):
        return self.call("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any):
        return self.call("POST", path, json=json, **kw)

    def patch(self, path: str, json: Any = None, **kw: Any):
        return self.call("PATCH", path, json=json, **kw)

    def delete(self, path: str, **kw: Any):
        return self.call("DELETE", path, **kw)


@pytest.fixture
def set_clock(monkeypatch):
    """`set_clock(when)`: from then on the app's clock says `when`, in every module that reads
    it (each imported `clock` from `kindgi.service.common`)."""
    readers = [
        module
        for module in list(sys.modules.values())
        if module.__name__.startswith("kindgi") and getattr(module, "clock", None) is common.clock
    ]

    def _set(when: datetime) -> None:
        for module in readers:
            monkeypatch.setattr(module, "clock", lambda: when)

    return _set


@pytest.fixture
def api(client) -> Api:
    return Api(client)


def snapshot_db(app) -> dict[str, list[tuple]]:
    """Every row of every table, to show that a refused request changed nothing."""
    with app.app_context():
        # SQLite's FTS5 tables can't be read whole; their shadow tables (case_search_*,
        # run_search_*) hold the indexes and are compared like the rest
        searched = ("case_search", "run_search")
        tables = [t for t in inspect(db.engine).get_table_names() if t not in searched]
        with db.engine.connect() as conn:
            return {
                t: sorted(map(tuple, conn.execute(text(f'SELECT * FROM "{t}"'))), key=repr)
                for t in tables
            }


@pytest.fixture
def unchanged(app):
    """`with unchanged(): …` fails unless the database is exactly as before."""

    @contextmanager
    def check() -> Iterator[None]:
        before = snapshot_db(app)
        yield
        after = snapshot_db(app)
        # idempotency records may hold a kept 4xx answer; everything else must be untouched
        before.pop("idempotency_keys", None)
        after.pop("idempotency_keys", None)
        assert after == before

    return check


def error_of(resp) -> dict[str, Any]:
    """The error envelope, checked for its invariant parts."""
    body = resp.get_json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["requestId"] == resp.headers["X-Request-Id"]
    assert isinstance(err["message"], str) and err["message"]
    return err


def ok(resp, status: int = 200) -> dict[str, Any]:
    """The JSON body of an answer that must have this status."""
    assert resp.status_code == status, resp.get_json()
    return resp.get_json()


def refused(resp, status: int, code: str) -> dict[str, Any]:
    """The error of a refused request, checked for its status and code."""
    assert resp.status_code == status, resp.get_json()
    err = error_of(resp)
    assert err["code"] == code, err
    return err


def same_error(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two errors alike but for their request ids."""
    return {**a, "requestId": ""} == {**b, "requestId": ""}


# ---------------------------------------------------------------- the pages, through a client

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(client, path: str = "/login") -> str:
    """The session's CSRF token, as the form on `path` carries it."""
    return CSRF_FIELD.search(client.get(path).get_data(as_text=True)).group(1)


def sign_in(client, email: str, password: str) -> None:
    """Sign a test client in through the login form, as a browser would."""
    form = {"email": email, "password": password, "csrf_token": csrf_of(client)}
    resp = client.post("/login", data=form)
    assert resp.status_code == 302, resp.get_data(as_text=True)[:300]


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in Prometheus' text format (0 when there is none)."""
    families = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(families) == len(set(families)), "a metric family is told twice"
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        sample, value = line.rsplit(" ", 1)
        got = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})?$", sample)
        if got and ",".join(sorted((got.group(1) or "").split(","))) == want:
            return float(value)
    return 0.0


NARROW = "walk-narrow"  # walking, with a band of one row: the rest are looked up in all matches


@pytest.fixture(params=[search.DRIVE, search.WALK, NARROW, search.WALK_PROBING])
def how(request, monkeypatch) -> str:
    """Each way a search of cases or runs is answered (see `search.strategy`), chosen by moving
    the bounds the test world's few matches are measured against (and no way remembered from
    before)."""
    monkeypatch.setattr(search, "_ways", {})
    if request.param == search.DRIVE:  # never taken for a word PostgreSQL knows is common
        monkeypatch.setattr(search, "SURELY_COMMON", float("inf"))
    else:
        monkeypatch.setattr(search, "FEW", -1)
    if request.param == search.WALK_PROBING:
        monkeypatch.setattr(search, "MANY", -1)
    if request.param == NARROW:
        monkeypatch.setattr(search, "WINDOW", 1)
        monkeypatch.setattr(search, "MARGIN", 0)
    return request.param
