"""The test-run pages: a test set's runs, a run with its results, its live progress, one
result beside the corrected run, and a comparison with a baseline. Routes parse, call one
service function, and render.

Like every page they work as plain links and GET forms; htmx swaps the results or the pairs in
place (pushing the URL) and polls a running run's progress until it is over.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Flask, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required

from . import grading, service, views
from .errors import DomainError
from .pages import retire_reason, revision_form
from .schemas.common import TestSetQuery, load
from .schemas.test_runs import ComparePageQuery, ResultsQuery, TestSetRunsQuery, test_run_json

bp = Blueprint("runs", __name__)

OUTCOME_CHOICES = (
    ("", "Any outcome"),
    ("fail,error", "Not passing (failed or erred)"),
    ("pass", "Passed"),
    ("fail", "Failed"),
    ("error", "Erred"),
    ("pending", "Waiting for the judge"),
    ("ungraded", "Ungraded"),
)
BACK = ("outcome", "part", "cursor")  # what a triage keeps of the run page it came from
CHANGE_NAMES = {
    "regressed": "Regressed",
    "fixed": "Fixed",
    "still-failing": "Still failing",
    "still-passing": "Still passing",
    "new": "New",
    "gone": "Gone",
    "errored": "Errored",
    "ungraded": "Ungraded",
}


def register(app: Flask) -> None:
    """The blueprint and the filters its templates use."""
    app.register_blueprint(bp)
    app.add_template_filter(_percent, "percent")
    app.add_template_filter(_p_value_words, "p_value_words")
    app.add_template_filter(_run_json, "run_json")
    app.add_template_filter(service.RunView, "run_view")


def _percent(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value * 100:.{digits}f} %"


def _p_value_words(p: float) -> str:
    """The McNemar p-value said in words for a team lead."""
    if p >= 0.05:
        return f"p = {p:.2g}: the difference could be chance"
    return f"p = {p:.2g}: unlikely to be chance"


def _run_json(view: service.RunView) -> dict[str, Any]:
    """A run as the API shows it: its pass rate and interval, mean score, agreement."""
    return test_run_json(view, grading.wilson)


def _args(schema: type, names: tuple[str, ...] = ()) -> dict[str, Any]:
    """A query string checked by `schema`, empty fields left out; the comma lists in `names`
    split into lists."""
    args = load(schema, {k: v for k, v in request.args.items() if v != ""})
    for name in names:
        if name in args:
            args[name] = args[name].split(",")
    return args


def _url_with(**changes: str | None) -> str:
    """This page's URL with some parameters changed (None drops one)."""
    args = request.args.to_dict(flat=False)
    for name, value in changes.items():
        if value is None:
            args.pop(name, None)
        else:
            args[name] = [value]
    return f"{request.path}?{urlencode(args, doseq=True)}" if args else request.path


@bp.get("/agents/<agent_id>/test-set/runs")
@login_required
def test_set_runs(agent_id: str):
    args = _args(TestSetRunsQuery)
    found = service.test_set_runs(
        current_user,
        agent_id,
        args["projectId"],
        limit=args["limit"],
        cursor=args.get("cursor"),
        versions_cursor=args.get("versionsCursor"),
    )
    return render_template(
        "test_set_runs.html",
        found=found,
        more_runs=found.runs.next_cursor and _url_with(cursor=found.runs.next_cursor),
        more_versions=found.versions.next_cursor
        and _url_with(versionsCursor=found.versions.next_cursor),
    )


@bp.get("/agents/<agent_id>/test-set/health")
@login_required
def test_set_health(agent_id: str):
    """The set's health: its always-failing (with Revise and Retire), flaky, never-run and
    contradicting cases, and an SVG histogram of pass rates with its values as a table."""
    project_id = _args(TestSetQuery)["projectId"]
    health = service.test_set_health(current_user, agent_id, project_id)
    return render_template("test_set_health.html", health=health)


@bp.get("/agents/<agent_id>/test-runs/<run_id>")
@login_required
def run(agent_id: str, run_id: str):
    args = _args(ResultsQuery, ("outcome",))
    found = service.run_page(current_user, agent_id, run_id, **args)
    context = {
        "view": found.view,
        "run": _run_json(found.view),
        "results": found.results,
        "outcome": ",".join(args.get("outcome", [])),
        "part": args.get("part", ""),
        "outcome_choices": OUTCOME_CHOICES,
        "more_url": found.results.next_cursor and _url_with(cursor=found.results.next_cursor),
        "back": _back(),
        "done": found.done,
        "may_publish": found.may_publish,
        "retired": found.retired,
    }
    template = "_run_results.html" if views.swap() else "run.html"
    return render_template(template, **context), {"Vary": "HX-Request"}


