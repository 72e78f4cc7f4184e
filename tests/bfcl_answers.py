"""BFCL's own data and checker, and candidate answers built from its possible answers with the
perturbations issue 26 names: for tests/test_bfcl.py and `bench/run.py --only bfcl`.

`bfcl-eval`'s wheel is downloaded without its dependencies (`pip download bfcl-eval --no-deps`)
and unpacked; its AST checker is imported from it as it is, but for its table of model
configurations, which imports every model's client library: the checker reads it only for a
function name with a dot, to ask whether the model writes dots as underscores, and here none
does.
"""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
import types
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WHEELS = Path("/tmp/kindgi-bfcl")
# The release whose data and checker docs/grading.md's figures are of: a later one may change both
VERSION = "2026.3.23"
MODEL = "kindgi"  # the model name the checker is told: it writes function names as given
PER_CATEGORY = 100  # 5 categories: 500 entries

# BFCL's categories as its checker names them, by the file the example converts
CHECKER_CATEGORY = {
    "simple_python": "simple",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "live_simple": "live_simple",
}


class Unreachable(Exception):
    """The package registry could not be reached: the wheel can't be had."""


def wheel_data() -> Path:
    """The unpacked wheel's package directory (bfcl_eval), downloading it once."""
    wheel = WHEELS / f"bfcl_eval-{VERSION}-py3-none-any.whl"
    if not wheel.exists():
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"bfcl-eval=={VERSION}", "--no-deps",
             "-d", str(WHEELS)],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if not wheel.exists():
            raise Unreachable(done.stderr.strip().splitlines()[-1:] or ["pip download failed"])
    unpacked = WHEELS / wheel.stem
    if not (unpacked / "bfcl_eval").is_dir():
        with zipfile.ZipFile(wheel) as opened:
            opened.extractall(unpacked)
    return unpacked


def checker(unpacked: Path) -> Callable[..., dict[str, Any]]:
    """BFCL's `ast_checker`, imported from the unpacked wheel (its model table stubbed)."""
    if str(unpacked) not in sys.path:
        sys.path.insert(0, str(unpacked))

    class NoDots:
        underscore_to_dot = False

    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = {MODEL: NoDots()}  # type: ignore[attr-defined]
    sys.modules.setdefault("bfcl_eval.constants.model_config", stub)
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    def check(functions: list[Any], output: list[Any], possible: list[Any], category: str) -> Any:
        return ast_checker(functions, output, possible, Language.PYTHON, category, MODEL)

    return check


def example() -> types.ModuleType:
    """docs/examples/bfcl.py, the converter, as a module."""
    spec = importlib.util.spec_from_file_location("bfcl_example", ROOT / "docs/examples/bfcl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Entry:
    """One converted BFCL entry: its id, checker category, functions and possible answer."""

    id: str
    category: str
    functions: list[dict[str, Any]]
    possible: list[dict[str, Any]]
    line: dict[str, Any]  # the exported case the example made of it


def entries(unpacked: Path, per_category: int | None = PER_CATEGORY) -> list[Entry]:
    """The first `per_category` entries of each category (None: all), converted by the
    example."""
    converter = example()
    data = unpacked / "bfcl_eval" / "data"
    found = []
    for file_category, category in CHECKER_CATEGORY.items():
        answers = {
            a["id"]: a
            for a in converter.read_json_lines(
                data / "possible_answer" / f"BFCL_v4_{file_category}.json"
            )
        }
        for line in converter.convert_file(data, file_category, per_category):
            entry_id = line["input"]["bfcl"]
            found.append(
                Entry(entry_id, category, line["input"]["functions"],
                      answers[entry_id]["ground_truth"], line)
            )  # fmt: skip
    return found


# --- candidate answers -----------------------------------------------------------------------

Calls = list[tuple[str, dict[str, Any]]]  # (function, arguments), in order


def _first(possible: list[Any]) -> Any:
    """The first possible value, or ... when the first says the parameter is left out; in a
    possible object (or list of them), each key's first possible value."""
    if not possible or possible[0] == "":
        return ...
    first = possible[0]
    if isinstance(first, dict):
        return _resolved(first)
    if isinstance(first, list) and first and all(isinstance(v, dict) for v in first):
        return [_resolved(v) for v in first]
    return first


def _resolved(answer: dict[str, Any]) -> dict[str, Any]:
    """A possible object as one object: each key with its first possible value, if any."""
    chosen = {k: _first(v) if isinstance(v, list) and v else v for k, v in answer.items()}
    return {k: v for k, v in chosen.items() if v is not ...}


def exact(entry: Entry) -> Calls:
    """Each possible-answer call with the first of each parameter's possible values."""
    calls = []
    for call in entry.possible:
        ((name, params),) = call.items()
        args = {p: _first(values) for p, values in params.items()}
        calls.append((name, {p: v for p, v in args.items() if v is not ...}))
    return calls


def _declared(entry: Entry, name: str) -> dict[str, Any]:
    return next(f for f in entry.functions if f["name"] == name)["parameters"]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + " and more"
    if isinstance(value, list):
        return [*value, value[0] if value else "x"]
    if isinstance(value, dict):
        return {**value, "unlisted": 1}
    return "changed"


def _first_of_type(
    calls: Calls, entry: Entry, test: Callable[[str, Any], bool]
) -> tuple[int, str] | None:
    """The first (call, parameter) whose declared type and value pass `test`."""
    for i, (name, args) in enumerate(calls):
        properties = _declared(entry, name)["properties"]
        for param, value in args.items():
            if test(properties.get(param, {}).get("type", ""), value):
                return i, param
    return None


def perturbations(entry: Entry) -> Iterator[tuple[str, Calls]]:
    """Each perturbation that applies to the entry, with the candidate's calls."""
    base = exact(entry)
    yield "exact", base
    name, args = base[0]
    yield "wrong function", [(name + "_x", args), *base[1:]]
    if args:
        param = next(iter(args))
        yield "changed value", [(name, {**args, param: _changed(args[param])}), *base[1:]]
    required = [p for p in _declared(entry, name).get("required") or [] if p in args]
    if required:
        yield (
            "dropped required",
            [(name, {k: v for k, v in args.items() if k != required[0]}), *base[1:]],
        )
    yield "extra argument", [(name, {**args, "unlisted_argument": 1}), *base[1:]]
    yield "extra call", [*base, base[0]]
    found = _first_of_type(
        base, entry, lambda t, v: t == "string" and isinstance(v, str) and v.swapcase() != v
    )
    if found:
        i, param = found
        other = copy.deepcopy(base)
        other[i][1][param] = other[i][1][param].swapcase()
        yield "other case", other
    if len(base) > 1:
        yield "other order", base[::-1]
    elif len(args) > 1:
        yield "other order", [(name, dict(reversed(list(args.items()))))]
    found = _first_of_type(
        base, entry,
        lambda t, v: t in ("integer", "float") and isinstance(v, int | float)
        and not isinstance(v, bool) and float(v).is_integer(),
    )  # fmt: skip
    if found:
        i, param = found
        other = copy.deepcopy(base)
        value = other[i][1][param]
        other[i][1][param] = float(value) if isinstance(value, int) else int(value)
        yield "3 for 3.0", other


def as_kindgi(calls: Calls) -> list[dict[str, Any]]:
    return [{"tool": name, "args": args} for name, args in calls]


def as_bfcl(calls: Calls) -> list[dict[str, Any]]:
    return [{name: args} for name, args in calls]
