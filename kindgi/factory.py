"""The app factory: `create_app` builds the app (configuration, the database, the extensions,
the request boundary, the JSON API and the pages). `kindgi` hands it out on demand, so that
importing the package for its client loads no Flask."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flask import Flask
from flask_login import LoginManager
from flask_migrate import Migrate
from flask_wtf.csrf import CSRFProtect

from .config import DEFAULTS
from .database import db, engine_options, install_hooks

HERE = Path(__file__).resolve().parent
# An installed wheel carries templates/ and static/ inside the package; a checkout at its top level
CHECKOUT = None if (HERE / "templates").is_dir() else HERE.parent

migrate = Migrate()
login_manager = LoginManager()
csrf = CSRFProtect()


def _shipped(name: str) -> str:
    """`templates/` or `static/`: at the checkout's top level, or inside the installed package."""
    return str((CHECKOUT or HERE) / name)


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Defaults, then `KINDGI_*` environment variables, then `test_config`."""
    app = Flask(
        "kindgi",  # the package's name, not this module's: its root and instance folder
        # A checkout keeps its data in instance/; an installed package in Flask's default
        # (<prefix>/var/kindgi-instance)
        instance_path=str(CHECKOUT / "instance") if CHECKOUT else None,
        template_folder=_shipped("templates"),
        static_folder=_shipped("static"),
    )
    app.config.from_mapping(
        DEFAULTS,
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{Path(app.instance_path) / 'kindgi.sqlite'}",
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
    migrate.init_app(app, db, directory=str(HERE / "migrations"), render_as_batch=True)
    with app.app_context():
        install_hooks(db.engine, app.config["DB_BUSY_TIMEOUT_MS"] / 1000)

    from . import api, cli, http, ops, pages, queue, run_pages, service, telemetry

    app.json = http.JSONAnswers(app)
    app.session_interface = http.PagesOnlySessions()
    telemetry.configure_logging(app)
    telemetry.register(app)  # before the boundary: its answer line sees the final status
    http.register(app)  # first: its hooks run before the extensions' (CSRF's refusal included)
    login_manager.init_app(app)
    login_manager.login_view = "pages.login"
    login_manager.login_message = "Sign in to see your test sets."
    login_manager.user_loader(service.user_principal)
    csrf.init_app(app)
    csrf.exempt(api.bp)  # the API is bearer tokens: no cookie, no CSRF
    app.register_blueprint(api.bp)
    app.register_blueprint(pages.bp)
    app.register_blueprint(ops.bp)
    pages.register_filters(app)
    run_pages.register(app)
    cli.register(app)
    queue.register(app)
    return app


def _instance_secret(instance: Path) -> str:
    """A secret kept in the instance folder for a single machine; production sets
    KINDGI_SECRET_KEY."""
    instance.mkdir(parents=True, exist_ok=True)
    path = instance / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex())
    return path.read_text().strip()
