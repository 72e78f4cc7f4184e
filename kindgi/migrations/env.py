"""Alembic's environment: migrate the app's own database, with the models' metadata to compare."""

from alembic import context
from flask import current_app

from kindgi.models import modelled

config = context.config
db = current_app.extensions["migrate"].db


def run_offline() -> None:
    """Emit SQL for the app's database URL without connecting (`flask db upgrade --sql`)."""
    url = db.engine.url.render_as_string(hide_password=False)
    context.configure(url=url, target_metadata=db.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    def skip_empty(_context, _revision, directives):
        """`flask db migrate` with no model change writes no empty migration."""
        if getattr(config.cmd_opts, "autogenerate", False) and directives[0].upgrade_ops.is_empty():
            directives[:] = []

    options = dict(current_app.extensions["migrate"].configure_args)
    options.setdefault("process_revision_directives", skip_empty)
    options.setdefault("include_object", modelled)
    with db.engine.connect() as connection:
        context.configure(connection=connection, target_metadata=db.metadata, **options)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
