"""The service: every rule and every state change lives here, one module per capability.

Routes (JSON and HTML) parse a request, call one function here, and shape what it returns.
Functions take the authenticated `Principal`, check tenancy and permissions, change the session
and flush; the request boundary (`kindgi/http.py`) commits, so a change and its Idempotency-Key
record commit together. Another tenant's things look exactly like things that do not exist.

- `identity`: principals, bearer tokens, sign-in, a caller's own tokens
- `access`: which agent and project a caller reaches, and its grants there
- `counts`: the test set's counts, kept as tallies
- `cases`: listing, reading, retiring and restoring cases
- `corrections`: making cases from runs (corrections and hand cases)
- `revisions`: revising a case's expectation, and its revisions
- `tags`: tagging cases, one or several at once
- `triage`: what was revised and retired from a test run's page, and by whom
- `runs`: recording and listing runs (filtered: the runs inbox's list and the API's)
- `inbox`: what the runs inbox reads: a page of runs with the filters' choices, a run with the
  cases made from it
- `retention`: deleting the runs no case was made from, once old (`flask --app app kindgi prune`)
- `paging`: keyset pages behind sealed cursors
- `versions`: freezing a test set into versions, listing and diffing them
- `test_runs`: a test run's life (start, finish, cancel) and reading runs
- `results`: sending results (graded there), reading them, comparing two runs
- `run_pages`: what the test-run pages read: a run and a page of results, a comparison with its
  baseline picked, a test set's runs, a case's history, the overview's last runs
- `health`: the readiness probe's checks, the judge's queue depth, the metrics' guard
- `records`: each case's record over its set's last 50 done full runs, kept as runs end
- `quick_runs`: drawing a quick run's sample and counting its estimate
- `set_health`: a test set's health (failing, flaky, never run, contradicting cases), cached
- `checks`: the database's invariants, recounted (`flask --app app kindgi check`)
- `traces`: runs from OpenTelemetry traces (OTLP), and the held spans that expire
"""

from .cases import (
    MAX_COUNTED,
    CasesView,
    CaseView,
    cases_page,
    export_cases,
    get_case,
    list_cases,
    look_alikes,
    restore_case,
    restore_cases,
    retire_case,
    retire_cases,
    revisable_case,
)
from .common import clock
from .corrections import (
    add_hand_case,
    body_of,
    expect_of,
    record_correction,
    set_correction_status,
)
from .counts import Counts, overview, rebuild_tallies, test_set, week_of
from .health import questions_waiting, readiness, require_metrics_token
from .identity import (
    LOGIN_MAX_FAILURES,
    LOGIN_WINDOW,
    TOKEN_PREFIX,
    Principal,
    authenticate,
    create_token,
    hash_password,
    hash_secret,
    list_tokens,
    operator,
    revoke_token,
    sign_in,
    user_principal,
)
from .imports import import_cases
from .inbox import InboxView, RunWithCases, inbox_page, run_with_cases
from .paging import Page
from .records import get_record, record_of
from .results import (
    Comparison,
    ResultView,
    compare,
    get_result,
    list_results,
    report,
    send_results,
)
from .revisions import Revision, TriageCase, etag, list_revisions, revise_case, triage_case
from .run_pages import (
    ComparisonPage,
    HistoryRow,
    RunPage,
    TestSetRuns,
    case_history,
    comparison_page,
    run_page,
    test_set_runs,
)
from .runs import list_runs, new_case_runs, record_run
from .set_health import Health, test_set_health
from .tags import tag_case, tag_cases
from .test_runs import (
    RunView,
    cancel_test_run,
    finish_test_run,
    get_test_run,
    list_test_runs,
    runner_cases,
    start_test_run,
)
from .traces import Ingested, delete_expired_held_spans, ingest_traces
from .triage import TriageDone, triage_of
from .versions import diff_versions, list_versions

__all__ = [
    "LOGIN_MAX_FAILURES",
    "LOGIN_WINDOW",
    "MAX_COUNTED",
    "TOKEN_PREFIX",
    "CaseView",
    "CasesView",
    "Comparison",
    "ComparisonPage",
    "Counts",
    "Health",
    "HistoryRow",
    "InboxView",
    "Ingested",
    "Page",
    "Principal",
    "ResultView",
    "Revision",
    "RunPage",
    "RunView",
    "RunWithCases",
    "TestSetRuns",
    "TriageCase",
    "TriageDone",
    "add_hand_case",
    "authenticate",
    "body_of",
    "cancel_test_run",
    "case_history",
    "cases_page",
    "clock",
    "compare",
    "comparison_page",
    "create_token",
    "delete_expired_held_spans",
    "diff_versions",
    "etag",
    "expect_of",
    "export_cases",
    "finish_test_run",
    "get_case",
    "get_record",
    "get_result",
    "get_test_run",
    "hash_password",
    "hash_secret",
    "import_cases",
    "inbox_page",
    "ingest_traces",
    "list_cases",
    "list_results",
    "list_revisions",
    "list_runs",
    "list_test_runs",
    "list_tokens",
    "list_versions",
    "look_alikes",
    "new_case_runs",
    "operator",
    "overview",
    "questions_waiting",
    "readiness",
    "rebuild_tallies",
    "record_correction",
    "record_of",
    "record_run",
    "report",
    "require_metrics_token",
    "restore_case",
    "restore_cases",
    "retire_case",
    "retire_cases",
    "revisable_case",
    "revise_case",
    "revoke_token",
    "run_page",
    "run_with_cases",
    "runner_cases",
    "send_results",
    "set_correction_status",
    "sign_in",
    "start_test_run",
    "tag_case",
    "tag_cases",
    "test_set",
    "test_set_health",
    "test_set_runs",
    "triage_case",
    "triage_of",
    "user_principal",
    "week_of",
]
