#!/usr/bin/env bash
# Re-links the strict editable install after files are added or removed
# (strict mode links files, not folders). Serialised with a lock so that
# several shells can call it at once.
set -euo pipefail
cd "$(dirname "$0")/.."
exec flock /tmp/gpuforge-dev-sync.lock .venv/bin/pip install -q --disable-pip-version-check --no-deps \
    -e ".[dev]" --config-settings editable_mode=strict
