"""Kindgi test sets: the cases that experts' corrections of an agent's runs turn into.

`kindgi.Client` speaks the JSON API from Python (kindgi/client.py) and needs only httpx;
`kindgi.create_app` builds the server's app (kindgi/factory.py), imported when first asked for.
"""

from __future__ import annotations

from typing import Any

from .client import ApiError, Client, Rows

__all__ = ["ApiError", "Client", "Rows", "create_app"]
_FACTORY = {"create_app", "csrf", "login_manager", "migrate"}


def __getattr__(name: str) -> Any:
    """The app factory and its extensions, loaded with Flask on first use."""
    if name in _FACTORY:
        from . import factory

        return getattr(factory, name)
    raise AttributeError(f"module 'kindgi' has no attribute {name!r}")
