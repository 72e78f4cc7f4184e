"""Operating it (docs/deploy.md): the probes, the metrics, the logs, exporting a test set and
retiring or restoring many cases at once, on a real database of each engine.

The metrics across workers and the JSON logs are read off a live gunicorn (tests/live.py), as a
load balancer, Prometheus and a log shipper would read them.
"""

from __future__ import annotations

import csv
import io
import json
import re
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from conftest import (
    AGENT,
    P1,
    TOKENS,
    csrf_of,
    error_of,
    make_app,
    metric,
    ok,
    refused,
    sign_in,
)
from databases import ENGINE
from flask_migrate import downgrade
from live import gunicorn, gunicorn_master
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from kindgi.database import db
from kindgi.models import JudgeVerdict

TS = f"/v1/agents/{AGENT}/test-set"
MIGRATIONS = Path(__file__).parent.parent / "kindgi" / "migrations" / "versions"


def counts(api) -> dict[str, int]:
    return ok(api.get(f"{TS}?projectId={P1}"))["cases"]


def unreachable(url: str) -> str:
    """The same database's URL where nothing answers: a folder that does not exist, or a port
    nobody listens on."""
    if ENGINE == "sqlite":
        return "sqlite:////nonexistent-folder/kindgi.sqlite"
    return make_url(url).set(port=1).render_as_string(hide_password=False)


# ---------------------------------------------------------------- the probes


def test_liveness_answers_without_touching_the_database(app):
    down = make_app(unreachable(app.config["SQLALCHEMY_DATABASE_URI"]))
    resp = down.test_client().get("/healthz")
    assert (resp.status_code, resp.get_json()) == (200, {"status": "ok"})


def test_readiness_checks_the_database_and_its_schema(app, client):
    resp = client.get("/readyz")
    assert resp.status_code == 200
    assert resp.get_json() == {"status": "ready", "checks": {"database": "ok", "schema": "ok"}}


def test_readiness_is_503_naming_the_database_when_it_cannot_be_reached(app):
    down = make_app(unreachable(app.config["SQLALCHEMY_DATABASE_URI"]))
    resp = down.test_client().get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json() == {
        "status": "unready",
        "checks": {"database": "unreachable", "schema": "unknown"},
    }
    assert "nonexistent" not in resp.get_data(as_text=True)  # no path or host is told


def test_readiness_is_503_naming_the_schema_when_a_migration_is_missing(app, client):
    with app.app_context():
        downgrade(revision="0004")
        db.session.remove()
    resp = client.get("/readyz")
    assert resp.status_code == 503
    newest = sorted(p.name[:4] for p in MIGRATIONS.glob("0*.py"))[-1]
    assert resp.get_json()["checks"] == {"database": "ok", "schema": f"at 0004, needs {newest}"}


def test_readiness_checks_the_judges_queue_once_a_judge_is_configured(databases, app):
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    judged = {"JUDGE_URL": "http://127.0.0.1:1/v1", "JUDGE_MODEL": "m"}
    resp = make_app(url, **judged).test_client().get("/readyz")
    assert (resp.status_code, resp.get_json()["checks"]["queue"]) == (200, "ok")
    lost = make_app(url, QUEUE_URL="redis://127.0.0.1:1/0", **judged)
    resp = lost.test_client().get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json()["checks"] == {
        "database": "ok",
        "schema": "ok",
        "queue": "unreachable",
    }


# ---------------------------------------------------------------- metrics


def test_metrics_count_requests_by_route_template_refusals_and_replays(app, api):
    scrape = api.client.get("/metrics").get_data(as_text=True)
    route = "/v1/agents/<agent_id>/test-set"
    before = {
        "ok": metric(scrape, "kindgi_http_requests_total", route=route, method="GET", status="200"),
        "seen": metric(scrape, "kindgi_http_request_duration_seconds_count", route=route,
                       method="GET"),
        "forbidden": metric(scrape, "kindgi_errors_total", code="forbidden"),
        "replays": metric(scrape, "kindgi_idempotent_replays_total"),
    }  # fmt: skip
    for _ in range(3):
        ok(api.get(f"{TS}?projectId={P1}"))
    refused(api.post(f"{TS}/cases/case-2/retire", {"reason": "x"}, as_="reader"), 403, "forbidden")
    key = {"Idempotency-Key": "metrics-1"}
    first = api.post(f"{TS}/cases/case-2/retire", {"reason": "x"}, headers=key)
    again = api.post(f"{TS}/cases/case-2/retire", {"reason": "x"}, headers=key)
    assert again.headers["Idempotent-Replayed"] == "true" and again.data == first.data
    scrape = api.client.get("/metrics").get_data(as_text=True)
    assert metric(scrape, "kindgi_http_requests_total", route=route, method="GET",
                  status="200") == before["ok"] + 3  # fmt: skip
    assert metric(scrape, "kindgi_http_request_duration_seconds_count", route=route,
                  method="GET") == before["seen"] + 3  # fmt: skip
    assert metric(scrape, "kindgi_errors_total", code="forbidden") == before["forbidden"] + 1
    assert metric(scrape, "kindgi_idempotent_replays_total") == before["replays"] + 1
    assert "kindgi_judge_questions_waiting 0.0" in scrape
    assert "case-2" not in scrape and TOKENS["admin"] not in scrape  # routes, never ids


