# Sourced by scripts/demo and scripts/test: creates .venv in the repository on first use and
# installs turnlog into it (editable) with the extras named in $1, so a fresh clone needs nothing but
# Python 3.11+. It says what it installs, since a first run takes a minute or more.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv in $repo with $("$python" --version 2>&1)" >&2
    "$python" -m venv .venv
fi
stamp=".venv/.turnlog-installed-$1"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing turnlog (editable) with the '$1' extras into .venv; the first run takes a minute or two" >&2
    .venv/bin/python -m pip install -qq --disable-pip-version-check -e ".[$1]" >&2
    touch "$stamp"
    echo "setup: done" >&2
fi
