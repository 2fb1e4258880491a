"""The viewer's Starlette application: server-rendered pages and a JSON API over one store, opened
read-only for each request. Only GET and HEAD are routed (anything else is a 405); every response
carries a strict Content-Security-Policy; Jinja escapes every stored text."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from turnlog import open_store
from turnlog.output import describe
from turnlog.projections.spend import CallSpend
from turnlog.store import Store, StoreError, UnknownArtifactError, UnknownSessionError
from turnlog.web import queries, svg

HERE = Path(__file__).parent
PAGE_SIZE = 100
"""Sessions per page of the list: all of them on one page up to this many."""
SPEND_CALLS = 500
"""Billed calls a spend page draws and lists one by one: the newest this many (the JSON has all)."""
TIMELINE_PAGE = 1000
"""Events per page of a timeline: a session of up to this many is one page."""

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]

_ERROR_TYPES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 500: "server_error"}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


class _SecurityHeaders:
    """Adds the security headers to every HTTP response (404s, 405s and static files included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self,
        scope: Scope,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class _Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, default=str, indent=1).encode("utf-8")


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name: stored text is always escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = lambda v: "–" if v is None else f"{v:,}"
    env.filters["usd"] = lambda v: "–" if v is None else svg.usd_label(v)
    env.filters["q"] = lambda v: quote(str(v), safe="")
    env.filters["when"] = lambda v: str(v)[:19].replace("T", " ")
    env.filters["pretty"] = _pretty_json
    env.globals["describe"] = lambda record: describe(record, 200)
    return Jinja2Templates(env=env)