@bp.get("/agents/<agent_id>/test-runs/<run_id>/progress")
@login_required
def progress(agent_id: str, run_id: str):
    """The run's status and tallies, which the run page polls while the run is running."""
    view = service.get_test_run(current_user, agent_id, run_id)
    return render_template("_run_progress.html", view=view, run=_run_json(view))


@bp.get("/agents/<agent_id>/test-runs/<run_id>/results/<case_id>")
@login_required
def result(agent_id: str, run_id: str, case_id: str):
    view = service.get_result(current_user, agent_id, run_id, case_id)
    return render_template("run_result.html", agent_id=agent_id, run_id=run_id, view=view)


@bp.route("/agents/<agent_id>/test-runs/<run_id>/results/<case_id>/revise", methods=["GET", "POST"])
@login_required
def triage_revise(agent_id: str, run_id: str, case_id: str):
    """Revise a case the run failed: the revise form beside the candidate's answer, with a
    button each to take its calls or its answer into it. Saved, back to the run; in place
    (htmx), what was done instead of the form."""
    found = service.triage_case(current_user, agent_id, run_id, case_id)
    form = revision_form(agent_id, found.view, found.result.row.result, from_test_run=run_id)
    if form.saved:
        said = f"{case_id} is revised: runs started from now on grade with it."
        return _triaged(agent_id, run_id, case_id, said)
    return _triage_page("_triage_revise.html", found, form=form), form.status


@bp.route("/agents/<agent_id>/test-runs/<run_id>/results/<case_id>/retire", methods=["GET", "POST"])
@login_required
def triage_retire(agent_id: str, run_id: str, case_id: str):
    """Retire a case the run failed, saying why. Retired, back to the run; in place (htmx),
    what was done instead of the form."""
    found = service.triage_case(current_user, agent_id, run_id, case_id)
    reason, errors, status = request.form.get("reason", ""), {}, 200
    if request.method == "POST":
        try:
            said = retire_reason()
            service.retire_case(current_user, agent_id, case_id, said, run_id)
            done = f"{case_id} is retired: no test run checks it until it is restored."
            return _triaged(agent_id, run_id, case_id, done, retired=True)
        except DomainError as err:
            errors = (err.details or {}).get("fields") or {"_body": [err.message]}
            status = err.status
    return _triage_page("_triage_retire.html", found, reason=reason, errors=errors), status


def _triage_page(fragment: str, found: service.TriageCase, **context: Any) -> str:
    """A triage form: in place in the run's page (htmx), or as a page of its own."""
    context.update(found=found, inline=views.swap(), fragment=fragment, back=_back())
    return render_template(fragment if views.swap() else "run_triage.html", **context)


def _triaged(
    agent_id: str, run_id: str, case_id: str, said: str, *, retired: bool = False
) -> ResponseReturnValue:
    """A case revised or retired from the run: in place, what was done and the run's triage
    again (and, once retired, no more offers for it); as a plain form, back to the run."""
    if views.swap():
        done = service.triage_of(run_id)
        return render_template(
            "_triage_done.html", said=said, done=done, case_id=case_id, retired=retired
        )
    flash(said)
    return redirect(url_for("runs.run", agent_id=agent_id, run_id=run_id, **_back()), 303)


def _back() -> dict[str, str]:
    """The run page's filters and place (`outcome`, `part`, `cursor`) as this request has them:
    its triage links carry them, and a triage goes back to the page as it was."""
    return {name: request.args[name] for name in BACK if request.args.get(name)}


@bp.get("/agents/<agent_id>/test-runs/<run_id>/compare")
@login_required
def compare(agent_id: str, run_id: str):
    args = _args(ComparePageQuery, ("change",))
    baseline = args.pop("baseline", None)
    found = service.comparison_page(current_user, agent_id, run_id, baseline, **args)
    context = {
        "found": found,
        "run": _run_json(found.view),
        "change": ",".join(args.get("change", [])),
        "change_names": CHANGE_NAMES,
        "more_url": found.comparison
        and found.comparison.page.next_cursor
        and _url_with(cursor=found.comparison.page.next_cursor),
    }
    template = "_compare_pairs.html" if views.swap() else "compare.html"
    return render_template(template, **context), {"Vary": "HX-Request"}
