# Sourced by scripts/demo and scripts/test: creates .venv in the repository on first use and
# installs turnlog into it (editable), so a fresh clone needs nothing but Python 3.11+.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=".venv/.turnlog-installed-$1"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$1]" >&2
    touch "$stamp"
fi