def test_metrics_keep_the_same_series_whatever_callers_make_up(app, api):
    """docs/deploy.md, Metrics: every label is bounded. Made-up methods are one `other`, a URL
    no route has is `(unmatched)`, ids are their route's template, and refusals are codes."""

    def series() -> set[str]:
        text = api.client.get("/metrics").get_data(as_text=True)
        return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line[:1] not in "#"}

    def made_up(tag: str) -> None:
        for n in range(25):
            word = f"{tag}{chr(65 + n)}"
            api.call(f"PROBE{word}", f"{TS}?projectId={P1}")  # a method nobody defined
            api.call(f"X{word}", f"/{word}")
            api.call(word.lower(), f"{TS}/cases")
            api.get(f"/v1/{word}/{n}")  # a URL no route has, in the API and among the pages
            api.get(f"/pages/{word}?q={word}")
            api.get(f"{TS}/cases/case-{word}")  # a route's template with an id nobody has
            api.post(f"{TS}/cases/case-{word}/retire", {"reason": word}, as_=f"kgi_{word}")
            api.get(f"/static/{word}.css", headers={"Range": f"bytes={n}-{n + 1}"})

    series()  # the scrape's own series
    made_up("Q")
    before = series()
    made_up("Z")
    assert series() == before


def test_metrics_count_login_throttling(app, client):
    before = metric(client.get("/metrics").get_data(as_text=True), "kindgi_logins_throttled_total")
    token = csrf_of(client)
    for _ in range(11):
        resp = client.post(
            "/login", data={"email": "reader@acme.test", "password": "wrong", "csrf_token": token}
        )
    assert resp.status_code == 429
    after = metric(client.get("/metrics").get_data(as_text=True), "kindgi_logins_throttled_total")
    assert after == before + 1


def test_metrics_need_the_metrics_token_once_one_is_set(databases, app):
    guarded = make_app(app.config["SQLALCHEMY_DATABASE_URI"], METRICS_TOKEN="m-secret")
    client = guarded.test_client()
    assert error_of(client.get("/metrics"))["code"] == "unauthenticated"
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    right = client.get("/metrics", headers={"Authorization": "Bearer m-secret"})
    assert right.status_code == 200 and right.mimetype == "text/plain"
    off = make_app(app.config["SQLALCHEMY_DATABASE_URI"], METRICS=False)
    assert off.test_client().get("/metrics").status_code == 404


def test_metrics_are_summed_over_every_gunicorn_worker(app, tmp_path):
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    with gunicorn_master(url, tmp_path / "g.log", workers=3) as (master, base):
        # A sync worker answers one connection at a time: the one that takes a request whose
        # head has not all come waits on it, so the other 59 are answered by other workers
        # (left to chance, one quick worker may answer them all on a busy machine)
        held = socket.create_connection((urlsplit(base).hostname, urlsplit(base).port))
        with held:
            held.sendall(b"GET /healthz HTTP/1.1\r\nHost: kindgi\r\nConnection: close\r\n")
            with ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(lambda _: requests.get(f"{base}/healthz", timeout=60),
                                        range(59)))  # fmt: skip
            held.sendall(b"\r\n")
            assert held.makefile("rb").readline().split()[1] == b"200"
        assert {a.status_code for a in answers} == {200}
        (folder,) = Path(tempfile.gettempdir()).glob(f"kindgi-metrics-{master.pid}-*")
        counted_by = {path.stem.split("_")[-1] for path in folder.glob("counter_*.db")}
        assert len(counted_by) >= 2, counted_by  # several workers counted
        seen = set()
        for _ in range(12):  # each scrape answered by whichever worker: always the same sum
            text = requests.get(base + "/metrics", timeout=10).text
            seen.add(
                metric(
                    text, "kindgi_http_requests_total", route="/healthz", method="GET", status="200"
                )
            )
        assert seen == {60.0}
    assert not folder.exists()  # the master made it, and removed it as it stopped


