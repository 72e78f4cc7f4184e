"""Each case's record over its test set's last 50 done full runs (docs/design.md §9.10): how many
runs had it, its outcomes, the candidates that failed it, whether it is flaky, how well it
separates candidates, when it last failed, and how many of its newest runs in a row it did not
pass.

A record keeps what it is counted from: each candidate's outcomes (`by_candidate`) and the
moments of its pass/fail against the runs' pass rates (`moments`, whole numbers, the rates in
units of 2**-32, so a sum is the same in any order). When a full run is done, the records of its
cases and of the run it pushes out of the window are brought up to date from their own rows and
those two runs' outcomes, in the database (`_RunEnd`): work in proportion to the runs' cases,
not to the window, and set-based statements, not Python a case. Only when the run is not the
window's newest (another ended in the same millisecond) are its cases' records counted again
from the window's rows. Reading one is one row. Quick runs are left out, as they are of the
prior pass rates (`service.quick_runs`). `error` counts as not passing; `pending` and
`ungraded` count as nothing.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, Select, delete, select, text

from ..database import db
from ..models import CaseRecord, RunCase, TestRun
from . import cases as case_service  # a module: cases reaches this one through test_runs
from .common import analyze, bulk, insert_rows, sql, sqlite_time, take_turns
from .identity import Principal

WINDOW = 50
COUNTED = ("pass", "fail", "error")
SCALE = 2**32  # a run's pass rate in the moments: a whole number of 2**-32


def _window(conn: Connection, agent_pk: int, project_id: str, n: int) -> list[Any]:
    """The set's newest `n` done full runs: (pk, candidate, finishedAt, tallies), newest first."""
    return conn.execute(
        select(TestRun.pk, TestRun.candidate, TestRun.finished_at, TestRun.tallies)
        .where(
            TestRun.agent_pk == agent_pk,
            TestRun.project_id == project_id,
            TestRun.status == "done",
            TestRun.sample.is_(None),
        )
        .order_by(TestRun.finished_at.desc(), TestRun.pk.desc())
        .limit(n)
    ).all()


def _pass_rate(tallies: dict[str, Any]) -> int | None:
    """A run's pass rate in units of 1/SCALE (None when it graded nothing)."""
    cases = tallies["cases"]
    graded = cases["pass"] + cases["fail"]
    return round(cases["pass"] * SCALE / graded) if graded else None


def separation(moments: list[int]) -> float | None:
    """The correlation of passing the case (1 or 0) with the pass rate of the run, from the
    moments [n, Σy, Σx, Σxy, Σx²]: near 1 when the better candidates pass it and the worse fail
    it; None when either never varies."""
    n, sy, sx, sxy, sxx = moments
    spread = _spread(n, sy, sx, sxx)
    if spread is None:
        return None
    return max(-1.0, min(1.0, (n * sxy - sx * sy) / spread))


def _spread(n: int, sy: int, sx: int, sxx: int) -> float | None:
    """The separation's denominator, √(n²·var y · n²·var x) from the exact integers (None when
    either variance is 0); Σx² outgrows 64 bits, so only Python works it out (`_shifted`)."""
    var_y, var_x = n * sy - sy * sy, n * sxx - sx * sx  # n² times the variances, exact
    if var_y <= 0 or var_x <= 0:
        return None
    return math.sqrt(var_y * var_x)


def computed(
    conn: Connection, agent_pk: int, project_id: str, cases: Select[Any] | None = None
) -> list[dict[str, Any]]:
    """The records of `cases` (a query of case ids; all the set's when None) as the window's
    runs make them, as rows of `case_records`."""
    window = _window(conn, agent_pk, project_id, WINDOW)
    order = {row.pk: i for i, row in enumerate(window)}  # 0: the newest
    runs = {row.pk: row for row in window}
    rates = {row.pk: _pass_rate(row.tallies) for row in window}
    query = select(RunCase.case_id, RunCase.run_pk, RunCase.outcome).where(
        RunCase.run_pk.in_(list(runs)), RunCase.outcome.in_(COUNTED)
    )
    if cases is not None:
        query = query.where(RunCase.case_id.in_(cases))
    seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for case_id, run_pk, outcome in conn.execute(query):
        seen[case_id].append((order[run_pk], outcome))
    return [
        _record(case_id, agent_pk, project_id, sorted(had), window, rates)
        for case_id, had in seen.items()
    ]


