"""The OpenAPI document is derived from the routes the app serves: none missing, none extra."""

from __future__ import annotations

import pytest

from kindgi import openapi


def test_the_document_describes_exactly_the_routes_the_app_serves(app):
    served = {(method, path) for method, path, _ in openapi.routes(app)}
    described = {
        (method, path)
        for path, operations in openapi.document(app)["paths"].items()
        for method in operations
    }
    assert served == described
    assert ("post", "/v1/agents/{agentId}/test-set/cases") in described
    assert all(path.startswith("/v1/") for _, path in described)


def test_a_route_without_its_operation_stops_the_document(app):
    app.add_url_rule("/v1/undocumented", "api.undocumented", lambda: "", methods=["GET"])
    with pytest.raises(LookupError, match=r"api\.undocumented"):
        openapi.document(app)


def test_an_operation_without_its_route_stops_the_document(app, monkeypatch):
    gone = openapi.Operation("gone", "No route serves it.", None, None, 200, None, ())
    monkeypatch.setitem(openapi.OPERATIONS, "api.gone", gone)
    with pytest.raises(LookupError, match=r"api\.gone"):
        openapi.document(app)
