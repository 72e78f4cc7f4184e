"""The operator's commands: `flask --app app kindgi load FILE.json`, `demo`, `export`, `import`,
`worker`, `prune`, `check`."""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import click
from flask import Flask
from flask.cli import AppGroup
from flask_migrate import upgrade
from sqlalchemy import select

from . import demo, queue, service, world
from .config import API_PREFIX
from .database import abandon, commit, db, set_writing
from .errors import DomainError
from .models import Case, Tenant, User
from .schemas.common import rfc3339

group = AppGroup("kindgi", help="Load worlds and demo data.")


def ensure_schema() -> None:
    """Bring the schema up to date with the migrations (creating it where there is none)."""
    upgrade()


@group.command("load")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def load_command(path: Path) -> None:
    """Load a world file in one transaction: all of it, or nothing and the bad entry named."""
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise click.ClickException(f"{path}: not JSON: {exc}") from None
    set_writing(True)
    ensure_schema()
    try:
        counts = world.load(data)
        commit()
    except world.WorldError as exc:
        abandon()
        raise click.ClickException(f"{path}: nothing was loaded: {exc}") from None
    click.echo(f"loaded {path}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))


@group.command("demo")
@click.option(
    "--cases",
    default=2000,
    show_default=True,
    type=click.IntRange(10, 5_000_000),
    help="How many cases to generate.",
)
@click.option(
    "--runs",
    type=click.IntRange(6, 5_000_000),
    help="How many runs in all: the cases' own (a tenth of the cases) and the rest no case "
    f"was made from yet (default: {demo.INBOX_RUNS} of those).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the credentials as JSON.")
@click.option(
    "--url",
    default="http://127.0.0.1:5000",
    show_default=True,
    help="Where the app will be served, for the instructions printed (not with --json).",
)
def demo_command(cases: int, runs: int | None, as_json: bool, url: str) -> None:
    """Load a generated demo world (once) and print how to sign in and a fresh API token."""
    url = url.rstrip("/")
    set_writing(True)
    ensure_schema()
    started = time.monotonic()
    password = secrets.token_urlsafe(12)
    if db.session.get(Tenant, demo.TENANT) is None:
        token = service.TOKEN_PREFIX + secrets.token_urlsafe(32)
        try:
            made = demo.world(cases, password, token, runs=runs)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        counts = world.load(made, trusted=True)
        test_runs = demo.test_runs(service.user_principal(demo.USER))
        note = (
            f"loaded {cases} cases, {counts['runs']} runs and {test_runs} test runs in "
            f"{time.monotonic() - started:.1f} s"
        )
    else:  # already there: keep the data, give fresh credentials
        user = db.session.get(User, demo.USER)
        user.password_hash = service.hash_password(password)
        _, token = service.create_token(service.user_principal(demo.USER), "demo", None)
        have = db.session.scalar(select(db.func.count()).select_from(Case))
        note = f"the demo world was already loaded ({have} cases and corrections); kept it"
    commit()
    agent_id, _, projects = demo.AGENTS[0]
    creds = {
        "token": token,
        "agentId": agent_id,
        "projectId": projects[0],
        "email": demo.EMAIL,
        "password": password,
    }
    if as_json:
        click.echo(json.dumps(creds))
        return
    click.echo(note, err=True)
    click.echo(
        f"""
Sign in at {url}/login as {demo.EMAIL} with password {password}

Try the API:
  export TOKEN={token}
  curl -s -H "Authorization: Bearer $TOKEN" \\
    '{url}{API_PREFIX}/agents/{agent_id}/test-set?projectId={projects[0]}'
  curl -s -H "Authorization: Bearer $TOKEN" \\
    '{url}{API_PREFIX}/agents/{agent_id}/test-set/cases?projectId={projects[0]}&limit=2'
""".rstrip(),
        file=sys.stdout,
    )


@group.command("export")
@click.argument("agent_id")
@click.argument("project_id")
@click.option("--format", "form", type=click.Choice(["jsonl", "csv"]), default="jsonl")
@click.option("--include-retired", is_flag=True, help="The retired cases too.")
@click.option("--version", help="A frozen version's cases (e.g. v3) instead of the live set.")
@click.option("--tenant", help="The agent's tenant, when several have an agent of that id.")
def export_command(
    agent_id: str,
    project_id: str,
    form: str,
    include_retired: bool,
    version: str | None,
    tenant: str | None,
) -> None:
    """Write a test set's cases to standard output, as JSON lines or CSV (docs/deploy.md)."""
    from . import reports

    try:
        caller = service.operator(agent_id, tenant)
        rows = service.export_cases(
            caller,
            agent_id,
            project_id.lower(),
            include="retired" if include_retired else None,
            version=version,
        )
    except DomainError as err:
        said = f" {json.dumps(err.details)}" if err.details else ""
        raise click.ClickException(f"{err.code}: {err.message}{said}") from None
    out = sys.stdout.buffer
    for piece in reports.jsonl(rows) if form == "jsonl" else reports.csv_rows(rows):
        out.write(piece if isinstance(piece, bytes) else piece.encode())
    out.flush()


@group.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--agent", "agent_id", required=True, help="The agent whose test set gets the cases.")
@click.option("--project", "project_id", required=True, help="The project they go in.")
@click.option("--tenant", help="The agent's tenant, when several have an agent of that id.")
def import_command(path: Path, agent_id: str, project_id: str, tenant: str | None) -> None:
    """Add an export's cases (JSON lines) to a test set, each on a finished run of its own
    made from the exported input, output and calls: all of them, or nothing and the bad line
    named."""
    set_writing(True)
    try:
        with path.open(encoding="utf-8") as lines:
            caller = service.operator(agent_id, tenant)
            cases = service.import_cases(caller, agent_id, project_id.lower(), lines)
        commit()
    except DomainError as err:
        abandon()
        said = f" {json.dumps(err.details)}" if err.details else ""
        raise click.ClickException(
            f"nothing was imported: {err.code}: {err.message}{said}"
        ) from None
    click.echo(f"imported {len(cases)} cases from {path} into {agent_id} / {project_id.lower()}")


@group.command("worker")
@click.option(
    "--threads", type=int, help="Questions asked at once (default KINDGI_JUDGE_CONCURRENCY)."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="Serve the workers' metrics (judge calls, latency, cache hits) for Prometheus here.",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True)
def worker_command(threads: int | None, metrics_port: int | None, metrics_host: str) -> None:
    """Run the judge's workers: queue again what is still pending, then take questions until
    stopped (Ctrl-C or SIGTERM ends them, the current calls first)."""
    from flask import current_app

    from . import telemetry
    from .service import judging

    if judging.judge_settings() is None:
        raise click.ClickException("no judge is configured: set KINDGI_JUDGE_URL and _MODEL")
    huey = queue.of(current_app).huey
    if metrics_port:
        token = current_app.config["METRICS_TOKEN"]
        telemetry.serve_worker_metrics(metrics_host, metrics_port, token)
    waiting = judging.requeue(leased_too=True)
    click.echo(f"the judge's workers: {waiting} questions queued again", err=True)
    workers = threads or int(current_app.config["JUDGE_CONCURRENCY"]) + 2
    # an idle thread looks again within a second, not the 10 s huey waits by default
    huey.create_consumer(workers=workers, worker_type="thread", periodic=True, max_delay=1.0).run()


@group.command("prune")
@click.option(
    "--days",
    type=int,
    help="Keep unreferenced runs this many days (default KINDGI_RUN_RETENTION_DAYS, 30).",
)
def prune_command(days: int | None) -> None:
    """Delete the runs no case or correction was made from, once older than the retention, in
    small batches (each its own short transaction); running it again deletes nothing."""
    from .service import retention

    try:
        pruned = retention.prune_runs(days)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"pruned {pruned.runs} runs older than {rfc3339(pruned.before)} that no case was made "
        f"from, and {pruned.spans} trace spans no run was made of, in {pruned.batches} "
        f"batches; the longest batch held the write lock {pruned.longest_ms:.1f} ms (99 % of "
        f"them {pruned.p99_ms:.1f} ms at most)"
    )


@group.command("check")
def check_command() -> None:
    """Check the database's invariants (after a restore or an incident): exit status 1, each
    breach named, if one fails."""
    from .service import checks

    failed = 0
    for rule, breaches in checks.check().items():
        click.echo(f"{rule}: {'ok' if not breaches else f'{len(breaches)} breaches'}")
        for breach in breaches:
            click.echo(f"  {breach}")
        failed += len(breaches)
    if failed:
        raise click.ClickException(f"{failed} breaches of the database's invariants")


def register(app: Flask) -> None:
    app.cli.add_command(group)
