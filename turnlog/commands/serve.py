"""`turnlog serve`: the local web viewer."""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Any

import click

from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.output import dumps, echo

WEB_MISSING = (
    "turnlog serve needs the web extra (starlette, jinja2, uvicorn), which is not installed: "
    "pip install 'turnlog[web]'"
)
_WEB_PACKAGES = ("starlette", "jinja2", "markupsafe", "uvicorn")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="The port to listen on (0: any free port).",
)
@click.option("--json", "as_json", is_flag=True, help='Print the address as JSON ({"url": ...}).')
@pass_ctx
def serve(ctx: _Context, host: str, port: int, as_json: bool) -> None:
    """Serve a read-only web viewer of the store until interrupted (Ctrl-C): the sessions, each
    session's timeline, each model call replayed with exactly the messages it was sent, token spend
    per call and per day, and a JSON API (/api/sessions, /api/sessions/ID/events,
    /api/sessions/ID/calls/N).

    The first line printed is the URL it listens on. The store is opened read-only for every
    request: the viewer never writes to it (a read-only file works), and shows what writers append
    meanwhile. It listens on 127.0.0.1 unless told otherwise; anyone who can reach another address
    can read every session, so a warning is printed then. Needs the `web` extra:
    pip install 'turnlog[web]'.

    \b
    Example:
      turnlog --db agent.db serve --port 8765
    """
    try:
        import uvicorn

        from turnlog.web import create_app
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in _WEB_PACKAGES:
            raise click.ClickException(WEB_MISSING) from exc
        raise
    with ctx.read():  # a missing store, or a file that is no store, is one line before serving
        pass
    listener = _listen(host, port)
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    echo(dumps({"url": url}, indent=None) if as_json else url)
    sys.stdout.flush()
    if not _is_loopback(listener):
        echo(
            f"warning: listening on {host}, not on a loopback address: anyone who can reach it can read "
            "every session of this store",
            err=True,
        )
    config: Any = uvicorn.Config(create_app(ctx.db), log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[listener])


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise click.BadParameter(f"{host!r} is not an address this machine can listen on ({exc.strerror})",
                                 param_hint="--host") from None  # fmt: skip
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as exc:
        listener.close()
        raise click.ClickException(f"cannot listen on {host} port {port}: {exc.strerror}") from None
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


def _is_loopback(listener: socket.socket) -> bool:
    return ipaddress.ip_address(listener.getsockname()[0]).is_loopback
