"""The test-run pages through the Flask client, on a real database: a run with its progress and
its results explained, one result beside the corrected run, a comparison with a baseline, a
test set's runs, a case's history and the overview's last runs. Runs are made through the API,
as a runner makes them (the helpers of tests/test_test_runs.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import AGENT, P1, ok, sign_in
from sqlalchemy import event
from test_test_runs import GOOD_OUTPUT, passing, result, send, start, the_set

from kindgi.database import db

PAGES = f"/agents/{AGENT}"


def failing(ids: dict[str, str]) -> list[dict]:
    """`passing`, but D calls a banned tool and search with the wrong `q`, I ranks an unjudged
    key and the wrong item first, and case-2 sends no ranked list."""
    results = passing(ids)
    results[0] = result(
        ids["D"],
        GOOD_OUTPUT,
        [
            {"tool": "search", "args": {"q": "nope"}},
            {"tool": "search", "args": {"q": "y"}},
            {"tool": "send_email", "args": {}},
        ],
    )
    results[2] = result(ids["I"], None, ranked=["zz", "m1", "m0"])
    results[5] = result("case-2", {"no": "list"})
    return results


@pytest.fixture
def expert(client, api):
    """The client signed in as a publisher of acme.drafting, who reads P1."""
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    return client


def text_of(resp, status: int = 200) -> str:
    body = resp.get_data(as_text=True)
    assert resp.status_code == status, body[:500]
    return body


@contextmanager
def statements(app) -> Iterator[list[str]]:
    """The SQL statements sent while the block runs."""
    sent: list[str] = []

    def on_statement(conn, cursor, statement, *_):
        sent.append(statement)

    with app.app_context():
        engine = db.engine
    event.listen(engine, "before_cursor_execute", on_statement)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)


# ---------------------------------------------------------------- the run page


def test_the_run_page_explains_every_case_that_did_not_pass_where_it_is_listed(api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], failing(ids)))
    page = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}"))
    assert 'Status: <span class="status done">done</span>' in page
    assert "every 2s" not in page  # done: nothing polls
    assert "(95 % interval" in page
    # D: the missing search(q=x) beside the nearest unused call's q (the first call took the
    # entry without args), and the forbidden call
    assert "Missing a call of <code>search</code>(<code>{&#34;q&#34;: &#34;x&#34;}</code>)" in page
    assert "nearest call (call 2)" in page
    assert re.search(
        r'<th scope="row"><code>q</code></th><td><code>&#34;x&#34;</code></td>\s*'
        r"<td><code>&#34;y&#34;</code></td>",
        page,
    )
    assert "Called a forbidden tool: <code>send_email</code>" in page
    # I: the ranked keys with their verdicts, and the unjudged one
    assert re.search(r"<li><code>zz</code> <span class=\"hint\">unjudged</span>", page)
    assert "Unjudged keys in the top 2 (candidates for a correction): <code>zz</code>" in page
    assert "Why: no-ranked-list" in page  # case-2
    case_link = f'href="{PAGES}/test-set/cases/{ids["D"]}"'
    assert case_link in page
    assert f'href="{PAGES}/test-runs/{run["id"]}/results/{ids["D"]}"' in page


def test_the_run_page_filters_by_outcome_and_part_and_swaps_only_the_results(api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], failing(ids)))
    url = f"{PAGES}/test-runs/{run['id']}"
    failed = text_of(expert.get(f"{url}?outcome=fail&part="))
    listed = set(re.findall(r'<th scope="row"><a href="[^"]+/test-set/cases/([^"]+)"', failed))
    assert listed == {ids["D"], ids["I"]}
    assert '<option value="fail" selected>' in failed
    items = text_of(expert.get(f"{url}?part=items&outcome=error"))
    assert set(re.findall(r'/test-set/cases/([^"]+)"', items)) == {"case-2"}
    swapped = text_of(expert.get(f"{url}?outcome=pass", headers={"HX-Request": "true"}))
    assert swapped.lstrip().startswith('<div id="results">') and "<html" not in swapped
    listed = set(re.findall(r'<th scope="row"><a href="[^"]+/test-set/cases/([^"]+)"', swapped))
    assert listed == {ids["R"], "cor-1"}


def test_the_run_pages_results_come_a_keyset_page_at_a_time(api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)))
    url = f"{PAGES}/test-runs/{run['id']}"
    seen, page = [], text_of(expert.get(f"{url}?limit=4"))
    while True:
        seen += re.findall(r'<th scope="row"><a href="[^"]+/test-set/cases/([^"]+)"', page)
        more = re.search(r'href="([^"]+cursor=[^"]+)" hx-get', page)
        if not more:
            break
        page = text_of(expert.get(more.group(1).replace("&amp;", "&")))
    assert seen == sorted(ids.values())


@pytest.mark.parametrize(
    "query",
    ["outcome=bogus", "part=tools", "outcome=pass,", "limit=0", "limit=101", "cursor=spoilt"],
)
def test_a_bad_filter_on_the_run_page_is_a_clear_400_that_changes_nothing(
    api, expert, unchanged, query
):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)[:2]))
    with unchanged():
        page = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}?{query}"), 400)
    assert "bad-input" in page and "<code>" + query.split("=")[0] + "</code>" in page


def test_the_run_page_reads_its_counts_from_the_run_not_its_rows(app, api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)))
    with statements(app) as sent:
        text_of(expert.get(f"{PAGES}/test-runs/{run['id']}?outcome=pass"))
    touching = [s for s in sent if "test_run_cases" in s]
    assert touching and all("count(" not in s.lower() for s in touching), touching
    assert all("LIMIT" in s.upper() for s in touching), touching


def test_a_running_runs_progress_polls_until_the_run_is_done(api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)[:2]))
    url = f"{PAGES}/test-runs/{run['id']}/progress"
    running = text_of(expert.get(url))
    assert 'hx-trigger="every 2s"' in running and 'aria-live="polite"' in running
    assert "2 of 6 results received." in running
    assert 'value="2"' in running and 'max="6"' in running
    ok(send(api, run["id"], passing(ids)[2:]))
    done = text_of(expert.get(url))
    assert "hx-trigger" not in done and "status done" in done
    assert "100.0 %" in done


def test_a_canceled_runs_progress_stops_polling(api, expert):
    the_set(api)
    run = start(api)
    ok(api.post(f"/v1/agents/{AGENT}/test-runs/{run['id']}/cancel", {}))
    page = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}"))
    assert "status canceled" in page and 'hx-trigger="every' not in page


def test_another_tenants_run_and_an_unknown_run_are_404(api, client):
    the_set(api)
    run = start(api)
    sign_in(client, "admin@globex.test", "globex-pass-1")  # globex has an acme.drafting too
    for path in ("", "/progress", "/compare", "/results/cor-1"):
        text_of(client.get(f"{PAGES}/test-runs/{run['id']}{path}"), 404)
    text_of(client.get(f"{PAGES}/test-set/runs?projectId={P1}"), 404)


def test_a_reader_without_the_project_gets_403_and_a_stranger_is_sent_to_sign_in(api, client):
    the_set(api)
    run = start(api)
    assert client.get(f"{PAGES}/test-runs/{run['id']}").status_code == 302
    sign_in(client, "expert@acme.test", "expert-pass-1")  # reads P2 only
    text_of(client.get(f"{PAGES}/test-runs/{run['id']}"), 403)


def test_one_result_shows_the_candidates_output_beside_the_corrected_runs(api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], failing(ids)))
    page = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}/results/{ids['D']}"))
    assert "The candidate" in page and "The corrected run" in page
    assert "send_email" in page and "Called a forbidden tool" in page
    assert "Draft a lease clause" in page  # the input both were given
    text_of(expert.get(f"{PAGES}/test-runs/{run['id']}/results/nope"), 404)


# ---------------------------------------------------------------- comparing


def two_runs(api) -> tuple[dict[str, str], dict, dict]:
    """A done baseline where everything passes, and a candidate against it where D and I
    regress and case-2 errs."""
    ids = the_set(api)
    base = start(api, candidate="1.0.0")
    ok(send(api, base["id"], passing(ids)))
    run = start(api, candidate="2.0.0", baseline=base["id"])
    ok(send(api, run["id"], failing(ids)))
    return ids, base, run


def test_the_comparison_defaults_to_the_runs_baseline_and_says_the_p_value_in_words(api, expert):
    ids, base, run = two_runs(api)
    page = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}/compare"))
    assert f'<option value="{base["id"]}" selected>' in page
    assert "2 regressed and 0 fixed: p = 0.5: the difference could be chance" in page
    counts = dict(re.findall(r'<th scope="row">(?:<a [^>]+>)?([A-Z][a-z ]+)(?:</a>)?</th>\s*'
                             r'<td class="num">(\d+)</td>', page))  # fmt: skip
    assert counts == {
        "Regressed": "2", "Fixed": "0", "Still failing": "0", "Still passing": "2", "New": "0",
        "Gone": "0", "Errored": "1", "Ungraded": "1",
    }  # fmt: skip
    regressed = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}/compare?change=regressed"))
    pairs = re.findall(r'<th scope="row"><a href="[^"]+/results/([^"]+)">', regressed)
    assert sorted(pairs) == sorted([ids["D"], ids["I"]])
    swapped = text_of(
        expert.get(
            f"{PAGES}/test-runs/{run['id']}/compare?change=fixed", headers={"HX-Request": "1"}
        )
    )
    assert swapped.lstrip().startswith('<section id="comparison"') and "No case changed" in swapped


def test_without_a_baseline_the_comparison_takes_the_previous_done_run(api, expert):
    ids, base, run = two_runs(api)
    third = start(api, candidate="3.0.0")
    ok(send(api, third["id"], passing(ids)))
    page = text_of(expert.get(f"{PAGES}/test-runs/{third['id']}/compare"))
    assert f'<option value="{run["id"]}" selected>' in page
    assert "0 regressed and 2 fixed" in page
    chosen = text_of(expert.get(f"{PAGES}/test-runs/{third['id']}/compare?baseline={base['id']}"))
    assert f'<option value="{base["id"]}" selected>' in chosen
    assert "0 regressed and 0 fixed" in chosen
    first = text_of(expert.get(f"{PAGES}/test-runs/{base['id']}/compare"))
    assert "Pick a baseline" in first  # later done runs are offered, none picked: none is older
    assert re.search(rf'<option value="{run["id"]}"\s*>', first) and "regressed and" not in first


def test_a_comparison_with_a_bad_change_or_a_foreign_baseline_is_refused(api, expert, unchanged):
    _, base, run = two_runs(api)
    url = f"{PAGES}/test-runs/{run['id']}/compare"
    with unchanged():
        text_of(expert.get(f"{url}?change=worse"), 400)
        text_of(expert.get(f"{url}?baseline=trun-nope"), 404)
        text_of(expert.get(f"{url}?baseline={base['id']}&cursor=spoilt"), 400)


def test_a_run_alone_in_its_set_has_nothing_to_compare_with(api, expert):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)))
    page = text_of(expert.get(f"{PAGES}/test-runs/{run['id']}/compare"))
    assert "Nothing to compare with" in page


# ---------------------------------------------------------------- the test set's runs


def test_the_test_sets_runs_page_lists_runs_versions_and_the_pass_rate_chart(api, expert):
    _, base, run = two_runs(api)
    cases = text_of(expert.get(f"{PAGES}/test-set/cases?projectId={P1}"))
    assert f'href="{PAGES}/test-set/runs?projectId={P1}"' in cases
    page = text_of(expert.get(f"{PAGES}/test-set/runs?projectId={P1}"))
    rows = re.findall(r'<th scope="row"><a href="[^"]+/test-runs/([^"]+)">([^<]+)</a>', page)
    assert rows == [(run["id"], "2.0.0"), (base["id"], "1.0.0")]  # newest first
    assert "2 regressed, 0 fixed" in page and "no baseline" in page
    assert "1.0.0 100.0 %; 2.0.0 50.0 %" in page  # the chart's values, in words
    assert '<th scope="row">v1</th>' in page
    older = text_of(expert.get(f"{PAGES}/test-set/runs?projectId={P1}&limit=1"))
    more = re.search(r'href="([^"]+cursor=[^"]+)">Older runs', older).group(1)
    rest = text_of(expert.get(more.replace("&amp;", "&")))
    assert re.findall(r'/test-runs/(trun-[^"]+)">', rest)[0] == base["id"]
    text_of(expert.get(f"{PAGES}/test-set/runs?projectId=nope"), 400)


# ---------------------------------------------------------------- a case's history


def test_a_cases_history_shows_its_last_outcomes_and_marks_a_flaky_candidate(api, expert):
    ids = the_set(api)
    for results in (passing(ids), failing(ids), passing(ids)):
        run = start(api, candidate="2.0.0")
        ok(send(api, run["id"], results))
    other = start(api, candidate="3.0.0")
    ok(send(api, other["id"], passing(ids)))
    page = text_of(expert.get(f"{PAGES}/test-set/cases/{ids['D']}"))
    outcomes = re.findall(r'<td><span class="outcome (\w+)">', page)
    assert outcomes == ["pass", "pass", "fail", "pass"]  # newest first
    assert "The same candidate got different outcomes: 2.0.0." in page
    assert page.count('<span class="tag flaky">flaky</span>') == 4  # the banner and 2.0.0's 3
    steady = text_of(expert.get(f"{PAGES}/test-set/cases/{ids['R']}"))
    assert "flaky" not in steady and steady.count('<span class="outcome pass">') == 4
    fresh = text_of(expert.get(f"{PAGES}/test-set/cases/case-1"))  # retired: in no run
    assert "No test run has graded it yet." in fresh


# ---------------------------------------------------------------- the overview


def test_the_overview_shows_each_sets_last_run_in_one_query(app, api, client):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], failing(ids)))
    sign_in(client, "admin@acme.test", "admin-pass-1")  # reads every set
    with statements(app) as sent:
        page = text_of(client.get("/"))
    assert len([s for s in sent if "test_runs" in s]) == 1
    assert f'href="{PAGES}/test-runs/{run["id"]}">2.0.0</a>' in page
    assert "50.0 %" in page
    assert page.count('<span class="hint">none</span>') >= 2  # the sets with no run


def test_the_apis_one_case_does_not_pay_for_the_case_pages_history(app, api):
    ids = the_set(api)
    run = start(api)
    ok(send(api, run["id"], passing(ids)))
    with statements(app) as sent:
        ok(api.get(f"/v1/agents/{AGENT}/test-set/cases/{ids['D']}"))
    assert not [s for s in sent if "test_run_cases" in s]
