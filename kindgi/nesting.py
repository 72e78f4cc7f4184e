"""How deep JSON nests, and the API's limit on it (docs/errors.md): the server holds every body
to it, and `kindgi test-run` and the pytest plugin hold an agent's answer to it before sending
it, so that one answer can't have a whole batch of results refused."""

from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 100  # arrays and objects in a body, its own object the first
# A result is sent as `{"results": [result]}`: the result's own object is the body's third level
RESULT_DEPTH = MAX_JSON_DEPTH - 2

_CONTAINERS = (dict, list)  # what JSON nests


def deeper_than(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest in `data` more than `limit` deep: a level at a time, not
    recursively, so no depth can overflow the check (as it did the checks after it)."""
    level = [data] if isinstance(data, _CONTAINERS) else []
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if type(node) is dict else node)
            if isinstance(child, _CONTAINERS)  # a tuple: faster than `dict | list`
        ]
        if not level:
            return False
    return bool(level)
