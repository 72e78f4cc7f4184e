"""axe-core in a Playwright page: `assert_accessible(page)` fails on any serious or critical
violation, listing each rule with the elements that break it.

axe-core comes from the npm registry at the version tests/axe/package-lock.json pins (`make test`
installs it: `npm ci --prefix tests/axe`). Its script is evaluated through the DevTools protocol,
which a page's Content-Security-Policy (script-src 'self') does not govern, so the page is
checked as it is served, its CSP on.

From any browser test:

    from a11y import assert_accessible
    page.goto(url)
    assert_accessible(page)                       # the whole page
    assert_accessible(page, exclude=["#swagger"])  # leaving out what is not ours
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE_JS = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
FAILING = ("serious", "critical")

# axe.run on the document (less what is excluded), the rules of WCAG 2.x A and AA and axe's
# best practices; only the violations come back.
RUN = """async (exclude) => {
  const context = exclude.length ? {exclude: exclude.map((s) => [s])} : document;
  const found = await axe.run(context, {resultTypes: ["violations"]});
  return found.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => ({target: n.target.join(" "), summary: n.failureSummary})),
  }));
}"""


@cache
def _axe_source() -> str:
    """axe.min.js, read once; a clear failure when it was never installed."""
    if not AXE_JS.exists():
        raise AssertionError(
            f"{AXE_JS} is missing: run `make axe` (npm ci --prefix tests/axe) first"
        )
    return AXE_JS.read_text()


def violations(page: Page, exclude: Sequence[str] = ()) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(_axe_source())
    found = page.evaluate(RUN, list(exclude))
    return [v for v in found if v["impact"] in FAILING]


def report(found: list[dict[str, Any]]) -> str:
    """The violations as lines to read: the rule, its impact and help, then each element."""
    lines = []
    for v in found:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"]:
            summary = " ".join(node["summary"].split())
            lines.append(f"    {node['target']}: {summary}")
    return "\n".join(lines)


def assert_accessible(page: Page, exclude: Sequence[str] = ()) -> None:
    """Fail when axe-core finds a serious or critical violation on the page (its CSS selectors
    in `exclude` left out), naming each rule and element."""
    found = violations(page, exclude)
    assert not found, f"axe-core on {page.url}:\n{report(found)}"