def _rewrite(
    conn: Connection,
    agent_pk: int,
    project_id: str,
    cases: Select[Any] | None = None,
    columns: list[str] | None = None,
) -> None:
    """Write the records of `cases` (a query of case ids; all the set's when None) afresh, with
    only `columns` when given (a migration's table has those)."""
    rows = computed(conn, agent_pk, project_id, cases)
    if columns is not None:
        rows = [{c: row[c] for c in columns} for row in rows]
    gone = delete(CaseRecord).where(
        CaseRecord.agent_pk == agent_pk, CaseRecord.project_id == project_id
    )
    conn.execute(gone if cases is None else gone.where(CaseRecord.case_id.in_(cases)))
    if rows:
        conn.execute(CaseRecord.__table__.insert(), rows)


def _record(
    case_id: str,
    agent_pk: int,
    project_id: str,
    had: list[tuple[int, str]],
    window: list[Any],
    rates: dict[int, int | None],
) -> dict[str, Any]:
    """One case's record from its outcomes in the window, oldest first (each one counted in as
    `_count_in` counts a run that ends)."""
    row = _empty(case_id, agent_pk, project_id)
    for index, outcome in reversed(had):
        run = window[index]
        _count_in(row, outcome, run.candidate, rates[run.pk], run.finished_at)
    return _settled(row)


def _empty(case_id: str, agent_pk: int, project_id: str) -> dict[str, Any]:
    """The record of a case no run of the window had, as the counting starts from."""
    return {
        "case_id": case_id,
        "agent_pk": agent_pk,
        "project_id": project_id,
        "runs": 0,
        "passed": 0,
        "failed": 0,
        "errored": 0,
        "by_candidate": {},
        "moments": [0, 0, 0, 0, 0],
        "last_failed": None,
        "streak": 0,
    }


_COLUMN = {"pass": "passed", "fail": "failed", "error": "errored"}


def _moved(moments: list[int], outcome: str, rate: int | None, by: int) -> None:
    """Add (`by` 1) or take away (-1) one run's outcome from the moments [n, Σy, Σx, Σxy, Σx²]
    (a run that graded nothing has no rate, and no part in them)."""
    if rate is not None:
        y = int(outcome == "pass")
        for i, term in enumerate((1, y, rate, y * rate, rate * rate)):
            moments[i] += by * term


def _count_in(
    row: dict[str, Any], outcome: str, candidate: str, rate: int | None, finished_at: Any
) -> None:
    """A run newer than every run the record counts had the case."""
    row["runs"] += 1
    row[_COLUMN[outcome]] += 1
    row["by_candidate"].setdefault(candidate, [0, 0, 0])[COUNTED.index(outcome)] += 1
    _moved(row["moments"], outcome, rate, +1)
    if outcome == "pass":
        row["streak"] = 0
    else:
        row["streak"] += 1
        row["last_failed"] = finished_at


def _settled(row: dict[str, Any]) -> dict[str, Any]:
    """A record with what is read from its counts: who failed it, whether it is flaky, and how
    well it separates candidates."""
    by_candidate = row["by_candidate"]
    row["failed_by"] = sorted(c for c, (_, failed, errored) in by_candidate.items()
                              if failed or errored)  # fmt: skip
    row["flaky"] = any(sum(n > 0 for n in counts) > 1 for counts in by_candidate.values())
    row["separation"] = separation(row["moments"])
    return row


def run_done(run: TestRun) -> None:
    """A full run is done: bring its cases' records up to date, and those of the run it pushed
    out of the window, inside the database (`_RunEnd`): a few set-based statements, whatever
    the number of cases. Two runs of a set that end at once take turns, the second counting the
    first's records: else each adds its outcomes to the records as they were, and one run's are
    lost."""
    conn = sql()
    take_turns(f"records:{run.agent_pk}:{run.project_id}")
    bulk()  # a full run of a large set rewrites as many records
    window = _window(conn, run.agent_pk, run.project_id, WINDOW + 1)
    pushed = window[WINDOW:]
    if not window or window[0].pk != run.pk:  # not the newest: counted again from the window
        ran = [run.pk, *(row.pk for row in pushed)]
        cases = select(RunCase.case_id).where(RunCase.run_pk.in_(ran)).distinct()
        _rewrite(conn, run.agent_pk, run.project_id, cases)
        return
    _RunEnd(conn, window[0], pushed[0] if pushed else None).apply(run.agent_pk, run.project_id)


