"""Entry point: `flask --app app …` and `gunicorn app:app`."""

from kindgi import create_app

app = create_app()
