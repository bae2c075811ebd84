#!/usr/bin/env bash
# The test command: installs test dependencies, then lint, type check and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "==> mypy"
scripts/typecheck.sh
echo "==> shellcheck"
git ls-files -z '*.sh' | xargs -0 -r shellcheck
scripts/slurm-root.sh
scripts/monitoring-root.sh
scripts/kube-root.sh
echo "==> pytest"
.venv/bin/pytest "$@"
