"""The local web viewer (`turnlog serve`): server-rendered pages and a JSON API over a store opened
read-only. Needs the ``web`` extra (Starlette, Jinja2, uvicorn); nothing else imports it."""

from turnlog.web.app import create_app

__all__ = ["create_app"]
