"""gunicorn reads this file from the folder it starts in: the settings and hooks of
kindgi/gunicorn_conf.py."""

from kindgi.gunicorn_conf import (  # noqa: F401
    child_exit,
    limit_request_field_size,
    limit_request_line,
    on_exit,
    on_starting,
    timeout,
)
