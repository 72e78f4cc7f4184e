"""Kindgi test sets: the cases that experts' corrections of an agent's runs turn into."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flask import Flask
from flask_migrate import Migrate

from .database import db, engine_options, install_hooks

migrate = Migrate()


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Defaults, then `KINDGI_*` environment variables, then `test_config`."""
    root = Path(__file__).resolve().parent.parent
    app = Flask(
        __name__,
        instance_path=str(root / "instance"),
        template_folder=str(root / "templates"),
        static_folder=str(root / "static"),
    )
    app.config.from_mapping(
        SECRET_KEY=None,
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{Path(app.instance_path) / 'kindgi.sqlite'}",
        MAX_CONTENT_LENGTH=1024 * 1024,
        DB_BUSY_TIMEOUT_MS=5000,
        DB_STATEMENT_TIMEOUT_MS=15000,
        IDEMPOTENCY_LEASE_SECONDS=30,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        REMEMBER_COOKIE_HTTPONLY=True,
        REMEMBER_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=12 * 60 * 60,
    )
    app.config.from_prefixed_env("KINDGI")
    if test_config:
        app.config.from_mapping(test_config)
    if not app.config["SECRET_KEY"]:
        app.config["SECRET_KEY"] = _instance_secret(Path(app.instance_path))
    app.config.setdefault(
        "SQLALCHEMY_ENGINE_OPTIONS",
        engine_options(
            app.config["SQLALCHEMY_DATABASE_URI"],
            app.config["DB_BUSY_TIMEOUT_MS"],
            app.config["DB_STATEMENT_TIMEOUT_MS"],
        ),
    )
    db.init_app(app)
    migrate.init_app(
        app, db, directory=str(Path(__file__).parent / "migrations"), render_as_batch=True
    )
    with app.app_context():
        install_hooks(db.engine, app.config["DB_BUSY_TIMEOUT_MS"] / 1000)

    from . import api, cli, errors, http, pages

    app.json = http.JSONAnswers(app)
    app.json.sort_keys = False  # answers keep the order clients gave (args "as given")
    http.register(app)
    errors.register(app)
    app.register_blueprint(api.bp)
    pages.init_app(app)
    cli.register(app)
    return app


def _instance_secret(instance: Path) -> str:
    """A secret kept in `instance/` for a single machine; production sets KINDGI_SECRET_KEY."""
    instance.mkdir(parents=True, exist_ok=True)
    path = instance / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex())
    return path.read_text().strip()
