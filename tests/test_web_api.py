"""The web viewer's pages and JSON API (Starlette's TestClient over the real app and a real store
file): every endpoint, what each shows against the projections it reads, 404s, the escaping of
stored HTML, the security headers, GET/HEAD only, a read-only store left byte for byte as it was
(and a real `turnlog serve` process that cannot write to it), and the API on PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import escape

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'turnlog[web]')")
from starlette.testclient import TestClient

from tests.helpers.postgres import drop_schema, new_schema_name, pg_url, require_pg
from tests.helpers.web_store import HOSTILE, RECORDED_BUDGET, SCRIPT, fill
from tests.test_readonly import AS_ROOT, hashes, make_read_only, public_dir, reader  # noqa: F401
from turnlog import open_store
from turnlog.cli import cli
from turnlog.projections.context import PRIME_TOKENS, ContextPolicy, build_context
from turnlog.projections.formats import render
from turnlog.projections.replay import replay
from turnlog.projections.sessions import list_sessions
from turnlog.store import MessageAppended, SQLiteStore, UsageRecorded
from turnlog.web import create_app

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
ESCAPED = str(escape(SCRIPT))


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web") / "web.db"
    with SQLiteStore.open(path) as store:
        fill(store)
    return path


@pytest.fixture(scope="module")
def client(store_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(str(store_path))) as test_client:
        yield test_client


def url(session_id: str) -> str:
    return quote(session_id, safe="")


# --- the API ---------------------------------------------------------------------------------------


def test_api_sessions_lists_every_session_with_its_counts_and_billed_spend(
    client: TestClient, store_path: Path
) -> None:
    response = client.get("/api/sessions")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    data = {row["session_id"]: row for row in response.json()}
    with SQLiteStore.open(store_path) as store:
        infos = {i.session_id: i for i in list_sessions(store)}
        usage = [r.event for r in store.read_session("fix", own=True) if isinstance(r.event, UsageRecorded)]
    assert set(data) == set(infos) == {"fix", "fix-retry", HOSTILE}
    fix = data["fix"]
    assert fix["title"] == "Fix currency rounding in invoice totals"
    assert fix["tokens"] == infos["fix"].tokens and fix["events"] == infos["fix"].event_count
    assert fix["messages"] == 4 + 9 + 6 + 1  # user, assistant, tool returns, system
    assert fix["calls"] == len(usage) == 9
    assert fix["billed_input"] == sum(u.input_tokens for u in usage)
    assert fix["billed_output"] == sum(u.output_tokens for u in usage)
    assert fix["cost"] > 0 and data["fix-retry"]["parent"] == "fix" and data["fix-retry"]["calls"] == 0
    assert [r["session_id"] for r in client.get("/api/sessions?q=RETRY").json()] == ["fix-retry"]


def test_api_events_is_what_turnlog_log_json_prints(client: TestClient, store_path: Path) -> None:
    for session in ("fix", "fix-retry", HOSTILE):
        logged = CliRunner().invoke(cli, ["--db", str(store_path), "log", session, "--json"])
        assert logged.exit_code == 0, logged.output
        assert client.get(f"/api/sessions/{url(session)}/events").json() == json.loads(logged.output)


def test_api_call_of_a_recorded_manifest_has_exactly_the_messages_sent(
    client: TestClient, store_path: Path
) -> None:
    data = client.get("/api/sessions/fix/calls/8").json()
    assert data["source"] == "manifest" and data["budget"] == RECORDED_BUDGET and data["run_id"] == "run-4"
    with SQLiteStore.open(store_path) as store:
        built = build_context(store, "fix", ContextPolicy(budget=RECORDED_BUDGET, max_tool_tokens=200),
                              at=data["at_position"])  # fmt: skip
    assert [m["content"] for m in data["messages"]] == [m.content for m in built.messages]
    assert [m["tokens"] for m in data["messages"]] == [e.tokens for e in built.entries]
    assert sum(m["tokens"] for m in data["messages"]) + PRIME_TOKENS == data["total_tokens"]
    assert [m["mode"] for m in data["messages"]].count("capped") >= 1
    assert data["billed"] == {"input": 1900, "output": 12}
    assert data["estimated_input"] == built.total_tokens and data["cost"] > 0


def test_api_call_without_a_manifest_is_rebuilt_as_turnlog_replay_does(
    client: TestClient, store_path: Path
) -> None:
    data = client.get("/api/sessions/fix/calls/2").json()
    with SQLiteStore.open(store_path) as store:
        call = replay(store, "fix", ContextPolicy(budget=8000, max_tool_tokens=1000))[1]
    assert data["source"] == "rebuilt" and data["budget"] == 8000
    assert call.context is not None
    assert [m["content"] for m in data["messages"]] == [m.content for m in call.context.messages]
    assert data["total_tokens"] == call.total_tokens and data["added"] == call.added
    assert data["billed"] == {"input": 2950, "output": 61}
    assert render(call.context.messages, "openai")[0]["role"] == data["messages"][0]["role"] == "system"


@pytest.mark.parametrize(
    "path",
    [
        "/api/sessions/nope/events",
        "/api/sessions/nope/calls/1",
        "/api/sessions/fix/calls/0",
        "/api/sessions/fix/calls/10",
        "/api/sessions/nope/spend",
        "/api/nothing",
    ],
)
def test_api_unknown_ids_are_json_404s(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404 and response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["status"] == 404 and error["type"] == "not_found" and error["message"]


def test_api_spend_per_call_and_day(client: TestClient) -> None:
    data = client.get("/api/sessions/fix/spend").json()
    assert len(data["calls"]) == 9 and data["totals"]["calls"] == 9
    assert data["totals"]["input"] == sum(c["input"] for c in data["calls"])
    assert all(c["estimated_input"] is not None for c in data["calls"])
    assert sum(d["input"] for d in data["days"]) == data["totals"]["input"]
    everything = client.get("/api/spend").json()
    assert everything["totals"]["calls"] == 10  # the hostile session's call too


# --- the pages -------------------------------------------------------------------------------------


def test_session_list_search_and_links(client: TestClient) -> None:
    page = client.get("/").text
    for session in ("fix", "fix-retry", HOSTILE):
        assert f'href="/sessions/{url(session)}"' in page
    assert "Fix currency rounding in invoice totals" in page and "133,588" in page  # billed input
    found = client.get("/?q=currency").text
    assert 'href="/sessions/fix"' in found and 'href="/sessions/fix-retry"' not in found
    assert "1 of 3 sessions match" in found
    assert "No session matches." in client.get("/?q=zzz").text
    assert client.get("/?page=2").status_code == 400  # one page only


def test_more_than_a_hundred_sessions_are_paginated(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with SQLiteStore.open(path) as store:
        for n in range(205):
            store.append(f"s-{n:03}", [MessageAppended(role="user", content=str(n))])
    client = TestClient(create_app(str(path)))
    first, last = client.get("/").text, client.get("/?page=3").text
    assert first.count('class="sid"') == 100 and last.count('class="sid"') == 5
    assert "page 1 of 3" in first and "s-204" in first and "s-000" in last  # newest first
    assert client.get("/?page=4").status_code == 400 and client.get("/?page=x").status_code == 400


def test_timeline_shows_every_event_with_calls_returns_todos_artifacts_summaries_and_forks(
    client: TestClient, store_path: Path
) -> None:
    page = client.get("/sessions/fix").text
    with SQLiteStore.open(store_path) as store:
        records = store.read_session("fix")
    for record in records:
        if record.type != "tool_returned":  # a return is shown with its call
            assert f'id="e-{record.event_id}"' in page
    assert page.count('id="e-demo-0008"') == 1  # the return, under its call
    for number in range(1, 10):
        assert f'href="/sessions/fix/calls/{number}"' in page
    assert "Reproduce the wrong totals with the test suite: new → in_progress" in page
    assert "summary · level 0 · versions" in page
    assert 'href="/sessions/fix-retry"' in page and "branches off after version 16" in page
    assert "<details" in page  # long tool outputs are folded
    assert "/sessions/fix/artifacts/" in page
    fork = client.get("/sessions/fix-retry").text
    assert 'href="/sessions/fix"' in fork and "after its version 16" in fork and "Try another way." in fork


def test_call_page_shows_the_budget_each_message_and_billed_vs_estimated(client: TestClient) -> None:
    page = client.get("/sessions/fix/calls/8").text
    data = client.get("/api/sessions/fix/calls/8").json()
    assert "of a 4,000-token budget" in page and "These are exactly the messages sent" in page
    assert page.count('<li class="msg ') == len(data["messages"])
    for message in data["messages"]:
        assert f'<span class="tokens">{message["tokens"]:,}</span>' in page
    assert "1,900" in page and f"estimate {data['estimated_input']:,}" in page
    rebuilt = client.get("/sessions/fix/calls/2").text
    assert "No manifest was recorded for this call" in rebuilt and "budget of 8,000" in rebuilt
    summarized = client.get("/sessions/fix/calls/9").text
    assert "mode-summary" in summarized and "summarized" in summarized


def test_artifact_page_shows_the_full_content(client: TestClient, store_path: Path) -> None:
    with SQLiteStore.open(store_path) as store:
        from turnlog.projections.artifacts import list_artifacts

        artifacts = list_artifacts(store, "fix")
        biggest = max(artifacts, key=lambda a: a.size)
        content = store.get_blob(biggest.artifact_id).text
    page = client.get(f"/sessions/fix/artifacts/{biggest.artifact_id}").text
    assert escape(content) in page and biggest.size > 10_000
    assert client.get(f"/sessions/{url(HOSTILE)}/artifacts/{biggest.artifact_id}").status_code == 404
    assert client.get("/sessions/fix/artifacts/" + "0" * 64).status_code == 404


def test_spend_pages_draw_svg_charts(client: TestClient) -> None:
    for path in ("/spend", "/sessions/fix/spend"):
        page = client.get(path).text
        assert page.count("<svg") == 3 and "billed input" in page and "estimated input" in page
    assert "No billed model call" in client.get("/sessions/fix-retry/spend").text


@pytest.mark.parametrize(
    "path",
    ["/sessions/nope", "/sessions/nope/calls/1", "/sessions/fix/calls/99", "/sessions/nope/spend", "/x"],
)
def test_unknown_pages_are_404_pages(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")
    assert "404 · Not found" in response.text


# --- security --------------------------------------------------------------------------------------


def test_stored_html_is_shown_as_text_everywhere(client: TestClient) -> None:
    sid = url(HOSTILE)
    pages = {
        "list": client.get("/").text,
        "timeline": client.get(f"/sessions/{sid}").text,
        "call": client.get(f"/sessions/{sid}/calls/1").text,
        "spend": client.get(f"/sessions/{sid}/spend").text,
        "unknown": client.get(f"/sessions/{url(SCRIPT)}").text,
    }
    for name, page in pages.items():
        assert "<script" not in page.lower(), name
        assert "evil<b>" not in page, name
    timeline = pages["timeline"]
    for text in ("user says", "tool says", "artifact says", "answer", "title"):
        assert f"{text} {ESCAPED}" in timeline, text
    assert escape(f'"cmd": "{SCRIPT}"') in timeline  # the tool call's arguments
    assert f"page{ESCAPED}.html" in timeline  # the artifact's name
    assert "evil&lt;b&gt;" in pages["list"] and f"title {ESCAPED}" in pages["list"]
    assert f"user says {ESCAPED}" in pages["call"]
    artifact = client.get(f"/api/sessions/{sid}/events").json()[4]["event"]["artifact_id"]
    assert f"artifact says {ESCAPED}" in client.get(f"/sessions/{sid}/artifacts/{artifact}").text


@pytest.mark.parametrize("path", ["/", "/sessions/fix", "/api/sessions", "/static/style.css", "/nope"])
def test_every_response_has_the_security_headers(client: TestClient, path: str) -> None:
    for response in (client.get(path), client.post(path)):
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_only_get_and_head(client: TestClient, store_path: Path) -> None:
    before = hashes(store_path.parent)
    paths = ["/", "/spend", "/sessions/fix", "/sessions/fix/calls/1", "/api/sessions",
             "/api/sessions/fix/events", "/api/sessions/fix/calls/1", "/static/style.css"]  # fmt: skip
    for path in paths:
        assert client.head(path).status_code == 200, path
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            response = client.request(method, path)
            assert response.status_code == 405 and "GET" in response.headers["allow"], (method, path)
            if path.startswith("/api/"):
                assert response.json()["error"]["type"] == "method_not_allowed"
    assert hashes(store_path.parent) == before


def test_a_read_only_store_is_served_and_never_changed(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    with SQLiteStore.open(folder / "web.db") as store:
        fill(store)
    for path in [*folder.iterdir(), folder]:
        path.chmod(0o444 if path.is_file() else 0o555)
    try:
        before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}
        client = TestClient(create_app(str(folder / "web.db")))
        for path in ("/", "/sessions/fix", "/sessions/fix/calls/8", "/spend", "/api/sessions/fix/calls/3"):
            assert client.get(path).status_code == 200, path
        after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}
        if AS_ROOT:  # modes do not bind root: SQLite may add its -shm and an empty -wal beside the file
            assert after["web.db"] == before["web.db"] and set(after) <= {
                "web.db",
                "web.db-wal",
                "web.db-shm",
            }
            assert after.get("web.db-wal", (0, b""))[1] == b""
        else:
            assert after == before
    finally:
        for path in [folder, *folder.iterdir()]:
            path.chmod(0o755)


def test_a_real_serve_process_that_cannot_write_the_store(public_dir: Path) -> None:  # noqa: F811
    """`turnlog serve` as a process unable to write the store's folder (as root: in a mount
    namespace where the folder is a read-only bind mount), with committed events still in the -wal."""
    import httpx

    db = public_dir / "web.db"
    writer = SQLiteStore.open(db)
    fill(writer)
    writer.conn.execute("PRAGMA wal_autocheckpoint = 0")
    writer.append("late", [MessageAppended(role="user", content="only in the wal")])
    prefix = make_read_only(public_dir)
    before = hashes(public_dir)
    command = [*prefix, sys.executable, "-c", "from turnlog.cli import main; main()", "--db", str(db),
               "serve", "--port", "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        base = server.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:"), server.stderr.read() if server.stderr else ""
        sessions = httpx.get(base + "api/sessions", timeout=60).json()
        assert {s["session_id"] for s in sessions} == {"fix", "fix-retry", HOSTILE, "late"}
        assert httpx.get(base + "sessions/late", timeout=60).status_code == 200
        assert httpx.get(base + "sessions/fix/calls/8", timeout=60).status_code == 200
        server.terminate()
        server.wait(timeout=60)
        assert hashes(public_dir) == before  # before the writer closes (its close checkpoints)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=60)
        writer.close()


# --- PostgreSQL ------------------------------------------------------------------------------------


def test_the_api_on_postgresql() -> None:
    require_pg()
    schema = new_schema_name()
    target = f"{pg_url()}?schema={schema}"
    try:
        with open_store(target) as store:
            fill(store)
        client = TestClient(create_app(target))
        sessions = {s["session_id"]: s for s in client.get("/api/sessions").json()}
        assert set(sessions) == {"fix", "fix-retry", HOSTILE} and sessions["fix"]["calls"] == 9
        events = client.get("/api/sessions/fix/events").json()
        assert [e["position"] for e in events] == sorted(e["position"] for e in events)
        call = client.get("/api/sessions/fix/calls/8").json()
        assert call["source"] == "manifest" and call["budget"] == RECORDED_BUDGET and call["messages"]
        assert client.get("/api/sessions/nope/events").status_code == 404
        page = client.get("/sessions/fix").text
        assert "summary · level 0" in page and "password" not in page
    finally:
        drop_schema(schema)


def test_a_long_timeline_is_paged_and_an_event_finds_its_page(tmp_path: Path) -> None:
    from turnlog.store import ToolCall, ToolReturned
    from turnlog.web import app

    path = tmp_path / "long.db"
    with SQLiteStore.open(path) as store:
        for n in range(1100):
            store.append("long", [MessageAppended(role="user", content=f"turn {n}", event_id=f"t-{n}")])
        store.append(
            "long",
            [
                MessageAppended(role="assistant", tool_calls=(ToolCall(id="c", name="ls"),), event_id="asks"),
                ToolReturned(tool_call_id="c", content="a b", event_id="answer"),
            ],
        )
    client = TestClient(create_app(str(path)))
    first, second = client.get("/sessions/long").text, client.get("/sessions/long?page=2").text
    assert app.TIMELINE_PAGE == 1000 and first.count('<li id="e-') == 1000 and "page 1 of 2" in first
    assert 'id="e-t-999"' in first and 'id="e-t-1000"' not in first and "events 1–1000 of 1,101" in first
    assert second.count('<li id="e-') == 101 and 'id="e-t-1000"' in second
    assert 'id="e-t-1000"' in client.get("/sessions/long?event=t-1000").text
    assert 'id="e-t-5"' in client.get("/sessions/long?event=t-5").text
    assert 'id="e-answer"' in client.get("/sessions/long?event=answer").text  # a return: its call's page
    missing = client.get("/sessions/long?event=nope")
    assert (
        missing.status_code == 404 and "session &#39;long&#39; shows no event &#39;nope&#39;" in missing.text
    )
    assert client.get("/sessions/long?page=3").status_code == 400


def test_a_spend_page_lists_the_newest_calls_and_the_json_all(tmp_path: Path) -> None:
    path = tmp_path / "calls.db"
    with SQLiteStore.open(path) as store:
        store.append(
            "s", [UsageRecorded(model="gpt-4o", input_tokens=n, output_tokens=1) for n in range(510)]
        )
    client = TestClient(create_app(str(path)))
    page = client.get("/sessions/s/spend").text
    assert "the newest 500 of 510: the JSON has them all" in page and "(the newest 500 of 510 calls)" in page
    per_call = page.split("<svg")[1]
    assert per_call.count('<rect class="bar billed"') == 500 + 1  # the newest calls, and the legend
    assert "<td>11</td>" in page and "<td>10</td>" not in page  # numbered as in the whole list
    assert len(client.get("/api/sessions/s/spend").json()["calls"]) == 510


# --- the command -----------------------------------------------------------------------------------

SERVE = [sys.executable, "-c", "from turnlog.cli import main; main()"]


def test_serve_prints_its_url_first_and_warns_when_not_on_loopback(store_path: Path) -> None:
    import httpx

    for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
        command = [*SERVE, "--db", str(store_path), "serve", "--host", host, "--port", "0", "--json"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None and process.stderr is not None
            url = json.loads(process.stdout.readline())["url"]
            assert url.startswith(f"http://{host}:") and url.endswith("/")
            port = int(url.rsplit(":", 1)[1].rstrip("/"))
            assert httpx.get(f"http://127.0.0.1:{port}/api/sessions", timeout=60).status_code == 200
        finally:
            process.terminate()
            _, err = process.communicate(timeout=60)
        assert ("warning: listening on 0.0.0.0, not on a loopback address" in err) is warned, err
        assert "Traceback" not in err


def test_serve_errors_are_one_line(tmp_path: Path, store_path: Path) -> None:
    import socket

    missing = subprocess.run([*SERVE, "--db", str(tmp_path / "none.db"), "serve", "--port", "0"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("Error: ") and len(missing.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.db").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run([*SERVE, "--db", str(store_path), "serve", "--port", str(port)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert busy.returncode == 1 and busy.stderr.strip() == (
        f"Error: cannot listen on 127.0.0.1 port {port}: Address already in use"
    )
    bad = subprocess.run([*SERVE, "--db", str(store_path), "serve", "--host", "no such host", "--json"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "--host" in bad.stdout + bad.stderr and "Traceback" not in bad.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=80))
def test_any_stored_text_is_shown_escaped(tmp_path: Path, text: str) -> None:
    path = tmp_path / "any.db"
    with SQLiteStore.open(path) as store:
        session = f"s-{store.head_position()}"
        (record,) = store.append(session, [MessageAppended(role="user", content=text)])
    with TestClient(create_app(str(path))) as client:
        page = client.get(f"/sessions/{session}").text
        events = client.get(f"/api/sessions/{session}/events").json()
    item = page.split(f'<li id="e-{record.event_id}"', 1)[1]
    shown = re.search(r'<pre class="content">(.*?)</pre>', item, re.DOTALL)
    assert shown is not None and shown.group(1) == str(escape(text))  # the text, and no markup
    assert events[0]["event"]["content"] == text


def test_session_ids_with_slashes_and_url_characters(tmp_path: Path) -> None:
    ids = ["a/b", "100%", "q?x=1", "h#1", "ü/é", "x/calls/1", "a/spend", "a/artifacts/x"]
    path = tmp_path / "ids.db"
    with SQLiteStore.open(path) as store:
        for sid in ids:
            store.append(sid, [MessageAppended(role="user", content=f"said in {sid}"),
                               UsageRecorded(model="gpt-4o", input_tokens=5, output_tokens=1)])  # fmt: skip
    client = TestClient(create_app(str(path)))
    listing = client.get("/").text
    for sid in ids:
        assert f'href="/sessions/{url(sid)}"' in listing
        timeline = client.get(f"/sessions/{url(sid)}")
        assert timeline.status_code == 200 and str(escape(f"said in {sid}")) in timeline.text, sid
        assert client.get(f"/sessions/{url(sid)}/calls/1").status_code == 200, sid
        assert client.get(f"/sessions/{url(sid)}/spend").status_code == 200, sid
        assert client.get(f"/api/sessions/{url(sid)}/events").json()[0]["session_id"] == sid
    assert client.get("/sessions/nope/spend").status_code == 404
