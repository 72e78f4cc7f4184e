"""The quick runs' proof, small (bench/quick.py; the full one is `bench/run.py --only quick`):
an item-response history graded through the API, then quick runs against full runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from quick import simulate


def test_quick_runs_estimate_the_full_pass_rate_within_their_interval(api):
    """200 cases, 8 past candidates, then 4 more with 15 quick runs of 30 each."""

    def call(method: str, path: str, body: Any) -> tuple[int, Any]:
        resp = api.call(method, path, json=body)
        return resp.status_code, resp.get_json()

    got = simulate(call, cases=200, history=8, candidates=4, quick=15, size=30, seed=7)
    assert got.quick_runs == 60
    # the case ids are new each time, so the draws are too: bars wide of the figures seen
    # (about 3.3 points against plain random's 7, coverage 93 to 100 %)
    assert got.mae < 5.0 and got.mae < got.plain_mae
    assert got.coverage >= 80