def _pretty_json(text: str) -> str:
    """Tool-call arguments as indented JSON when they are JSON, else as given."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


def create_app(db: str) -> ASGIApp:
    """The viewer over the store at ``db`` (a SQLite path or a PostgreSQL URL)."""
    templates = _templates()

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return templates.TemplateResponse(request, name, {"db": _label(db), **context}, status_code=status)

    def store() -> Store:
        return open_store(db, create=False, readonly=True)

    listed: dict[int, list[queries.SessionRow]] = {}

    def session_rows(s: Store) -> list[queries.SessionRow]:
        # The rows are a function of the log up to its head, which only grows: one listing per head
        # (pricing every billed call again on each visit is what a listing costs).
        head = s.head_position()
        if head not in listed:
            listed.clear()
            listed[head] = queries.session_rows(s)
        return listed[head]

    def sessions_page(request: Request) -> Response:
        with store() as s:
            rows = session_rows(s)
        query = request.query_params.get("q", "")
        found = queries.search(rows, query)
        pages = max(1, math.ceil(len(found) / PAGE_SIZE))
        number = _int_param(request, "page", 1, 1, pages)
        shown = found[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]
        return page(request, "sessions.html", rows=shown, total=len(rows), found=len(found), query=query,
                    page=number, pages=pages)  # fmt: skip

    def session_page(request: Request) -> Response:
        sid = request.path_params["sid"]
        with store() as s:
            view = queries.timeline(s, sid)
        pages = max(1, math.ceil(len(view.items) / TIMELINE_PAGE))
        event = request.query_params.get("event")
        if event is not None:  # the page that shows this event (links from a call's messages)
            index = view.index_of(event)
            if index is None:
                raise HTTPException(404, f"session {sid!r} shows no event {event!r}")
            number = index // TIMELINE_PAGE + 1
        else:
            number = _int_param(request, "page", 1, 1, pages)
        shown = view.items[(number - 1) * TIMELINE_PAGE : number * TIMELINE_PAGE]
        return page(request, "session.html", sid=sid, t=view, items=shown, page=number, pages=pages,
                    first=(number - 1) * TIMELINE_PAGE)  # fmt: skip

    def call_page(request: Request) -> Response:
        sid, number = request.path_params["sid"], request.path_params["n"]
        with store() as s:
            view = queries.call_view(s, sid, number)
        return page(request, "call.html", sid=sid, v=view, policy=queries.REPLAY_POLICY)

    def artifact_page(request: Request) -> Response:
        sid, aid = request.path_params["sid"], request.path_params["aid"]
        with store() as s:
            view = queries.artifact_view(s, sid, aid)
        return page(request, "artifact.html", sid=sid, a=view)

    def spend_page(request: Request) -> Response:
        sid = request.path_params.get("sid")
        with store() as s:
            if sid is not None:
                s.require_session(sid)
            data = queries.spend(s, sid)
        recent = data.calls[-SPEND_CALLS:]
        skipped = len(data.calls) - len(recent)
        return page(request, "spend.html", sid=sid, spend=data, recent=recent, skipped=skipped,
                    charts=_charts(data, recent))  # fmt: skip

    def or_timeline(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """A sub-page of a session, or, when no session has the id it parsed, the timeline of a
        session whose id only looks like one (``a/spend``: an id may hold slashes)."""

        def endpoint(request: Request) -> Response:
            try:
                return handler(request)
            except UnknownSessionError:
                whole = request.scope["path"].removeprefix("/sessions/")
                with store() as s:
                    if s.head_version(whole) == 0:
                        raise
                request.scope["path_params"] = {"sid": whole}
                return session_page(request)

        return endpoint

    def api_sessions(request: Request) -> Response:
        with store() as s:
            rows = session_rows(s)
        return _Json([r.to_dict() for r in queries.search(rows, request.query_params.get("q", ""))])

    def api_events(request: Request) -> Response:
        with store() as s:
            return _Json(queries.events_data(s, request.path_params["sid"]))

    def api_call(request: Request) -> Response:
        with store() as s:
            view = queries.call_view(s, request.path_params["sid"], request.path_params["n"])
        return _Json(view.to_dict())

    def api_spend(request: Request) -> Response:
        sid = request.path_params.get("sid")
        with store() as s:
            if sid is not None:
                s.require_session(sid)
            return _Json(queries.spend(s, sid).to_dict())

    async def not_found(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HTTPException):  # an unknown session, call or artifact
            return _error(request, 404, str(exc))
        message = str(exc.detail)
        if exc.detail == "Not Found":  # Starlette's own: no route
            message = f"nothing at {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed: the viewer only reads (GET and HEAD)"
        return _error(request, exc.status_code, message, exc.headers)

    async def store_error(request: Request, exc: Exception) -> Response:
        return _error(request, 500, str(exc))

    async def server_error(request: Request, exc: Exception) -> Response:
        return _error(request, 500, "the viewer failed on this page (the server's log has the details)")

    def _error(
        request: Request, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        kind = _ERROR_TYPES.get(status, "error")
        if request.url.path.startswith("/api/"):
            body = {"error": {"type": kind, "status": status, "message": message}}
            return _Json(body, status_code=status, headers=headers)
        context = {"db": _label(db), "status_code": status, "message": message}
        return templates.TemplateResponse(request, "error.html", context, status_code=status, headers=headers)

    routes = [
        Route("/", sessions_page),
        Route("/spend", spend_page),
        Route("/sessions/{sid:path}/calls/{n:int}", or_timeline(call_page)),
        Route("/sessions/{sid:path}/artifacts/{aid}", or_timeline(artifact_page)),
        Route("/sessions/{sid:path}/spend", or_timeline(spend_page)),
        Route("/sessions/{sid:path}", session_page),
        Route("/api/sessions", api_sessions),
        Route("/api/spend", api_spend),
        Route("/api/sessions/{sid:path}/events", api_events),
        Route("/api/sessions/{sid:path}/calls/{n:int}", api_call),
        Route("/api/sessions/{sid:path}/spend", api_spend),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: not_found,
        UnknownSessionError: not_found,
        UnknownArtifactError: not_found,
        queries.UnknownCallError: not_found,
        StoreError: store_error,
        Exception: server_error,
    }
    # Outside Starlette's own error middleware, so a 500 carries the headers too.
    return _SecurityHeaders(Starlette(routes=routes, exception_handlers=handlers))


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise HTTPException(400, f"{name} must be a whole number from {low} to {high}")
    return int(raw)


def _label(db: str) -> str:
    """The store's name for the page header (a URL's password never shown)."""
    if "://" in db:
        scheme, rest = db.split("://", 1)
        return f"{scheme}://{rest.rsplit('@', 1)[-1]}"
    return Path(db).name


def _charts(data: queries.Spend, recent: list[CallSpend]) -> dict[str, Any]:
    first = len(data.calls) - len(recent) + 1
    numbered = [(first + i, c) for i, c in enumerate(recent) if c.category == "agent"]
    calls = [c for _, c in numbered]
    labels = [f"#{n}" for n, _ in numbered]
    per_call = svg.bar_chart(
        "Prompt tokens per call: billed vs turnlog's estimate"
        + (
            f" (the newest {len(recent):,} of {len(data.calls):,} calls)"
            if len(recent) < len(data.calls)
            else ""
        ),
        labels,
        [
            svg.Series("billed input", "billed", [c.input for c in calls]),
            svg.Series("estimated input", "estimated", [c.estimated_input for c in calls]),
            svg.Series("output", "output", [c.output for c in calls]),
        ],
    )
    days = [d.day for d in data.days]
    per_day = svg.bar_chart(
        "Cost per day (USD)",
        days,
        [
            svg.Series("priced by turnlog", "priced", [d.cost for d in data.days]),
            svg.Series("recorded by the source", "billed", [d.billed_cost for d in data.days]),
        ],
        axis=svg.usd_label,
        value=svg.usd_label,
    )
    tokens_day = svg.bar_chart(
        "Tokens per day",
        days,
        [
            svg.Series("billed input", "billed", [d.input for d in data.days]),
            svg.Series("estimated input", "estimated", [d.estimated_input for d in data.days]),
            svg.Series("output", "output", [d.output for d in data.days]),
        ],
    )
    return {"per_call": per_call, "per_day": per_day, "tokens_day": tokens_day}