# ---------------------------------------------------------------- logs


def test_json_logs_a_line_per_request_and_per_error_and_never_a_secret(app, tmp_path):
    url, log = app.config["SQLALCHEMY_DATABASE_URI"], tmp_path / "g.log"
    password = "reader-pass-1"
    with gunicorn(url, log, workers=2, KINDGI_LOG_FORMAT="json") as base:
        http = requests.Session()
        auth = {"Authorization": f"Bearer {TOKENS['admin']}"}
        ids = [http.get(f"{base}{TS}?projectId={P1}", headers=auth).headers["X-Request-Id"]]
        made = http.post(base + "/v1/tokens", json={"name": "logged?"}, headers=auth)
        secret = made.json()["secret"]
        ids.append(made.headers["X-Request-Id"])
        bad = http.get(f"{base}{TS}?projectId={P1}", headers={"Authorization": "Bearer kgi_x"})
        ids.append(bad.headers["X-Request-Id"])
        page = requests.Session()
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.get(base + "/login").text)
        signed = page.post(base + "/login", data={"email": "reader@acme.test",
                                                  "password": password,
                                                  "csrf_token": token.group(1)},
                           allow_redirects=False)  # fmt: skip
        assert signed.status_code == 302
        ids.append(page.get(base + "/", allow_redirects=False).headers["X-Request-Id"])
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    requests_by_id = {line["requestId"]: line for line in lines if line.get("event") == "request"}
    first, minted, refused_, overview = (requests_by_id[i] for i in ids)
    assert first["route"] == "/v1/agents/<agent_id>/test-set"
    assert (first["method"], first["status"]) == ("GET", 200)
    assert first["caller"] == {"kind": "user", "id": "u-admin"}
    assert isinstance(first["durationMs"], float) and first["time"].endswith("+00:00")
    assert (minted["status"], minted["route"]) == (201, "/v1/tokens")
    assert (refused_["status"], refused_["code"], refused_["caller"]) == (401, "unauthenticated",
                                                                          None)  # fmt: skip
    assert overview["caller"] == {"kind": "user", "id": "u-reader"}
    for forbidden in (secret, password, *TOKENS.values(), "kgi_x"):
        assert forbidden not in text


def test_an_error_is_logged_once_with_its_requests_id_and_never_its_message(app, capfd):
    broken = make_app(app.config["SQLALCHEMY_DATABASE_URI"], LOG_FORMAT="json")

    def boom():
        raise ValueError("password=hunter2 in a message")

    broken.add_url_rule("/v1/boom", "boom", boom)
    resp = broken.test_client().get("/v1/boom")
    assert error_of(resp)["code"] == "internal"
    logged = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line[:1] == "{"]
    mine = [line for line in logged if line.get("requestId") == resp.headers["X-Request-Id"]]
    assert [line["event"] for line in mine] == ["error", "request"]
    assert mine[0]["error"]["type"] == "ValueError" and "boom" in mine[0]["error"]["where"]
    assert "hunter2" not in json.dumps(logged)


def test_a_database_error_never_quotes_the_values_of_its_statement(app):
    """docs/deploy.md: no log line holds what a caller (or a judge) wrote. The database's
    errors name their SQL, never the values bound to it, so no traceback printed anywhere (a
    worker's, gunicorn's) can quote them."""
    said = "what-a-candidate-steered-the-judge-to-say"
    verdict = {"key": "k", "model": "m", "prompt": "p", "outcome": "pass", "reason": said,
               "at": datetime(2026, 12, 1)}  # fmt: skip
    with app.app_context():
        keep = JudgeVerdict.__table__.insert()
        db.session.execute(keep, verdict)
        with pytest.raises(IntegrityError) as twice:
            db.session.execute(keep, verdict)
        db.session.rollback()
    assert "INSERT INTO judge_verdicts" in str(twice.value)
    assert said not in str(twice.value)


# ---------------------------------------------------------------- export


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Exports read two cases at a time here, so every test walks their chunks' keyset."""
    monkeypatch.setattr("kindgi.service.cases.EXPORT_CHUNK", 2)


