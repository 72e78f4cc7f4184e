"""gunicorn reads this file from the folder it starts in: the hooks of kindgi/gunicorn_conf.py."""

from kindgi.gunicorn_conf import child_exit, on_exit, on_starting, timeout  # noqa: F401
