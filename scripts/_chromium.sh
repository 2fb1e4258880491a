# Sourced by scripts/test: the viewer's browser tests (tests/test_web_browser.py) drive the system's
# headless Chromium through its chromedriver. When either is missing and this runs as root on a
# Debian-like system, they are installed with apt-get (one update, then one install), saying so;
# otherwise (or when apt-get fails) nothing stops here, and the browser tests fail with one line
# saying what is missing.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing Chromium and chromedriver for the browser tests (apt-get update, apt-get install -y chromium chromium-driver)" >&2
        if apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >&2; then
            echo "setup: done ($(chromium --version 2>/dev/null || echo chromium))" >&2
        else
            echo "setup: apt-get could not install chromium and chromium-driver: the browser tests will fail" >&2
        fi
    else
        echo "setup: chromium or chromedriver is missing and cannot be installed here (it needs root and apt-get): the browser tests will fail; install chromium and chromium-driver" >&2
    fi
fi
