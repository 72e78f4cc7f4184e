"""The practical limit: the cases list's first page with nothing but Flask and the driver.

The bench serves this beside Kindgi, with the same gunicorn and workers, on the same database.
It runs the query the list runs (the same filters and order, on the same index) and answers JSON
of the same shape, but with no ORM, no authentication, no validation and no cursor: what is left
is what any Flask app on this machine pays for HTTP, one query and a JSON answer.

    RAW_DATABASE=/path/kindgi.sqlite gunicorn --workers 2 --chdir bench raw_app:app
    RAW_DATABASE=postgresql://postgres@127.0.0.1/kindgi_bench gunicorn ...

GET /cases?agent=PK&project=ID answers the newest 25 active cases.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

from flask import Flask, request

DATABASE = os.environ.get("RAW_DATABASE", "")
POSTGRES = DATABASE.startswith("postgresql")
COLUMNS = (
    "id",
    "kind",
    "project_id",
    "run_id",
    "made_on",
    "expect",
    "expert",
    "added_by_kind",
    "added_by_id",
    "added_at",
    "updated_at",
)
QUERY = (
    f"SELECT {', '.join(COLUMNS)} FROM cases "
    "WHERE agent_pk = ? AND project_id = ? "
    "AND (status IS NULL OR status NOT IN ('wont-fix', 'removed')) AND retired_at IS NULL "
    "ORDER BY added_at DESC, id DESC LIMIT 26"
)

app = Flask(__name__)


_conn: Any = None


def _connection() -> Any:
    """One connection per worker process, opened by its first request (after the fork)."""
    global _conn
    if _conn is None:
        if POSTGRES:
            import psycopg

            _conn = psycopg.connect(DATABASE, autocommit=True)
        else:
            _conn = sqlite3.connect(DATABASE, check_same_thread=False)
    return _conn


def _time(value: Any) -> str:
    """RFC 3339 to the millisecond, as the API answers."""
    text = value if isinstance(value, str) else value.isoformat(" ")
    return text.replace(" ", "T")[:23] + "Z"


@app.get("/cases")
def cases():
    sql = QUERY.replace("?", "%s") if POSTGRES else QUERY
    rows = _connection().execute(sql, (int(request.args["agent"]), request.args["project"]))
    rows = rows.fetchall()
    data = []
    for row in rows[:25]:
        case = dict(zip(COLUMNS, row, strict=True))
        expect = case["expect"]
        out = {
            "id": case["id"],
            "kind": case["kind"],
            "projectId": case["project_id"],
            "runId": case["run_id"],
            "madeOn": case["made_on"],
            "expect": json.loads(expect) if isinstance(expect, str) else expect,
            "addedBy": {"kind": case["added_by_kind"], "id": case["added_by_id"]},
            "addedAt": _time(case["added_at"]),
            "updatedAt": _time(case["updated_at"]),
        }
        if case["expert"]:
            out["expert"] = True
        data.append(out)
    return {"data": data, "hasMore": len(rows) > 25}
