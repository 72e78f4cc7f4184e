"""The HTML pages. Each route parses, calls one service function, and renders."""

from __future__ import annotations

from flask import Blueprint, render_template

bp = Blueprint("pages", __name__)


@bp.get("/docs")
def docs():
    """The API reference, rendered from /v1/openapi.json by vendored Swagger UI."""
    return render_template("docs.html")
