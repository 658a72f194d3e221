#!/usr/bin/env bash
# Set up, then lint (ruff, with pyproject.toml's rules) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
set +e
.venv/bin/ruff check
linted=$?
.venv/bin/python -m pytest "$@"
status=$?
set -e
# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
if [ "$status" -eq 0 ] && [ "$linted" -ne 0 ]; then
  echo "ruff check found problems (above)" >&2
  exit 1
fi
exit "$status"
