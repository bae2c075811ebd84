#!/usr/bin/env bash
# Prepares a fresh machine for gpuforge: Debian's packer, shellcheck and gnupg, and a
# virtual environment in .venv with gpuforge installed from this checkout.
# Usage: scripts/bootstrap.sh EXTRAS   (EXTRAS: "local" for the demo, "dev" for tests)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local}"

missing=()
command -v packer >/dev/null 2>&1 || missing+=(packer)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
# The image scripts' key checks are tested against real gpg and keys the tests make.
command -v gpg >/dev/null 2>&1 || missing+=(gnupg)
if ((${#missing[@]})); then
    echo "==> installing Debian packages: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpuforge needs Python 3.11 or newer")'
[ -x .venv/bin/python ] || python3 -m venv .venv
echo "==> installing gpuforge[${extras}] into .venv"
# strict editable mode links files into a plain folder on sys.path, so mypy and
# pytest both resolve gpuforge.images -> images/ without an import hook.
.venv/bin/pip install -q --disable-pip-version-check -e ".[${extras}]" --config-settings editable_mode=strict
