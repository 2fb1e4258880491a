"""The viewer in a real browser: headless Chromium (the system's, driven by its chromedriver through
selenium) over a real `turnlog serve` process. Every page kind loads with no console error and no
Content-Security-Policy violation, stored HTML stays text (no alert, the text visible), a person can
click from the session list to a timeline to a model call, and a screenshot of each page kind is
saved under tests/artifacts/ (git-ignored; CI keeps it as an artifact).

scripts/test installs Chromium and chromedriver (scripts/_chromium.sh) where they are missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.helpers.web_store import HOSTILE, SCRIPT, fill
from turnlog.store import SQLiteStore

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'turnlog[web]')")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).parent / "artifacts"
TIMEOUT = 120


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `turnlog serve` on a free port; yields its URL (the first line it prints)."""
    db = tmp_path_factory.mktemp("browser") / "web.db"
    with SQLiteStore.open(db) as store:
        fill(store)
    command = [sys.executable, "-c", "from turnlog.cli import main; main()", "--db", str(db), "serve",
               "--port", "0"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read()
        yield url.rstrip("/")
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed: scripts/test installs chromium and chromium-driver"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1600", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


def visit(browser: Any, url: str) -> list[dict[str, Any]]:
    """Load ``url``; return the console messages of warning level or worse it caused (a CSP
    violation is one: "Refused to ..."), but the page's own 404 status when it is a 404 page."""
    browser.get_log("browser")  # drop what earlier pages left
    browser.get(url)
    browser.find_element("css selector", "main")
    not_found = browser.find_elements("css selector", "h1")[0].text.startswith("404")
    own_404 = f"{url} - Failed to load resource: the server responded with a status of 404 (Not Found)"
    return [
        e
        for e in browser.get_log("browser")
        if e["level"] in ("WARNING", "SEVERE") and not (not_found and e["message"] == own_404)
    ]


def shoot(browser: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(max(int(height), 800), 6000))
    assert browser.save_screenshot(str(ARTIFACTS / f"viewer-{name}.png"))
    browser.set_window_size(1280, 1600)


PAGES = {
    "sessions": "/",
    "sessions-search": "/?q=fix",
    "timeline": "/sessions/fix",
    "fork-timeline": "/sessions/fix-retry",
    "call-recorded": "/sessions/fix/calls/8",
    "call-rebuilt": "/sessions/fix/calls/3",
    "call-summarized": "/sessions/fix/calls/9",
    "spend": "/spend",
    "session-spend": "/sessions/fix/spend",
    "hostile-timeline": f"/sessions/{quote(HOSTILE, safe='')}",
    "not-found": "/sessions/nope",
}


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_kind_loads_without_console_errors_or_csp_violations(
    browser: Any, server: str, name: str
) -> None:
    problems = visit(browser, server + PAGES[name])
    assert problems == [], problems
    stylesheet = browser.execute_script(
        "return getComputedStyle(document.querySelector('header.top')).backgroundColor"
    )
    assert stylesheet == "rgb(29, 35, 41)"  # the stylesheet loaded (CSP allows 'self')
    shoot(browser, name)


def test_the_artifact_page(browser: Any, server: str) -> None:
    visit(browser, server + "/sessions/fix")
    link = browser.find_element("partial link text", "view full content")
    href = link.get_attribute("href")
    assert visit(browser, href) == []
    assert browser.find_element("css selector", "h1").text == "invoice/money.py"  # the first one written
    content = browser.find_element("css selector", "pre.full").text
    assert content.startswith('"""Money amounts and their rounding, per currency."""')
    assert content.endswith("return (subtotal + subtotal * tax_rate).rounded()")
    shoot(browser, "artifact")


def test_the_console_check_sees_a_csp_violation(browser: Any, server: str) -> None:
    """The check above can fail: an image from another origin is refused by the policy, and the
    refusal is on the console."""
    visit(browser, server + "/")
    browser.execute_script(
        "const img = document.createElement('img'); img.src = 'http://example.invalid/x.png';"
        "document.body.appendChild(img);"
    )
    browser.execute_script("return new Promise(r => setTimeout(r, 300))")
    messages = [e["message"] for e in browser.get_log("browser")]
    assert any("Content Security Policy" in m for m in messages), messages


def test_stored_html_is_text_not_markup(browser: Any, server: str) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    for path in (f"/sessions/{quote(HOSTILE, safe='')}", f"/sessions/{quote(HOSTILE, safe='')}/calls/1", "/"):
        assert visit(browser, server + path) == []
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
        assert browser.find_elements("css selector", "main script") == []
        text = browser.find_element("css selector", "main").text
        assert SCRIPT in text, path
    assert visit(browser, server + f"/sessions/{quote(HOSTILE, safe='')}") == []
    body = browser.find_element("css selector", "main").text
    for said in ("user says", "tool says", "artifact says", "answer", "title"):
        assert f"{said} {SCRIPT}" in body, said
    assert browser.find_element("css selector", "h1").text.startswith(HOSTILE)  # the id's <b> is text


def test_navigate_from_the_list_to_a_timeline_to_a_call(browser: Any, server: str) -> None:
    visit(browser, server + "/")
    browser.find_element("link text", "fix").click()
    assert browser.current_url == server + "/sessions/fix"
    assert browser.find_element("css selector", "h1").text.startswith("fix")
    browser.find_element("link text", "call 8").click()
    assert browser.current_url == server + "/sessions/fix/calls/8"
    assert browser.find_element("css selector", "h1").text.startswith("Model call 8")
    assert "4,000-token budget" in browser.find_element("css selector", ".cards").text
    browser.find_element("partial link text", "call 9").click()
    assert browser.current_url == server + "/sessions/fix/calls/9"
    browser.find_element("link text", "fix").click()  # the breadcrumb back to the timeline
    assert browser.current_url == server + "/sessions/fix"
    # Search from the list.
    visit(browser, server + "/")
    field = browser.find_element("css selector", "input[name=q]")
    field.send_keys("retry")
    field.submit()
    # submit() returns before the answer has loaded: wait for the searched page, not the old list.
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(
        lambda b: "q=retry" in b.current_url and b.execute_script("return document.readyState") == "complete"
    )
    rows = browser.find_elements("css selector", "table.sessions tbody tr")
    assert len(rows) == 1 and "fix-retry" in rows[0].text


def test_long_tool_outputs_fold_and_unfold(browser: Any, server: str) -> None:
    visit(browser, server + "/sessions/fix")
    folded = browser.find_element("css selector", ".return details.long")
    assert folded.get_attribute("open") is None
    hidden = folded.find_element("css selector", "pre")
    assert not hidden.is_displayed()
    folded.find_element("css selector", "summary").click()
    assert folded.get_attribute("open") is not None and hidden.is_displayed()