def hand_case(api, **extra) -> dict:
    return ok(api.post(f"{TS}/cases", {"runId": "run-1", "answer": "right", **extra}), 201)


def exported(api, query: str = "", as_: str = "admin"):
    return api.get(f"{TS}/export?projectId={P1}{query}", as_=as_)


def test_export_jsonl_is_every_case_as_listed_with_its_runs_content(app, api):
    for _ in range(3):
        hand_case(api)
    resp = exported(api)
    assert resp.mimetype == "application/x-ndjson"
    assert resp.headers["Content-Disposition"] == (f'attachment; filename="{AGENT}-{P1}.jsonl"')
    lines = [json.loads(line) for line in resp.get_data(as_text=True).splitlines()]
    listed = ok(api.get(f"{TS}/cases?projectId={P1}&limit=100"))["data"]
    assert [{k: v for k, v in line.items() if k not in ("input", "output", "calls")}
            for line in lines] == listed  # fmt: skip
    assert len(lines) == counts(api)["active"]
    run = {line["runId"]: line for line in lines}["run-1"]
    with app.app_context():
        from kindgi.models import Snapshot

        snap = db.session.get(Snapshot, "run-1")
        assert (run["input"], run["output"], run["calls"]) == (snap.input, snap.output, snap.calls)
    everything = exported(api, "&include=retired").get_data(as_text=True).splitlines()
    assert len(everything) == sum(counts(api).values())
    assert any(json.loads(line).get("retired") for line in everything)


def test_export_csv_opens_in_a_spreadsheet_quoting_commas_quotes_and_newlines(app, api):
    case = hand_case(api)
    reason = 'stale, "very"\nsecond line'
    ok(api.post(f"{TS}/cases/{case['id']}/retire", {"reason": reason}))
    other = hand_case(api)
    ok(api.post(f"{TS}/cases/{other['id']}/retire", {"reason": '=HYPERLINK("x")'}))
    body = exported(api, "&include=retired&format=csv")
    assert body.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(body.get_data(as_text=True), newline="")))
    assert len(rows) == sum(counts(api).values())
    by_id = {row["id"]: row for row in rows}
    assert by_id[case["id"]]["retiredReason"] == reason
    assert by_id[other["id"]]["retiredReason"] == '\'=HYPERLINK("x")'  # never a formula
    assert json.loads(by_id[case["id"]]["expect"]) == case["expect"]
    assert json.loads(by_id[case["id"]]["output"]) is not None
    assert by_id[case["id"]]["addedById"] == "u-admin" and by_id[case["id"]]["expert"] in (
        "true",
        "false",
    )


def test_export_of_a_version_is_its_cases_by_id(app, api):
    run = ok(api.post(f"/v1/agents/{AGENT}/test-runs", {"projectId": P1, "candidate": "9"}), 201)
    version = run["version"]
    hand_case(api)  # after the freeze: not in the version
    lines = exported(api, f"&version={version}").get_data(as_text=True).splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert ids == sorted(ids) and len(ids) == run["cases"]["total"]
    assert refused(exported(api, "&version=v99"), 404, "version-not-found")


def test_export_refuses_bad_input_naming_it(app, api, unchanged):
    with unchanged():
        err = refused(exported(api, "&format=xlsx"), 400, "bad-input")
        assert set(err["details"]["fields"]) == {"format"}
        assert refused(exported(api, "", as_="expert"), 403, "forbidden")


def test_the_export_command_writes_what_the_api_answers(app, api):
    hand_case(api)
    cli = app.test_cli_runner()
    ours = ["kindgi", "export", AGENT, P1, "--tenant", "acme"]
    result = cli.invoke(args=ours)
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == exported(api).data
    csv_out = cli.invoke(args=[*ours, "--format", "csv"])
    assert csv_out.stdout_bytes == exported(api, "&format=csv").data
    ambiguous = cli.invoke(args=["kindgi", "export", AGENT, P1])  # globex has one too
    assert ambiguous.exit_code != 0 and "tenant" in ambiguous.output
    missing = cli.invoke(args=["kindgi", "export", "acme.nope", P1])
    assert missing.exit_code != 0 and "agent-not-found" in missing.output


def test_the_cases_page_links_its_export(app, client):
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    page = client.get(f"/agents/{AGENT}/test-set/cases?projectId={P1}").get_data(as_text=True)
    link = re.search(r'href="([^"]*/export\?[^"]*format=csv[^"]*)"', page).group(1)
    resp = client.get(link.replace("&amp;", "&"))
    assert resp.status_code == 200 and resp.mimetype == "text/csv"


