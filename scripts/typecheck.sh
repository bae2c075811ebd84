#!/usr/bin/env bash
# Type-checks the installed gpuforge package (strict mypy, settings in pyproject.toml).
# mypy runs from outside the checkout: inside it, ./gpuforge would shadow the
# installed package, whose gpuforge.images/.components/.policies live in other folders.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/.venv"
exec "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p gpuforge "$@"
