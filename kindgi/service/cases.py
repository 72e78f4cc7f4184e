"""The test set's cases as they stand: listing them, one case with its run, retiring, restoring.

Retiring takes a case out of grading and restoring puts it back; each moves one count between the
active and the retired cell in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, Text, bindparam, cast, func, literal_column, select, table, text

from ..database import db
from ..errors import CaseActive, CaseNotFound, CaseRetired
from ..models import Case, CaseTag, Snapshot, VersionMember
from ..schemas.cases import CASE_FIELDS
from . import search
from .access import AgentRef, Grants, find_agent, grants, readable
from .common import clock, dialect, sql
from .counts import Counts, page_counts, tally_retirements
from .identity import Principal
from .paging import Page, keyset_page, newest_first
from .run_pages import HistoryRow, case_history
from .triage import graded_by
from .versions import as_frozen, find_version, pinned_expect

# What a list shows of a case, in the order `schemas.cases.case_json` reads it (the position first);
# its expectation as the JSON text stored, written out as it is (parsing it and writing it again
# was a tenth of a page of the list).
CASE_COLUMNS = tuple(
    cast(Case.expect, Text).label("expect") if name == "expect" else Case.__table__.c[name]
    for name in CASE_FIELDS
)

# Which statement a list's filters need: the dialect, retired cases too, one kind only, the
# other filters given, and how a search is answered (`_cases_query`'s arguments)
Shape = tuple[str, bool, bool, frozenset[str], str | None]


@cache
def _cases_query(
    dialect_name: str,
    retired_too: bool,
    one_kind: bool,
    given: frozenset[str],
    how: str | None,
    after: bool,
) -> Select[Any]:
    """The cases list's statement for one shape of filters (`given` names the other filters
    present), built once."""
    if "tag" in given and how is None:
        # one tag: its rows in `case_tags`, walked newest first, each joined to its case
        query = select(*CASE_COLUMNS).join(CaseTag, CaseTag.case_id == Case.id)
        query = _filtered(query, dialect_name, retired_too, one_kind, given - {"tag"}, how)
        query = query.where(
            CaseTag.agent_pk == bindparam("agent_pk"),
            CaseTag.project_id == bindparam("project_id"),
            CaseTag.tag == bindparam("tag"),
        )
        return newest_first(query, CaseTag.added_at, CaseTag.case_id, after)
    query = _filtered(select(*CASE_COLUMNS), dialect_name, retired_too, one_kind, given, how)
    if how == search.WALK and dialect_name == "sqlite":
        query = query.add_cte(search.window(after))
    if how == search.DRIVE:
        # the same order, in a form no index serves: the planner must lead with the search's
        # few matches and sort them, not walk the whole list for them
        return newest_first(query, func.coalesce(Case.added_at, Case.added_at), Case.id, after)
    return newest_first(query, Case.added_at, Case.id, after)


@cache
def _page_query(shape: Shape, after: bool) -> Select[Any]:
    """The cases page's rows: the list's page, each row with what its case's run was asked
    (its snapshot's input, the JSON text stored; None without one) as a last column. Read for
    the page's rows alone, after the list's own statement has picked them, in the list's
    order: one statement, where a second for the inputs cost the page a tenth of its time."""
    listed = _cases_query(*shape, after).subquery("listed")
    asked = (
        select(cast(Snapshot.input, Text))
        .where(Snapshot.run_id == listed.c.run_id)
        .scalar_subquery()
        .label("asked")
    )
    return select(listed, asked).order_by(listed.c.added_at.desc(), listed.c.id.desc())


@cache
def _count_query(
    dialect_name: str, retired_too: bool, one_kind: bool, given: frozenset[str], how: str | None
) -> Select[Any]:
    """How many cases match, counted up to `limit`: a broad search stays fast.

    On SQLite a search's count leads with FTS5's matches in the index's order, each case looked
    up by its rowid, until `limit`: walking the list instead checked each case in FTS5 at some
    20 µs, and gathering the matches first cost a word in half the cases 150 ms."""
    searched = {"q", "tool", "part"}
    if dialect_name == "sqlite" and given & searched:
        case = _filtered(
            select(Case.id), dialect_name, retired_too, one_kind, given - searched, None
        ).where(text("cases.rowid = case_search.rowid"))
        matching = (
            select(literal_column("1"))
            .select_from(table("case_search"))
            .where(text("case_search MATCH :match"), case.exists())
        )
    else:
        # counted as the planner likes: a walking search's form would walk to the bound
        matching = _filtered(select(Case.id), dialect_name, retired_too, one_kind, given, None)
    return select(func.count()).select_from(matching.limit(bindparam("limit")).subquery())


def _filtered(
    query: Select[Any],
    dialect_name: str,
    retired_too: bool,
    one_kind: bool,
    given: frozenset[str],
    how: str | None,
) -> Select[Any]:
    """`query` narrowed to the list's cases and its filters."""
    if how == search.DRIVE and dialect_name == "sqlite":
        # unary + keeps SQLite from the list's index, which it would otherwise still walk
        # whole: it leads with the search's rowids
        query = query.where(text("+cases.agent_pk = :agent_pk AND +cases.project_id = :project_id"))
    else:
        query = query.where(
            Case.agent_pk == bindparam("agent_pk"), Case.project_id == bindparam("project_id")
        )
    query = query.where(Case.is_case)
    if not retired_too:
        query = query.where(Case.retired_at.is_(None))
    if one_kind:
        query = query.where(Case.kind == bindparam("kind"))
    if given & {"q", "tool", "part"}:
        query = query.where(search.condition(dialect_name, how))
    if "expert" in given:
        query = query.where(Case.expert == bindparam("expert"))
    if "added_by" in given:
        query = query.where(Case.added_by_id == bindparam("added_by"))
    if "run_id" in given:
        query = query.where(Case.run_id == bindparam("run_id"))
    if "added_after" in given:
        query = query.where(Case.added_at >= bindparam("added_after", type_=Case.added_at.type))
    if "added_before" in given:
        query = query.where(Case.added_at < bindparam("added_before", type_=Case.added_at.type))
    if given & {"tag", "tags"}:  # any of them
        tagged = select(CaseTag.case_id).where(CaseTag.case_id == Case.id)
        if "tag" in given:
            tagged = tagged.where(CaseTag.tag == bindparam("tag"))
        else:
            tagged = tagged.where(CaseTag.tag.in_(bindparam("tags", expanding=True)))
        query = query.where(tagged.exists())
    return query


@dataclass
class _Filters:
    """A list's filters as the statements bind them, and the shape that picks the statement."""

    params: dict[str, Any]
    binding: dict[str, Any]
    shape: Shape


def _filters(
    caller: Principal,
    agent: AgentRef,
    project_id: str,
    *,
    include: str | None = None,
    kind: str | None = None,
    **filters: Any,
) -> _Filters:
    kinds = sorted(set(kind.split(","))) if kind else ["correction", "hand"]
    given = {name: value for name, value in filters.items() if value is not None}
    if "tag" in given and len(given["tag"]) > 1:  # several tags: any of them
        given["tags"] = given.pop("tag")
    elif "tag" in given:
        given["tag"] = given["tag"][0]
    binding = {
        "list": "cases",
        "agent": agent.pk,
        "project": project_id,
        "include": include or "",
        "kind": kinds,
        "caller": caller.scope,
        # the new filters only when given: a cursor of the plain list keeps its binding
        **{name: _bound(value) for name, value in given.items()},
    }
    params = {"agent_pk": agent.pk, "project_id": project_id, "kind": kinds[0], **given}
    name = dialect()
    how = None
    if given.keys() & {"q", "tool", "part"}:
        params.update(
            search.parameters(name, given.get("q"), _listed(given, "tool"), _listed(given, "part"))
        )
        how = search.strategy(name, params)
    return _Filters(
        params, binding, (name, include == "retired", len(kinds) == 1, frozenset(given), how)
    )


def _cases_of(
    caller: Principal,
    agent: AgentRef,
    project_id: str,
    *,
    limit: int = 25,
    cursor: str | None = None,
    asked: bool = False,
    **filters: Any,
) -> Page:
    """A page of the list; with `asked`, each row with its run's input last (`_page_query`)."""
    f = _filters(caller, agent, project_id, **filters)

    def statement(after: bool) -> Select[Any]:
        return _page_query(f.shape, after) if asked else _cases_query(*f.shape, after)

    return keyset_page(statement, f.params, limit, cursor, f.binding)


def _listed(filters: dict[str, Any], name: str) -> list[str]:
    value = filters.get(name)
    return [] if value is None else value if isinstance(value, list) else [value]


def _bound(value: Any) -> Any:
    """A filter's value as a cursor's binding keeps it (JSON)."""
    return value.isoformat() if isinstance(value, datetime) else value


def list_cases(caller: Principal, agent_id: str, project_id: str, **filters: Any) -> Page:
    """One page of the test set's cases, newest added first."""
    agent, _ = readable(caller, agent_id, project_id)
    return _cases_of(caller, agent, project_id, **filters)


ALIKE, ALIKE_EACH = 10, 5  # look-alikes shown at most, and read at most a query
ASKED_WORDS = 3  # the words of an input that make another input look alike


def look_alikes(
    caller: Principal,
    agent_id: str,
    project_id: str,
    run_id: str | None,
    tools: list[str],
    asked: Any = None,
) -> list[Any]:
    """Active cases that look like one being added (rows of the list), most alike first, each
    once, ALIKE at most: the add-case form shows them so that an expert rarely adds a
    duplicate. Its run's own; then those that expect the tools it expects (the first three)
    and whose words have the most telling words of what its run was asked (`asked`:
    `search.telling_words`); then a few of each tool's newest.

    Each is a keyset page of the list (the newest ALIKE_EACH), the input's words a search as
    the list's `q` is: a few index steps whatever the set's size."""
    agent, _ = readable(caller, agent_id, project_id)
    found: dict[str, Any] = {}

    def add(limit: int = ALIKE_EACH, **filters: Any) -> None:
        for row in _cases_of(caller, agent, project_id, limit=limit, **filters).items:
            found.setdefault(row.id, row)

    expected = sorted(set(tools))[:3]
    if run_id:
        add(run_id=run_id, limit=ALIKE)
    said = search.telling_words(asked, ASKED_WORDS)
    if said:
        add(q=" ".join(said), tool=expected or None)
    for tool in expected:
        add(tool=tool)
    return list(found.values())[:ALIKE]


MAX_COUNTED = 10_000  # past this many matches the page says "over 10,000"
SEARCH_FILTERS = (
    "q",
    "tool",
    "part",
    "expert",
    "added_by",
    "run_id",
    "added_after",
    "added_before",
    "tag",
)


@dataclass
class CasesView:
    """What the cases page shows: a page of cases, each row with what its run was asked last
    (`_page_query`), the counts, whether the caller may publish (add, retire, restore, tag)
    there; with the counts, the tools to filter by and, when filtered, how many cases match
    (up to `MAX_COUNTED + 1`)."""

    page: Page
    counts: Counts | None
    may_publish: bool
    tools: list[str] = field(default_factory=list)
    matching: int | None = None


def cases_page(
    caller: Principal, agent_id: str, project_id: str, *, with_counts: bool, **filters: Any
) -> CasesView:
    """The cases page's content, the agent, project and grants looked up once (a "Load more"
    needs no counts)."""
    agent, may = readable(caller, agent_id, project_id)
    page = _cases_of(caller, agent, project_id, asked=True, **filters)
    if not with_counts:
        return CasesView(page, None, may.may_publish)
    counts, tools = page_counts(agent.pk, agent.id, project_id)
    view = CasesView(page, counts, may.may_publish, tools)
    if any(filters.get(name) is not None for name in SEARCH_FILTERS):
        view.matching = _count(caller, agent, project_id, filters)
    return view


def _count(caller: Principal, agent: AgentRef, project_id: str, args: dict[str, Any]) -> int:
    """How many cases match the filters, up to MAX_COUNTED + 1 (the page's `limit` and
    `cursor` play no part)."""
    filters = {name: value for name, value in args.items() if name not in ("limit", "cursor")}
    f = _filters(caller, agent, project_id, **filters)
    return (
        sql().execute(_count_query(*f.shape), {**f.params, "limit": MAX_COUNTED + 1}).scalar_one()
    )


# ---------------------------------------------------------------- one case


@dataclass
class CaseView:
    """A case with what belongs to it when shown alone, and what the caller may do with it."""

    case: Case
    snapshot: Snapshot | None
    agent_id: str
    grants: Grants
    history: list[HistoryRow] = field(default_factory=list)  # its outcome in the newest runs

    @property
    def may_publish(self) -> bool:
        return self.grants.may_publish


def _case(caller: Principal, agent: AgentRef, case_id: str, *, lock: bool = False) -> Case:
    stmt = select(Case).where(
        Case.id == case_id,
        Case.agent_pk == agent.pk,
        Case.tenant_id == caller.tenant_id,
        Case.is_case,
    )
    case = db.session.scalar(stmt.with_for_update() if lock else stmt)
    if case is None:
        raise CaseNotFound()
    return case


def readable_case(caller: Principal, agent_id: str, case_id: str) -> tuple[Case, Grants]:
    """The case, once the caller may read in its project, with the caller's grants there."""
    agent = find_agent(caller, agent_id)
    case = _case(caller, agent, case_id)
    may = grants(caller, agent, case.project_id)
    may.require("read", agent, case.project_id)
    return case, may


def get_case(caller: Principal, agent_id: str, case_id: str, *, history: bool = False) -> CaseView:
    """A case with its run's snapshot; with `history`, its outcome in the newest test runs
    too (the case page's, which the API's one case does not pay for)."""
    case, may = readable_case(caller, agent_id, case_id)
    snapshot = db.session.get(Snapshot, case.run_id)
    return CaseView(case, snapshot, agent_id, may, case_history(case.id) if history else [])


def revisable_case(caller: Principal, agent_id: str, case_id: str) -> CaseView:
    """A case for the revise form: shown only to a caller who may publish in its project, as
    the add-case form is."""
    agent = find_agent(caller, agent_id)
    case = _case(caller, agent, case_id)
    may = grants(caller, agent, case.project_id)
    may.require("publish", agent, case.project_id)
    return CaseView(case, db.session.get(Snapshot, case.run_id), agent_id, may)


def publishable_case(caller: Principal, agent_id: str, case_id: str) -> Case:
    """The case, locked for a change, once the caller may publish in its project."""
    agent = find_agent(caller, agent_id)
    case = _case(caller, agent, case_id, lock=True)
    grants(caller, agent, case.project_id).require("publish", agent, case.project_id)
    return case


def retire_case(
    caller: Principal,
    agent_id: str,
    case_id: str,
    reason: str,
    from_test_run: str | None = None,
) -> Case:
    """Take a case out of grading; it stays listed with `include=retired`. `from_test_run`
    names the run it was retired from (one that graded it: `triage.graded_by`)."""
    case = publishable_case(caller, agent_id, case_id)
    if case.retired_at is not None:
        raise CaseRetired()
    if from_test_run is not None:
        graded_by(case, from_test_run)
    _retire([case], caller, reason, from_test_run)
    return case


def restore_case(caller: Principal, agent_id: str, case_id: str) -> Case:
    """Put a retired case back into grading."""
    case = publishable_case(caller, agent_id, case_id)
    if case.retired_at is None:
        raise CaseActive()
    _restore([case])
    return case


def _retire(
    cases: list[Case], caller: Principal, reason: str, from_test_run: str | None = None
) -> None:
    by, now, said = caller.actor, clock(), search.reason_words(reason)
    for case in cases:
        case.retired_from_test_run = from_test_run
        case.retired_reason, case.retired_by_kind, case.retired_by_id = reason, by["kind"], by["id"]
        case.retired_words = said  # searched by, with the case's own words
        case.retired_at = case.updated_at = now
    tally_retirements(cases, retiring=True)
    db.session.flush()


def _restore(cases: list[Case]) -> None:
    now = clock()
    for case in cases:
        case.retired_reason = case.retired_by_kind = case.retired_by_id = case.retired_at = None
        case.retired_words = case.retired_from_test_run = None
        case.updated_at = now
    tally_retirements(cases, retiring=False)
    db.session.flush()


def publishable_cases(
    caller: Principal,
    agent_id: str,
    project_id: str,
    case_ids: list[str],
    *,
    retired: bool | None = None,
) -> list[Case]:
    """The named cases of one test set, locked for a change (in id order, so two changes lock
    alike), once the caller may publish there: all of them in the state `retired` says (if it
    says one), or a refusal naming those that are not (404 for cases the set lacks, then 409)."""
    agent, may = readable(caller, agent_id, project_id)
    cases = db.session.scalars(
        select(Case)
        .where(
            Case.id.in_(case_ids),
            Case.agent_pk == agent.pk,
            Case.project_id == project_id,
            Case.is_case,
        )
        .order_by(Case.id)
        .with_for_update()
    ).all()
    missing = sorted(set(case_ids) - {case.id for case in cases})
    if missing:
        raise CaseNotFound(details={"caseIds": missing})
    may.require("publish", agent, project_id)
    if retired is None:
        return list(cases)
    wrong = [case.id for case in cases if (case.retired_at is not None) != retired]
    if wrong:
        raise (CaseActive if retired else CaseRetired)(details={"caseIds": wrong})
    return list(cases)


def retire_cases(
    caller: Principal, agent_id: str, project_id: str, case_ids: list[str], reason: str
) -> list[Case]:
    """Retire several cases of one test set at once: all of them, or none."""
    cases = publishable_cases(caller, agent_id, project_id, case_ids, retired=False)
    _retire(cases, caller, reason)
    return cases


def restore_cases(
    caller: Principal, agent_id: str, project_id: str, case_ids: list[str]
) -> list[Case]:
    """Restore several retired cases of one test set at once: all of them, or none."""
    cases = publishable_cases(caller, agent_id, project_id, case_ids, retired=True)
    _restore(cases)
    return cases


# ---------------------------------------------------------------- the whole set, written out

EXPORT_CHUNK = 250  # cases read at a time (a run may hold up to a MiB): streamed, never held


@cache
def _export_query(
    dialect_name: str, retired_too: bool, of_version: bool, after: bool
) -> Select[Any]:
    """A chunk of the export: the list's columns, then the snapshot's input, output and calls
    as the JSON text stored (written out as they are, never parsed)."""
    raw = [cast(column, Text) for column in (Snapshot.input, Snapshot.output, Snapshot.calls)]
    if of_version:  # a version's cases by case id (its members' order), as it froze them
        pinned = {"expect": cast(pinned_expect(), Text), "revision": VersionMember.revision}
        columns = [pinned.get(c.name, c) for c in CASE_COLUMNS]
        query = as_frozen(
            select(*columns, *raw).join(Snapshot, Snapshot.run_id == Case.run_id),
            bindparam("version_pk"),
            Case.id,
        )
        query = query.where(VersionMember.case_id > bindparam("after_id"))
        return query.order_by(VersionMember.case_id).limit(bindparam("limit"))
    query = select(*CASE_COLUMNS, *raw).join(Snapshot, Snapshot.run_id == Case.run_id)
    query = _filtered(query, dialect_name, retired_too, False, frozenset(), None)
    return newest_first(query, Case.added_at, Case.id, after)


def export_cases(
    caller: Principal,
    agent_id: str,
    project_id: str,
    *,
    include: str | None = None,
    version: str | None = None,
) -> Iterator[Any]:
    """Every case of the test set with its snapshot, read a chunk at a time as it is written
    out: newest first like the list (`include=retired` adds the retired), or a version's
    cases by id (retired or not as they stand now, with the revision it froze)."""
    agent, _ = readable(caller, agent_id, project_id)
    params: dict[str, Any] = {"agent_pk": agent.pk, "project_id": project_id}
    params["limit"], params["after_id"] = EXPORT_CHUNK, ""
    if version is not None:
        params["version_pk"] = find_version(agent.pk, project_id, version).pk

    def chunks() -> Iterator[Any]:
        after = False
        while True:
            query = _export_query(dialect(), include == "retired", version is not None, after)
            rows = sql().execute(query, params).all()
            yield from rows
            if len(rows) < EXPORT_CHUNK:
                return
            after = True
            params["after_at"], params["after_id"] = rows[-1][0], rows[-1][1]

    return chunks()
