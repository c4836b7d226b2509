#!/usr/bin/env bash
# Builds the peer comparison's own virtualenv (benchmarks/peers/.venv): the pinned peers
# from requirements.txt, then sessionkit from this repository (editable). Not part of
# sessionkit's dependencies. Idempotent: a second run only checks the pins.
#   PYTHON=/path/to/python3.11 benchmarks/peers/setup.sh   (default: python3 on PATH)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
python="${PYTHON:-$(command -v python3)}"

if ! command -v uv >/dev/null 2>&1; then
  echo "setup.sh: uv is required (pip install uv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  uv venv --quiet --no-python-downloads --python "$python" "$venv"
fi
uv pip install --quiet --python "$venv/bin/python" -r "$here/requirements.txt"
uv pip install --quiet --python "$venv/bin/python" -e "$root"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("sessionkit", "openai-agents", "langchain-community", "langgraph",
             "langgraph-checkpoint-sqlite", "google-adk", "duckdb", "sqlalchemy", "aiosqlite"):
    print(f"{name:28s} {md.version(name)}")
PY
echo "ready: $venv/bin/python $here/run.py --quick"