# ---------------------------------------------------------------- bulk retire and restore


def test_bulk_retire_and_restore_move_every_case_and_the_counts_exactly(app, api):
    ids = [hand_case(api)["id"] for _ in range(4)]
    before = counts(api)
    body = {"projectId": P1, "caseIds": ids[:3], "reason": "stale"}
    done = ok(api.post(f"{TS}/cases/retire", body, headers={"Idempotency-Key": "bulk-1"}))
    assert [c["id"] for c in done["data"]] == sorted(ids[:3])
    assert all(c["retired"]["reason"] == "stale" for c in done["data"])
    assert counts(api) == {"active": before["active"] - 3, "retired": before["retired"] + 3}
    again = api.post(f"{TS}/cases/retire", body, headers={"Idempotency-Key": "bulk-1"})
    assert again.headers["Idempotent-Replayed"] == "true" and again.get_json() == done
    back = ok(api.post(f"{TS}/cases/restore", {"projectId": P1, "caseIds": ids[:2]}))
    assert all("retired" not in c for c in back["data"])
    assert counts(api) == {"active": before["active"] - 1, "retired": before["retired"] + 1}


def test_bulk_changes_are_all_or_nothing_naming_the_cases_at_fault(app, api, unchanged):
    ids = [hand_case(api)["id"] for _ in range(2)]
    with unchanged():
        err = refused(api.post(f"{TS}/cases/retire", {"projectId": P1, "reason": "x",
                                                      "caseIds": [*ids, "case-nope", "nope-2"]}),
                      404, "case-not-found")  # fmt: skip
        assert err["details"]["caseIds"] == ["case-nope", "nope-2"]
        err = refused(api.post(f"{TS}/cases/retire", {"projectId": P1, "reason": "x",
                                                      "caseIds": [*ids, "case-1"]}),
                      409, "case-retired")  # fmt: skip
        assert err["details"]["caseIds"] == ["case-1"]
        err = refused(api.post(f"{TS}/cases/restore", {"projectId": P1,
                                                       "caseIds": ["case-1", *ids]}),
                      409, "case-active")  # fmt: skip
        assert err["details"]["caseIds"] == sorted(ids)
        for bad, field in (
            ({"caseIds": [], "reason": "x"}, "caseIds"),
            ({"caseIds": [ids[0], ids[0]], "reason": "x"}, "caseIds"),
            ({"caseIds": [f"c{i}" for i in range(501)], "reason": "x"}, "caseIds"),
            ({"caseIds": ids}, "reason"),
        ):
            err = refused(api.post(f"{TS}/cases/retire", {"projectId": P1, **bad}), 400,
                          "bad-input")  # fmt: skip
            assert field in err["details"]["fields"], bad
        other = {"projectId": P1, "caseIds": ["cor-3"], "reason": "x"}  # acme.multi's case
        assert refused(api.post(f"{TS}/cases/retire", other), 404, "case-not-found")


def test_the_cases_page_retires_and_restores_the_ticked_cases(app, api, client):
    ids = [hand_case(api)["id"] for _ in range(2)]
    sign_in(client, "publisher@acme.test", "publisher-pass-1")
    url = f"/agents/{AGENT}/test-set/cases?projectId={P1}"
    page = client.get(url).get_data(as_text=True)
    assert "data-select-all" in page and f'value="{ids[0]}" form="bulk"' in page
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    form = {"csrf_token": token, "projectId": P1, "back": url, "caseIds": ids,
            "reason": "stale", "action": "retire"}  # fmt: skip
    resp = client.post(f"/agents/{AGENT}/test-set/cases/bulk", data=form, follow_redirects=True)
    assert "Retired 2 cases." in resp.get_data(as_text=True)
    assert counts(api)["retired"] == 3
    with_missing = {**form, "caseIds": [*ids, "case-nope"], "action": "restore"}
    resp = client.post(f"/agents/{AGENT}/test-set/cases/bulk", data=with_missing,
                       follow_redirects=True)  # fmt: skip
    assert "Nothing was changed" in resp.get_data(as_text=True) and "case-nope" in resp.text
    assert counts(api)["retired"] == 3
    without_token = {k: v for k, v in form.items() if k != "csrf_token"}
    assert (
        client.post(f"/agents/{AGENT}/test-set/cases/bulk", data=without_token).status_code == 400
    )
