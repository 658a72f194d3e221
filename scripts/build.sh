#!/usr/bin/env bash
# Main job: set up, then run doit on the example knowledge base.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/doit "$@"
