"""The example agent (agent.py beside it) graded from pytest: each case of the test set a test.

    pip install kindgi pytest-xdist
    export KINDGI_URL=http://127.0.0.1:5000 KINDGI_TOKEN=kgi_…      # from `make demo`
    pytest docs/examples/test_agent.py -n 4 --kindgi-agent demo.drafting \\
        --kindgi-project 2489e9ad-2ee2-8e00-8ec9-32d5f69181c0 --kindgi-candidate 2.0.0 \\
        --kindgi-baseline latest --kindgi-max-regressions 0

Without --kindgi-agent (or KINDGI_AGENT) the plugin stays out of the way and this test is
skipped.
"""

from __future__ import annotations

import argparse

from agent import answer  # the example agent, beside this file (pytest puts its folder first)

NO_FLAWS = argparse.Namespace(crash_on=None, sleep=0, call=[], reverse=False)


def test_the_agent_on_a_case(kindgi_case):
    said = answer(kindgi_case.input, NO_FLAWS)  # your agent, on the case's input
    kindgi_case.answer(said["output"], calls=said["calls"], ranked=said["ranked"])
