"""The HTML pages for experts and team leads. Routes parse, call the service, and render.

Every page works as plain forms and links; htmx (vendored) only swaps parts in place. Forms are
validated by the same marshmallow schemas as the JSON API, and errors come back next to their field.
"""

from __future__ import annotations

import json
import re
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any
from urllib.parse import urlencode, urlparse

from flask import (
    Blueprint,
    Flask,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required, login_user, logout_user
from flask_wtf.csrf import generate_csrf
from jsonpointer import JsonPointerException, resolve_pointer

from . import case_form, http, matchers, reports, service, views
from .errors import BadInput, DomainError, TooManyAttempts, bad_input
from .schemas.cases import (
    BulkRestoreBody,
    BulkRetireBody,
    BulkTagsBody,
    CasesQuery,
    ExportQuery,
    RetireBody,
    ReviseBody,
)
from .schemas.common import Paging, TestSetQuery, load
from .schemas.corrections import AddCaseBody
from .schemas.identity import NewTokenBody
from .schemas.runs import RunsQuery
from .words import words

bp = Blueprint("pages", __name__)

CASE_ROWS, ITEM_ROWS = 2, 2  # empty rows offered on a fresh form


SEARCH_FIELDS = ("q", "tool", "expert", "addedBy", "addedAfter", "addedBefore", "tag")


def register_filters(app: Flask) -> None:
    """The templates' filters, and their `url_for`, remembered (`views.link`)."""
    app.jinja_env.globals["url_for"] = views.link
    app.add_template_filter(lambda week, weekly: weekly.get(week, 0), "weekly_count")
    app.add_template_filter(_pointed_at, "pointer")
    app.add_template_filter(_as_json, "as_json")
    app.add_template_filter(matchers.expected_text, "matcher_text")
    app.add_template_filter(views.when, "when")
    app.add_template_filter(views.actor, "actor")
    app.add_template_filter(views.case_rows, "case_rows")
    app.add_template_filter(views.one_line, "one_line")
    app.add_template_filter(views.tools_line, "tools_line")


def _as_json(value: Any, indent: int | None = None) -> str:
    """JSON for people to read; the template's autoescaping makes it safe HTML."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _pointed_at(document: Any, pointer: str) -> Any:
    """What a JSON Pointer points at in a run's output (None when nothing), for display."""
    try:
        return resolve_pointer(document, pointer, None)
    except JsonPointerException:
        return None


def _safe_next(target: str | None) -> str:
    """Only a path on this site: never an open redirect."""
    if not target:
        return url_for("pages.overview")
    parsed = urlparse(target)
    if parsed.scheme or parsed.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("pages.overview")
    return target


# ---------------------------------------------------------------- signing in


@bp.route("/login", methods=["GET", "POST"])
def login():
    email = request.form.get("email", "")
    if request.method == "GET":
        return render_template("login.html", error=None, email=email)
    try:
        principal = service.sign_in(email, request.form.get("password", ""))
    except TooManyAttempts as err:
        return render_template("login.html", error=err.message, email=email), 429, err.headers
    if principal is None:
        error = "That email and password don't match an account."
        return render_template("login.html", error=error, email=email), 401
    session.clear()  # a fresh session at every sign-in
    login_user(principal)
    # Its CSRF token made now, in the cookie this answer sets: otherwise the next page makes it
    # and sets the cookie again, and so does every page for a client that keeps the first one
    generate_csrf()
    return redirect(_safe_next(request.args.get("next")))


@bp.route("/logout", methods=["GET", "POST"])
def logout():
    if request.method == "POST":
        logout_user()
        session.clear()
        flash("You are signed out.")
        return redirect(url_for("pages.login"))
    return render_template("logout.html")


# ---------------------------------------------------------------- team leads


@bp.get("/")
@login_required
def overview():
    rows = service.overview(current_user)
    weeks = [service.week_of(service.clock()) - timedelta(weeks=11 - i) for i in range(12)]
    return render_template("overview.html", rows=rows, weeks=weeks)


# ---------------------------------------------------------------- experts: the cases


DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _page_args(after: str, before: str) -> dict[str, Any]:
    """A list page's query as the API's: fields left empty left out, the part boxes joined,
    and a day (the form's date inputs) as its start, the `before` one as the next day's, so
    both days given are included (before the day after 9999-12-31, which no calendar has, is
    every time there is: no bound)."""
    args = {name: value for name, value in request.args.items() if value != ""}
    parts = [p for p in request.args.getlist("part") if p]
    if parts:
        args["part"] = ",".join(parts)
    for name, days in ((after, 0), (before, 1)):
        if DATE_RE.fullmatch(args.get(name, "")):
            try:
                day = date.fromisoformat(args[name]) + timedelta(days=days)
            except ValueError:
                continue  # not a day: the schema says so
            except OverflowError:
                del args[name]
                continue
            args[name] = f"{day.isoformat()}T00:00:00Z"
    return args


def _list_query(schema: type, after: str, before: str) -> tuple[dict[str, Any], str, bool, bool]:
    """A list page's query checked by `schema` (its dates `after` and `before`, see
    `_page_args`), less its project; its project; whether htmx asks for the list alone; and
    whether for just the next rows ("Load more")."""
    args = load(schema, _page_args(after, before))
    swap = views.swap()
    return args, args.pop("projectId"), swap, swap and bool(args.get("cursor"))


@bp.get("/agents/<agent_id>/test-set/cases")
@login_required
def cases(agent_id: str):
    args, project_id, swap, more = _list_query(CasesQuery, "addedAfter", "addedBefore")
    try:
        view = service.cases_page(current_user, agent_id, project_id, with_counts=not more, **args)
    except BadInput as err:
        return _restart_list(err, "That page of cases is out of date; here are the newest.")
    context = {
        "agent_id": agent_id,
        "project_id": project_id,
        "kind": args.get("kind", ""),
        "include": args.get("include", ""),
        "search": {name: request.args.get(name, "") for name in SEARCH_FIELDS},
        "parts": args.get("part", []),
        "words": set(words(args.get("q", ""))),
        "page": view.page,
        "counts": view.counts,
        "tools": view.tools,
        "matching": view.matching,
        "max_counted": service.MAX_COUNTED,
        "may_publish": view.may_publish,
        "more_url": _more_url(view.page),
        # a case's address is this and its id (server-made: a prefix and hex, nothing to
        # quote); url_for once a page, not once a row
        "case_url": url_for("pages.case", agent_id=agent_id, case_id="-")[:-1],
    }
    template = "_case_rows.html" if more else "_case_list.html" if swap else "cases.html"
    return render_template(template, **context), {"Vary": "HX-Request"}


def _restart_list(err: DomainError, note: str) -> ResponseReturnValue:
    """A list asked for with a stale or spoilt cursor (a "Load more" or "Older" link kept past
    the cursor's day): the list again from its newest, with a note, htmx's requests included.
    Any other bad input is the 400 it is."""
    if not str((err.details or {}).get("reason", "")).startswith("cursor-"):
        raise err
    args = request.args.to_dict(flat=False)
    del args["cursor"]
    target = f"{request.path}?{urlencode(args, doseq=True)}" if args else request.path
    flash(note)
    if request.headers.get("HX-Request"):
        return "", 204, {"HX-Redirect": target}  # htmx goes there as a whole page
    return redirect(target, 303)


def _more_url(page: service.Page) -> str | None:
    if not page.next_cursor:
        return None
    args = request.args.to_dict(flat=False)
    args["cursor"] = [page.next_cursor]
    return f"{request.path}?{urlencode(args, doseq=True)}"


@bp.get("/agents/<agent_id>/test-set/export")
@login_required
def export(agent_id: str):
    """The export, for the signed-in expert (the API's takes a bearer token)."""
    args = load(ExportQuery, request.args.to_dict())
    project_id, form = args.pop("projectId"), args.pop("format")
    rows = service.export_cases(current_user, agent_id, project_id, **args)
    return http.download(*reports.export(rows, form), f"{agent_id}-{project_id}", form)


@bp.post("/agents/<agent_id>/test-set/cases/bulk")
@login_required
def bulk(agent_id: str):
    """Retire, restore, tag or untag the cases ticked on the cases page, all or none, then back
    to it."""
    form = request.form
    back = _safe_next(form.get("back"))
    if form.get("action") in ("tag", "untag"):
        return _bulk_tags(agent_id, form, back)
    retiring = form.get("action") == "retire"
    fields = {"projectId": form.get("projectId", ""), "caseIds": form.getlist("caseIds")}
    if retiring:
        fields["reason"] = form.get("reason", "").strip()
    try:
        if retiring:
            args = load(BulkRetireBody, fields)
            done = service.retire_cases(
                current_user, agent_id, args["projectId"], args["caseIds"], args["reason"]
            )
        else:
            args = load(BulkRestoreBody, fields)
            done = service.restore_cases(current_user, agent_id, args["projectId"], args["caseIds"])
    except DomainError as err:
        if err.status in (401, 403, 404) and "caseIds" not in (err.details or {}):
            raise
        flash(f"Nothing was changed: {_bulk_refusal(err)}")
        return redirect(back, 303)
    flash(
        f"{'Retired' if retiring else 'Restored'} {len(done)} case{'s' if len(done) != 1 else ''}."
    )
    return redirect(back, 303)


def _bulk_tags(agent_id: str, form: Any, back: str) -> ResponseReturnValue:
    """Add the tags typed (comma- or space-separated) to the ticked cases, or take them off."""
    named = [t for t in re.split(r"[,\s]+", form.get("tags", "").strip()) if t]
    way = "add" if form.get("action") == "tag" else "remove"
    fields = {
        "projectId": form.get("projectId", ""),
        "caseIds": form.getlist("caseIds"),
        way: named,
    }
    try:
        args = load(BulkTagsBody, fields)
        done = service.tag_cases(current_user, agent_id, args["projectId"], args["caseIds"],
                                 args.get("add", []), args.get("remove", []))  # fmt: skip
    except DomainError as err:
        if err.status in (401, 403, 404) and "caseIds" not in (err.details or {}):
            raise
        flash(f"Nothing was changed: {_bulk_refusal(err)}")
        return redirect(back, 303)
    verb = "Tagged" if way == "add" else "Untagged"
    flash(f"{verb} {len(done)} case{'s' if len(done) != 1 else ''}: {', '.join(named)}.")
    return redirect(back, 303)


def _bulk_refusal(err: DomainError) -> str:
    """Why a bulk change was refused, in the page's words."""
    details = err.details or {}
    if "caseIds" in details:
        return f"{err.message} ({', '.join(details['caseIds'])})"
    fields = details.get("fields", {})
    if "caseIds" in fields:
        return "tick at least one case (500 at most)."
    if "reason" in fields:
        return "say why the cases are retired."
    tagged = fields.get("add") or fields.get("remove")
    if tagged:  # a list's messages, or each bad tag's by its place
        said = tagged if isinstance(tagged, list) else [m for ms in tagged.values() for m in ms]
        return " ".join(said)
    return err.message


@bp.get("/agents/<agent_id>/test-set/cases/<case_id>")
@login_required
def case(agent_id: str, case_id: str):
    view = service.get_case(current_user, agent_id, case_id, history=True)
    record = service.record_of(case_id)
    return render_template("case.html", view=view, record=record, errors={}, reason="")


def retire_reason() -> str:
    """The retire form's reason, checked as the API checks it (a refusal names `reason`)."""
    return load(RetireBody, {"reason": request.form.get("reason", "").strip()})["reason"]


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/retire")
@login_required
def retire(agent_id: str, case_id: str):
    reason = request.form.get("reason", "")
    try:
        said = retire_reason()
    except DomainError as err:
        view = service.get_case(current_user, agent_id, case_id, history=True)
        errors = (err.details or {}).get("fields", {})
        record = service.record_of(case_id)
        return render_template(
            "case.html", view=view, record=record, errors=errors, reason=reason
        ), 400
    service.retire_case(current_user, agent_id, case_id, said)
    flash("The case is retired: no test run checks it until it is restored.")
    return redirect(url_for("pages.case", agent_id=agent_id, case_id=case_id), 303)


@bp.post("/agents/<agent_id>/test-set/cases/<case_id>/restore")
@login_required
def restore(agent_id: str, case_id: str):
    service.restore_case(current_user, agent_id, case_id)
    flash("The case is restored: test runs check it again.")
    return redirect(url_for("pages.case", agent_id=agent_id, case_id=case_id), 303)


@bp.route("/agents/<agent_id>/test-set/cases/<case_id>/revise", methods=["GET", "POST"])
@login_required
def revise(agent_id: str, case_id: str):
    """The revise form: the case's expectation as a hand case's body (JSON), prefilled, and a
    note; "Show the change" shows the difference, "Save the revision" saves it, naming the
    revision the form was read at (a case revised since is refused, never overwritten)."""
    view = service.revisable_case(current_user, agent_id, case_id)
    result = None
    if request.args.get("takeCallsFrom"):  # a test run's failing case: its candidate's calls
        result = service.get_result(current_user, agent_id, request.args["takeCallsFrom"], case_id)
    form = revision_form(agent_id, view, result and result.row.result, "calls" if result else "")
    if form.saved:
        flash("The case is revised: runs started from now on grade with it.")
        return redirect(url_for("pages.case", agent_id=agent_id, case_id=case_id), 303)
    return render_template("case_revise.html", view=view, form=form), form.status


@dataclass
class RevisionForm:
    """The revise form as shown again: the expectation's text, the note, the ETag it was read
    at, errors by field, the change (lines, once asked), the status to answer; `saved` once
    the revision is."""

    text: str
    note: str
    etag: str
    errors: dict[str, list[str]] = field(default_factory=dict)
    diff: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    saved: bool = False


def _expect_text(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=2, ensure_ascii=False)


def revision_form(
    agent_id: str,
    view: service.CaseView,
    result: dict[str, Any] | None = None,
    take: str = "",
    from_test_run: str | None = None,
) -> RevisionForm:
    """The revise form's request (the case page's, or a test run's triage): first shown, the
    case's expectation (or, with a candidate's `result` and `take`, its calls or answer taken
    into it); posted with `action` "take-calls" or "take-answer", the candidate's taken into
    what was typed, and the change shown; with "preview", the typed expectation checked and
    its change shown; with "save", the revision saved (naming `from_test_run`)."""
    now = service.body_of(view.case.expect)
    form, posted = request.form, request.method == "POST"
    action = form.get("action", "")
    if posted:  # what to take is the button's, once the form is posted
        take = action.removeprefix("take-") if action.startswith("take-") else ""
    take = take if take in case_form.TAKES and result is not None else ""
    typed = now
    if posted and take:  # into what was typed, if it is an object; else the case's expectation
        with suppress(DomainError):
            typed = _json_object(form.get("expect", ""))
    text = form.get("expect", "") if posted and not take else _expect_text(typed)
    if take:
        text = _expect_text(case_form.TAKES[take](typed, result))
    out = RevisionForm(text, form.get("note", ""), form.get("etag", service.etag(view.case)))
    if take:
        out.diff = views.line_diff(_expect_text(now), text)
    if not posted or take:
        return out
    try:
        body = load(ReviseBody, {**_json_object(text), "note": out.note.strip()})
        body.pop("fromTestRun", None)  # the page says which run, not the typed expectation
        asked = {name: value for name, value in body.items() if name != "note"}
        out.diff = views.line_diff(_expect_text(now), _expect_text(asked))
        if action == "save":
            service.revise_case(current_user, agent_id, view.case.id, body, out.etag, from_test_run)
            out.saved = True
    except DomainError as err:
        out.errors = (err.details or {}).get("fields") or {"_body": [err.message]}
        out.status = err.status
    return out


def _json_object(text: str) -> dict[str, Any]:
    """The form's expectation: a JSON object, or a refusal naming the field."""
    try:
        value = json.loads(text)
    except ValueError:
        raise bad_input({"expect": ["Not valid JSON."]}) from None
    if not isinstance(value, dict):
        raise bad_input({"expect": ["An object, as a hand case's body is."]})
    return value


# ---------------------------------------------------------------- experts: adding a case

# The buttons that post the add-case form back to show it again rather than add the case.
FORM_ACTIONS = ("more", "find", "show", "take")


@bp.route("/agents/<agent_id>/test-set/cases/new", methods=["GET", "POST"])
@login_required
def new_case(agent_id: str):
    """The add-case form: a run picked, shown, and its calls and lists taken into the case with
    a button each (htmx re-renders the form in place), or anything typed by hand."""
    project_id = load(TestSetQuery, request.args.to_dict())["projectId"]
    search = request.values.get("search", "").replace("\x00", "").strip()
    form = request.form if request.method == "POST" else request.args
    shown = case_form.shown_fields(form)
    runs, run = service.new_case_runs(
        current_user, agent_id, project_id, search or None, shown["runId"] or None
    )
    offers = case_form.run_offers(run.output, run.calls) if run else None
    if offers and form.get("take"):
        shown = case_form.take(shown, offers, form["take"])
    body, errors = case_form.case_body(shown)
    status = 200
    if request.method == "POST" and not any(form.get(name) for name in FORM_ACTIONS):
        try:
            if errors:
                raise bad_input(errors)
            created, duplicates = service.add_hand_case(
                current_user, agent_id, load(AddCaseBody, body)
            )
            flash(
                f"Case added. Its run's {', '.join(duplicates)} already expected the same."
                if duplicates
                else "Case added."
            )
            return redirect(url_for("pages.case", agent_id=agent_id, case_id=created.id), 303)
        except DomainError as err:  # shown next to the fields it names, or above the form
            fields = (err.details or {}).get("fields")
            errors = case_form.row_errors(fields, shown) if fields else {"_body": [err.message]}
            status = err.status
    else:
        errors = {}  # a form being filled in is not judged yet
    tools = [row["tool"] for row in shown["shouldCall"] if row["tool"]]
    alike = service.look_alikes(
        current_user, agent_id, project_id, run and run.id, tools, run and run.input
    )
    extra = form.get("more")
    rows = {
        "shouldCall": max(len(shown["shouldCall"]) + (extra == "shouldCall"), CASE_ROWS),
        "items": max(len(shown["items"]) + (extra == "items"), ITEM_ROWS),
    }
    return render_template(
        "new_case.html",
        agent_id=agent_id,
        project_id=project_id,
        runs=runs.items,
        run=run,
        offers=offers,
        search=search,
        shown=shown,
        errors=errors,
        rows=rows,
        look_alikes=[(row.id, views.summary(json.loads(row.expect))) for row in alike],
    ), status


# ---------------------------------------------------------------- experts: the runs inbox

INBOX_FIELDS = ("q", "status", "version", "tool", "hasCase", "after", "before")


@bp.get("/agents/<agent_id>/runs")
@login_required
def inbox(agent_id: str):
    """An agent's runs in a project, newest first, filtered, to go through and make cases
    from; `j`/`k` move between them and `a` adds a case (static/inbox.js), all of it plain
    links and a GET form underneath."""
    args, project_id, swap, more = _list_query(RunsQuery, "after", "before")
    try:
        view = service.inbox_page(current_user, agent_id, project_id, with_choices=not more, **args)
    except BadInput as err:
        return _restart_list(err, "That page of runs is out of date; here are the newest.")
    context = {
        "agent_id": agent_id,
        "project_id": project_id,
        "view": view,
        "filters": {name: request.args.get(name, "") for name in INBOX_FIELDS},
        "filtered": any(request.args.get(name) for name in INBOX_FIELDS),
        "more_url": _more_url(view.page),
    }
    template = "_inbox_rows.html" if more else "_inbox_list.html" if swap else "inbox.html"
    return render_template(template, **context), {"Vary": "HX-Request"}


@bp.get("/agents/<agent_id>/runs/<run_id>")
@login_required
def agent_run(agent_id: str, run_id: str):
    """One run: what it was given, each call it made with its arguments, what it answered, and
    the cases made from it; "Add a case from this run" opens the add-case form with it picked."""
    view = service.run_with_cases(current_user, agent_id, run_id)
    return render_template("agent_run.html", view=view, run=view.run)


# ---------------------------------------------------------------- tokens


@bp.route("/tokens", methods=["GET", "POST"])
@login_required
def tokens():
    """The caller's tokens a page at a time; a POST makes one and shows the first page, where
    the new token is (the query string of a POST is not read)."""
    created = None
    errors: dict[str, list[str]] = {}
    status = 200
    if request.method == "GET":
        paging = load(Paging, request.args.to_dict())
        try:
            page = service.list_tokens(current_user, **paging)
        except BadInput as err:
            return _restart_list(err, "That page of tokens is out of date; here are the newest.")
    else:
        try:
            args = load(NewTokenBody, {"name": request.form.get("name", "").strip()})
            token, secret = service.create_token(current_user, args["name"], None)
            created = {"name": token.name, "secret": secret}
            status = 201
        except DomainError as err:
            errors = (err.details or {}).get("fields", {})
            status = 400
        page = service.list_tokens(current_user)
    response = render_template(
        "tokens.html",
        page=page,
        more_url=_more_url(page),
        created=created,
        errors=errors,
        now=service.clock(),
    )
    return response, status, {"Cache-Control": "no-store"}


@bp.post("/tokens/<token_id>/revoke")
@login_required
def revoke_token(token_id: str):
    service.revoke_token(current_user, token_id)
    flash("The token is revoked; it no longer works.")
    return redirect(url_for("pages.tokens"), 303)


@bp.get("/docs")
def docs():
    """The API reference, rendered from /v1/openapi.json by vendored Swagger UI."""
    return render_template("docs.html")
