# The two commands a newcomer needs:
#   make demo   set everything up, load the demo world on SQLite, serve it on http://127.0.0.1:5000
#   make test   set everything up and run the whole test suite (ruff; SQLite, and PostgreSQL
#               when KINDGI_TEST_DATABASE_URL names a server)
# Both work on a fresh clone; everything they need is installed here.

PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PORT    ?= 5000
CASES   ?= 2000

.PHONY: setup tools axe demo test lint

# constraints.txt pins every package to the versions the suite last passed with
# (refresh: .venv/bin/pip freeze --exclude-editable > constraints.txt).
$(BIN)/flask: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

# axe-core, the accessibility checker the browser tests inject into each page (tests/axe.py),
# from the npm registry at the version tests/axe/package-lock.json pins (npm comes with tools).
AXE := tests/axe/node_modules/axe-core/axe.min.js
$(AXE): tests/axe/package.json tests/axe/package-lock.json
	npm ci --prefix tests/axe --no-audit --no-fund --silent
	touch $@

axe: $(AXE)

setup: $(BIN)/flask

# The judge's workers run beside gunicorn when a judge is configured (docs/judge.md); Ctrl-C
# stops both.
demo: setup
	$(BIN)/flask --app app kindgi demo --cases $(CASES) --url http://127.0.0.1:$(PORT)
	@trap 'trap - INT TERM; kill 0' INT TERM; \
	if [ -n "$$KINDGI_JUDGE_URL" ]; then $(BIN)/flask --app app kindgi worker & \
	else echo "No judge is configured: answers stay ungraded (see docs/judge.md)."; fi; \
	$(BIN)/gunicorn --workers 2 --bind 127.0.0.1:$(PORT) app:app & wait

# Debian's packages the tests drive: Chromium for the browser tests (never a browser download of
# Playwright's own), wrk for the bench's smoke run, sqlite3 for the chaos test's backup, npm for
# axe-core. Only the missing ones are installed: a machine whose Node.js came with its own npm
# can't take Debian's npm beside it.
tools:
	@missing=$$(for c in chromium wrk sqlite3 npm; do command -v $$c >/dev/null || echo $$c; done); \
	if [ -n "$$missing" ]; then apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite runs on SQLite, then again on PostgreSQL when KINDGI_TEST_DATABASE_URL names a server
# (the tests make and drop their own databases there): there only the tests that touch the engine,
# the rest having just passed on SQLite (tests/conftest.py, --database-tests-only).
test: setup tools $(AXE) lint
	env -u KINDGI_TEST_DATABASE_URL $(BIN)/pytest -n 2 tests
	@if [ -n "$$KINDGI_TEST_DATABASE_URL" ]; then \
	  echo "== the suite's database tests on PostgreSQL ($$KINDGI_TEST_DATABASE_URL)"; \
	  $(BIN)/pytest -n 2 --database-tests-only tests; \
	else echo "KINDGI_TEST_DATABASE_URL is not set: the suite ran on SQLite only"; fi
