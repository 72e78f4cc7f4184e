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

.PHONY: setup browser demo test lint

$(BIN)/flask: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(BIN)/flask

demo: setup
	$(BIN)/flask --app app kindgi demo --cases $(CASES)
	$(BIN)/gunicorn --workers 2 --bind 127.0.0.1:$(PORT) app:app

# The browser tests drive Debian's Chromium (never a browser download of Playwright's own).
browser:
	@command -v chromium >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite runs on SQLite, then again on PostgreSQL when KINDGI_TEST_DATABASE_URL names a server
# (the tests make and drop their own databases there).
test: setup browser lint
	env -u KINDGI_TEST_DATABASE_URL $(BIN)/pytest -n 2 tests
	@if [ -n "$$KINDGI_TEST_DATABASE_URL" ]; then \
	  echo "== the same suite on PostgreSQL ($$KINDGI_TEST_DATABASE_URL)"; \
	  $(BIN)/pytest -n 2 tests; \
	else echo "KINDGI_TEST_DATABASE_URL is not set: the suite ran on SQLite only"; fi
