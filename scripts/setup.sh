#!/usr/bin/env bash
# Idempotent set-up: a local virtual environment in .venv with ctxfst installed
# (editable) and its dev tools. Re-running does nothing unless the project's
# dependency files changed.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=".venv/.ctxfst-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
  rm -f .venv/.ctxfst-setup-*
  touch "$stamp"
fi
