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
    case "$1" in
        all) expect="several minutes: every extra, the frameworks and the benchmark peers included" ;;
        *) expect="about a minute" ;;
    esac
    # pip runs quietly (its own output is pages of "Requirement already satisfied"): say what it does
    # and how long it took instead, so a first run is never a silent wait.
    echo "setup: installing turnlog (editable) with the '$1' extras into .venv with pip; the first time takes $expect" >&2
    started=$SECONDS
    .venv/bin/python -m pip install -qq --disable-pip-version-check -e ".[$1]" >&2
    touch "$stamp"
    echo "setup: done in $((SECONDS - started)) s" >&2
fi
