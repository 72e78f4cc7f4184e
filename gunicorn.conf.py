"""gunicorn reads this file from the folder it starts in: the hooks of kindgi/gunicorn_conf.py."""

from kindgi.gunicorn_conf import on_exit, on_starting  # noqa: F401
