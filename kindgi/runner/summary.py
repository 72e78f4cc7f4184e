"""What `kindgi test-run` says at the end: the summary on stdout, and the same as Markdown for a
CI job summary or a pull-request comment."""

from __future__ import annotations

from typing import Any

from ..grading import explain


def _rate(run: dict[str, Any]) -> str:
    rate = run.get("passRate")
    if rate is None:
        return "no pass rate (nothing passed or failed)"
    return f"{rate['value']:.1%} (95 % interval {rate['low']:.1%} to {rate['high']:.1%})"


def _estimate(run: dict[str, Any]) -> str | None:
    """A quick run's estimate of the full pass rate, in words (None for a full run)."""
    if "sample" not in run:
        return None
    sample, found = run["sample"], run.get("estimate")
    drawn = f"a sample of {sample['size']} of {sample['population']} cases (seed {sample['seed']})"
    if found is None:
        return f"no estimated pass rate yet from {drawn}"
    return (
        f"estimated full pass rate {found['passRate']:.1%} "
        f"(95 % interval {found['low']:.1%} to {found['high']:.1%}) from {drawn}"
    )


def _p_words(p: float) -> str:
    return "could be chance" if p >= 0.05 else "unlikely to be chance"


def lines(run: dict[str, Any], compared: dict[str, Any] | None, verdict: str) -> list[str]:
    """The summary as plain lines."""
    cases = run["cases"]
    out = [
        f"test run {run['id']}: candidate {run['candidate']} on {run['testSetId']} "
        f"{run['version']}, {run['status']}",
        f"cases: {cases['total']} — {cases['pass']} pass, {cases['fail']} fail, "
        f"{cases['error']} error, {cases['ungraded']} ungraded, {cases['pending']} pending",
        f"pass rate: {_rate(run)}",
    ]
    estimated = _estimate(run)
    if estimated:
        out.append(estimated)
    if compared is not None:
        counts, p = compared["counts"], compared["pValue"]
        out.append(
            f"against {compared['baseline']}: {counts['regressed']} regressed, "
            f"{counts['fixed']} fixed, {counts['stillFailing']} still failing, "
            f"{counts['new']} new, {counts['gone']} gone; p = {p:.3g} ({_p_words(p)})"
        )
        for row in compared["regressions"]:
            out.append(f"  regressed: {row['caseId']} — {row['why']}")
        for row in compared["fixes"]:
            out.append(f"  fixed: {row['caseId']}")
    out.append(verdict)
    return out


def markdown(run: dict[str, Any], compared: dict[str, Any] | None, verdict: str) -> str:
    """The summary as Markdown."""
    cases = run["cases"]
    out = [
        f"### Kindgi test run `{run['id']}`: {run['candidate']}",
        "",
        f"**{verdict}**",
        "",
        f"Test set `{run['testSetId']}` {run['version']}, pass rate {_rate(run)}.",
        "",
        "| pass | fail | error | ungraded | pending | total |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {cases['pass']} | {cases['fail']} | {cases['error']} | {cases['ungraded']} | "
        f"{cases['pending']} | {cases['total']} |",
    ]
    estimated = _estimate(run)
    if estimated:
        out += ["", estimated[0].upper() + estimated[1:] + "."]
    if compared is not None:
        counts, p = compared["counts"], compared["pValue"]
        out += [
            "",
            f"Against `{compared['baseline']}`: **{counts['regressed']} regressed**, "
            f"{counts['fixed']} fixed (exact McNemar p = {p:.3g}, {_p_words(p)}).",
        ]
        if compared["regressions"]:
            out += ["", "| regressed case | why |", "| --- | --- |"]
            out += [f"| `{r['caseId']}` | {_cell(r['why'])} |" for r in compared["regressions"]]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    """Text that stays in its Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def why(result: dict[str, Any]) -> str:
    """One line on why a case's result is not a pass."""
    return result.get("reason") or explain(result.get("parts")) or result.get("outcome", "")