def _one(condition: str) -> str:
    """SQL: 1 when `condition` holds, else 0 (PostgreSQL adds no booleans)."""
    return f"CASE WHEN {condition} THEN 1 ELSE 0 END"


def _plain(candidate: str) -> bool:
    """Whether JSON writes the candidate's name as it is, with no quote in it: only such a key
    do SQLite's JSON functions find by path (they compare keys as written, escapes and all)."""
    return json.dumps(candidate)[1:-1] == candidate and '"' not in candidate


class _RunEnd:
    """A run's end as SQL, for the window's newest run (`now`) and the run it pushed out
    (`gone`, if any). `record_ends` gets each case either had: its outcome in each ('' for
    none), its old record's n, Σy, Σx and Σx², and the old counts of the one or two candidates
    that change. Python works out the moments' change once for each distinct (outcomes, n, Σy,
    Σx, Σx²) into `record_shifts`, with the separation's denominator (Σx² outgrows 64 bits, and
    is kept as text). Then an UPDATE … FROM counts every kept record on from its old row (an
    INSERT … SELECT the new ones from nothing), the pushed run's outcome taken out (it was the
    oldest: in the streak only if every run was, and with no failure left there is no
    `lastFailed`) and the new run's added as `_count_in` adds it, and a delete drops the
    records no run of the window has now."""

    def __init__(self, conn: Connection, now: Any, gone: Any | None) -> None:
        self.conn, self.now, self.gone = conn, now, gone
        self.pg = conn.dialect.name == "postgresql"
        self.rates = (_pass_rate(now.tallies), _pass_rate(gone.tallies) if gone else None)
        self.candidates = list(dict.fromkeys([now.candidate, *([gone.candidate] if gone else [])]))
        self.params: dict[str, Any] = {"now_pk": now.pk, "gone_pk": gone.pk if gone else -1}
        for k, candidate in enumerate(self.candidates):
            self.params[f"c{k}"] = candidate
            self.params.update({f"c{k}_{i}": f'$."{candidate}"[{i}]' for i in range(3)})
        # on SQLite, a name JSON escapes is found and replaced through json_each
        self.paths = all(_plain(c) for c in self.candidates)

    def apply(self, agent_pk: int, project_id: str) -> None:
        """Bring the records of the two runs' cases up to date."""
        run = self.conn.exec_driver_sql
        olds = ", ".join(f"o{k}_{i} BIGINT" for k in range(2) for i in range(3))
        run("CREATE TEMP TABLE record_ends (case_id VARCHAR(64), kept BOOLEAN, now VARCHAR(5), "
            f"gone VARCHAR(5), n BIGINT, sy BIGINT, sx BIGINT, sxx TEXT, {olds})")  # fmt: skip
        self.conn.execute(text(self._ends()), self.params)
        if self.pg:
            run("ANALYZE record_ends")  # else the planner takes it for empty
        keys = run("SELECT DISTINCT now, gone, n, sy, sx, sxx FROM record_ends").all()
        run("CREATE TEMP TABLE record_shifts (now VARCHAR(5), gone VARCHAR(5), n BIGINT, "
            "sy BIGINT, sx BIGINT, sxx TEXT, n2 BIGINT, sy2 BIGINT, sx2 BIGINT, dxy BIGINT, "
            "sxx2 TEXT, spread DOUBLE PRECISION, "
            "PRIMARY KEY (now, gone, n, sy, sx, sxx))")  # fmt: skip
        insert_rows(
            "INSERT INTO record_shifts (now, gone, n, sy, sx, sxx, n2, sy2, sx2, dxy, sxx2, "
            "spread)",
            [self._shifted(*key) for key in keys],
        )
        finished = self.now.finished_at
        params = {**self.params, "agent_pk": agent_pk, "project_id": project_id,
                  "finished": finished if self.pg else sqlite_time(finished)}  # fmt: skip
        update, insert = self._writes()
        self.conn.execute(text(update), params)
        analyze(CaseRecord.__table__, self.conn.execute(text(insert), params).rowcount)
        run("DELETE FROM case_records WHERE runs = 0 AND case_id IN "
            "(SELECT case_id FROM record_ends WHERE gone <> '')")  # fmt: skip
        run("DROP TABLE record_shifts")
        run("DROP TABLE record_ends")

    # ------------------------------------------------------------------- the two runs' cases

    def _moment(self, i: int) -> str:
        """SQL: the old record's moment `i` (0 with no record); only Σx² (4) as text."""
        if self.pg:
            return f"coalesce(r.moments ->> {i}, '0')" if i == 4 else \
                f"coalesce((r.moments ->> {i})::bigint, 0)"  # fmt: skip
        if i == 4:
            return "coalesce(r.moments -> '$[4]', '0')"  # the number as written, past 64 bits
        return f"coalesce(json_extract(r.moments, '$[{i}]'), 0)"

    def _old_count(self, k: int, i: int) -> str:
        """SQL: the old record's count `i` (pass, fail, error) of candidate `k`."""
        if k >= len(self.candidates):
            return "0"
        if self.pg:
            return f"coalesce((r.by_candidate -> CAST(:c{k} AS TEXT) ->> {i})::bigint, 0)"
        if self.paths:
            return f"coalesce(json_extract(r.by_candidate, :c{k}_{i}), 0)"
        return (f"coalesce((SELECT json_extract(value, '$[{i}]') FROM json_each(r.by_candidate) "
                f"WHERE key = :c{k}), 0)")  # fmt: skip

    def _ends(self) -> str:
        """SQL: fill `record_ends` from the two runs' counted outcomes and the old records."""
        counted = ", ".join(f"'{o}'" for o in COUNTED)
        moments = ", ".join(self._moment(i) for i in (0, 1, 2, 4))
        olds = ", ".join(self._old_count(k, i) for k in range(2) for i in range(3))
        return (
            "INSERT INTO record_ends SELECT a.case_id, r.case_id IS NOT NULL, a.now, a.gone, "
            f"{moments}, {olds} "
            "FROM (SELECT case_id, "
            "coalesce(max(CASE WHEN run_pk = :now_pk THEN outcome END), '') AS now, "
            "coalesce(max(CASE WHEN run_pk = :gone_pk THEN outcome END), '') AS gone "
            f"FROM test_run_cases WHERE run_pk IN (:now_pk, :gone_pk) AND outcome IN ({counted}) "
            "GROUP BY case_id) AS a LEFT JOIN case_records AS r ON r.case_id = a.case_id"
        )

    def _shifted(self, now: str, gone: str, n: int, sy: int, sx: int, sxx: str) -> tuple:
        """A row of `record_shifts`: its key, the new n, Σy and Σx, what Σxy changes by (each
        case's Σxy is its own), the new Σx² and the separation's denominator."""
        moments = [n, sy, sx, 0, int(sxx)]
        if gone:
            _moved(moments, gone, self.rates[1], -1)
        if now:
            _moved(moments, now, self.rates[0], +1)
        n2, sy2, sx2, dxy, sxx2 = moments
        return (now, gone, n, sy, sx, sxx, n2, sy2, sx2, dxy, str(sxx2),
                _spread(n2, sy2, sx2, sxx2))  # fmt: skip

    # ---------------------------------------------------------------------------- the records

    def _new_count(self, k: int, i: int) -> str:
        """SQL: candidate `k`'s count `i` once the pushed run is out and the new run in."""
        outcome, change = COUNTED[i], ""
        if self.candidates[k] == self.now.candidate:
            change += " + " + _one(f"e.now = '{outcome}'")
        if self.gone is not None and self.candidates[k] == self.gone.candidate:
            change += " - " + _one(f"e.gone = '{outcome}'")
        return f"(e.o{k}_{i}{change})"

    def _by_candidate(self, new: list[list[str]]) -> str:
        """SQL: the new `by_candidate` (jsonb on PostgreSQL): the changed candidates' counts
        replaced, a candidate with none left taken out."""
        had = [" + ".join(counts) + " > 0" for counts in new]
        if self.pg:
            kept = "coalesce(CAST(r.by_candidate AS JSONB), '{}'::jsonb)" + "".join(
                f" - CAST(:c{k} AS TEXT)" for k in range(len(new))
            )
            return f"({kept})" + "".join(
                f" || CASE WHEN {had[k]} THEN jsonb_build_object(CAST(:c{k} AS TEXT), "
                f"jsonb_build_array({', '.join(counts)})) ELSE '{{}}'::jsonb END"
                for k, counts in enumerate(new)
            )
        if self.paths:
            changes = ", ".join(
                f":c{k}, json(CASE WHEN {had[k]} THEN json_array({', '.join(counts)}) END)"
                for k, counts in enumerate(new)
            )
            return f"json_patch(coalesce(r.by_candidate, '{{}}'), json_object({changes}))"
        names = ", ".join(f":c{k}" for k in range(len(new)))
        added = "".join(
            f" UNION ALL SELECT :c{k}, json_array({', '.join(counts)}) WHERE {had[k]}"
            for k, counts in enumerate(new)
        )
        return (f"(SELECT json_group_object(key, json(value)) FROM (SELECT key, value FROM "
                f"json_each(coalesce(r.by_candidate, '{{}}')) WHERE key NOT IN ({names})"
                f"{added}))")  # fmt: skip

    def _failed_by(self, failing: list[str]) -> str:
        """SQL: the old record's `failed_by` with each changed candidate in it or not as
        `failing` (SQL, one a candidate) says, sorted as Python sorts (by code point)."""
        names = ", ".join(f"CAST(:c{k} AS TEXT)" for k in range(len(failing)))
        added = "".join(f" UNION ALL SELECT CAST(:c{k} AS TEXT) WHERE {test}"
                        for k, test in enumerate(failing))  # fmt: skip
        if self.pg:
            return ("(SELECT coalesce(json_agg(f.value ORDER BY f.value COLLATE \"C\"), "
                    "'[]'::json) FROM (SELECT value FROM json_array_elements_text("
                    f"coalesce(r.failed_by, '[]'::json)) WHERE value NOT IN ({names}){added}) "
                    "AS f)")  # fmt: skip
        return ("(SELECT json_group_array(value) FROM (SELECT value FROM json_each("
                f"coalesce(r.failed_by, '[]')) WHERE value NOT IN ({names}){added} "
                "ORDER BY 1))")  # fmt: skip

    def _flaky(self, by: str) -> str:
        """SQL: whether a candidate of `by` got two outcomes."""
        if self.pg:
            kinds = " + ".join(_one(f"(b.value ->> {i})::int > 0") for i in range(3))
            return f"EXISTS (SELECT 1 FROM jsonb_each({by}) AS b WHERE {kinds} > 1)"
        kinds = " + ".join(_one(f"json_extract(value, '$[{i}]') > 0") for i in range(3))
        return f"EXISTS (SELECT 1 FROM json_each({by}) WHERE {kinds} > 1)"

    def _writes(self) -> tuple[str, str]:
        """SQL: every record of `record_ends` counted on and written: the kept ones updated in
        place, then the new ones inserted (with no old row, the same values count from 0)."""
        ks = range(len(self.candidates))
        old = [[f"e.o{k}_{i}" for i in range(3)] for k in ks]
        new = [[self._new_count(k, i) for i in range(3)] for k in ks]
        by = self._by_candidate(new)

        def any_of(test: Any, counts: list[list[str]]) -> str:
            return "(" + " OR ".join(test(c) for c in counts) + ")"

        def failing(c: list[str]) -> str:
            return f"({c[1]} + {c[2]} > 0)"

        def mixed(c: list[str]) -> str:
            return f"({' + '.join(_one(f'{n} > 0') for n in c)} > 1)"

        changed = " OR ".join(f"{failing(old[k])} <> {failing(new[k])}" for k in ks)
        now_failing = [failing(new[k]) for k in ks]
        failed_by = (f"CASE WHEN {changed} THEN {self._failed_by(now_failing)} "
                     "ELSE coalesce(r.failed_by, '[]') END")  # fmt: skip
        flaky = (f"CASE WHEN {any_of(mixed, new)} THEN TRUE WHEN {any_of(mixed, old)} "
                 f"THEN {self._flaky(by)} ELSE coalesce(r.flaky, FALSE) END")  # fmt: skip
        counts = {
            column: f"coalesce(r.{column}, 0) + "
            + _one(f"e.now = '{outcome}'")
            + " - "
            + _one(f"e.gone = '{outcome}'")
            for outcome, column in _COLUMN.items()
        }
        runs = "coalesce(r.runs, 0) + " + _one("e.now <> ''") + " - " + _one("e.gone <> ''")
        kept = "coalesce(r.streak, 0) - " + _one("e.gone <> '' AND r.streak = r.runs")
        streak = f"CASE e.now WHEN '' THEN {kept} WHEN 'pass' THEN 0 ELSE {kept} + 1 END"
        left = "coalesce(r.failed, 0) + coalesce(r.errored, 0) - " + _one(
            "e.gone IN ('fail', 'error')"
        )
        last_failed = (f"CASE WHEN e.now IN ('fail', 'error') THEN :finished WHEN "
                       f"e.gone <> '' AND {left} = 0 THEN NULL ELSE r.last_failed END")  # fmt: skip
        sxy = f"({self._moment(3)} + sh.dxy)"
        moments = " || ', ' || ".join(["'[' || sh.n2", "sh.sy2", "sh.sx2", sxy, "sh.sxx2 || ']'"])
        ratio = f"CAST(sh.n2 * {sxy} - sh.sx2 * sh.sy2 AS DOUBLE PRECISION) / sh.spread"
        if self.pg:
            one = "CAST(1 AS DOUBLE PRECISION)"
            ratio = f"GREATEST(-{one}, LEAST({one}, {ratio}))"
            by, moments, failed_by = (f"CAST({x} AS JSON)" for x in (by, moments, failed_by))
        else:
            ratio = f"MAX(-1.0, MIN(1.0, {ratio}))"
        values = {
            "runs": runs, **counts, "failed_by": failed_by, "flaky": flaky,
            "separation": f"CASE WHEN sh.spread IS NULL THEN NULL ELSE {ratio} END",
            "last_failed": last_failed, "streak": streak, "by_candidate": by, "moments": moments,
        }  # fmt: skip
        shifted = "JOIN record_shifts AS sh ON " + " AND ".join(
            f"sh.{c} = e.{c}" for c in ("now", "gone", "n", "sy", "sx", "sxx")
        )
        # a new record counts from no old row: `r` a row of NULLs, not the table joined, which
        # the insert grows (a table analyzed while empty is scanned for each row inserted:
        # quadratic, a first full run of 313,711 cases ran past a minute on PostgreSQL)
        nothing = ", ".join(f"CAST(NULL AS {c.type.compile(self.conn.dialect)}) AS {c.name}"
                            for c in CaseRecord.__table__.columns)  # fmt: skip
        return (
            "UPDATE case_records AS r SET "
            + ", ".join(f"{column} = {value}" for column, value in values.items())
            + f" FROM record_ends AS e {shifted} WHERE r.case_id = e.case_id",
            f"INSERT INTO case_records (case_id, agent_pk, project_id, {', '.join(values)}) "
            f"SELECT e.case_id, :agent_pk, :project_id, {', '.join(values.values())} "
            f"FROM record_ends AS e {shifted} CROSS JOIN (SELECT {nothing}) AS r "
            "WHERE NOT e.kept",
        )


