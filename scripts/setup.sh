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
  # torch first, pinned: its CPU wheel is on local disk; an unpinned torch (pulled in by
  # sentence-transformers) would resolve to a multi-GB CUDA build.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
  rm -f .venv/.ctxfst-setup-*
  touch "$stamp"
fi