def _sets(conn: Connection) -> list[Any]:
    """The test sets that have test runs."""
    return conn.execute(select(TestRun.agent_pk, TestRun.project_id).distinct()).all()


def rebuild_all(conn: Connection, columns: list[str] | None = None) -> None:
    """Every set's records from its stored runs, with only `columns` when given (migrations 0014
    and 0016)."""
    for agent_pk, project_id in _sets(conn):
        _rewrite(conn, agent_pk, project_id, columns=columns)


def breaches() -> list[str]:
    """Every kept record that is not what the window's runs make it, and every record missing
    (`kindgi check`)."""
    conn = sql()
    columns = [c.name for c in CaseRecord.__table__.columns]
    kept = {row.case_id: row._asdict() for row in conn.execute(select(CaseRecord.__table__))}
    found = {}
    for agent_pk, project_id in _sets(conn):
        found.update({row["case_id"]: row for row in computed(conn, agent_pk, project_id)})
    out = []
    for case_id in sorted(set(kept) | set(found)):
        mine, theirs = kept.get(case_id), found.get(case_id)
        if mine is None or theirs is None:
            said = "is kept, and no run of its window had it" if theirs is None else "is missing"
            out.append(f"case {case_id}: its record {said}")
            continue
        wrong = [c for c in columns if mine[c] != theirs[c]]
        if wrong:
            shown = ", ".join(f"{c} {mine[c]!r} (runs say {theirs[c]!r})" for c in wrong)
            out.append(f"case {case_id}: its record holds {shown}")
    return out


def get_record(caller: Principal, agent_id: str, case_id: str) -> tuple[str, CaseRecord | None]:
    """A case of the agent (as `get_case` finds it: 404 unless the caller's tenant has it, and
    `read` on its project) and its record, if any run of the window had it."""
    case = case_service.get_case(caller, agent_id, case_id).case
    return case.id, record_of(case.id)


def record_of(case_id: str) -> CaseRecord | None:
    """A case's record, read as one row, for a caller already let read the case."""
    return db.session.get(CaseRecord, case_id)
