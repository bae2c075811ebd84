#!/usr/bin/env bash
# Provides the real Kubernetes API server and etcd that tests/kubernetes runs (kube_cluster.py):
# - kube-apiserver: built from the Go module k8s.io/kubernetes at the kubelet version the image
#   matrices pin (images/matrices/*.yaml kubernetes.kubelet.version; every matrix that pins one must
#   pin the same, or this fails). That module's go.mod points every k8s.io/* staging module at
#   ./staging/src/k8s.io/<name> with a `replace`, and the staging folders are not in the module's
#   zip; each such replace is dropped and the module required at its published v0.<minor>.<patch>
#   instead (the staging repositories are tagged with the same release). k8s.io/sample-cli-plugin
#   and k8s.io/sample-controller are not on the proxy at any v0.35.x and nothing kube-apiserver
#   imports needs them: their requires are dropped. `go mod download` checks k8s.io/kubernetes and
#   the build every added module against the Go checksum database (GOSUMDB forced on below); the
#   binary must report the pinned version.
# - etcd: Debian testing (forky)'s etcd-server (3.5.x), read into a private apt folder and unpacked
#   with `dpkg -x`; nothing is installed on the host.
# Built in DIR.new and swapped in at the end; rebuilt only when the pin changes (the first line of
# DIR/.gpuforge-complete). Go's caches live in .cache/go (shared with scripts/monitoring-root.sh).
# Usage: scripts/kube-root.sh [DIR]   (default .cache/kube-root; tests read GPUFORGE_KUBE_ROOT)
#        scripts/kube-root.sh --pin   (the pinned Kubernetes version)
set -euo pipefail
cd "$(dirname "$0")/.."
matrices="${GPUFORGE_MATRIX_DIR:-images/matrices}"
python=.venv/bin/python

read_pin() {
    if [ ! -x "$python" ]; then
        echo "no $python: run scripts/bootstrap.sh dev first (the pin is read from $matrices with PyYAML)" >&2
        return 1
    fi
    "$python" -P - "$matrices" <<'EOF'
import sys
from pathlib import Path

import yaml

folder = Path(sys.argv[1])
versions: dict[str, list[str]] = {}
for path in sorted(folder.glob("*.yaml")):
    block = ((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("kubernetes") or {}).get("kubelet")
    if isinstance(block, dict) and block.get("version"):
        versions.setdefault(str(block["version"]), []).append(path.name)
if len(versions) != 1:
    found = "; ".join(f"{v} in {', '.join(n)}" for v, n in sorted(versions.items())) or "none"
    sys.exit(f"{folder}: kubernetes.kubelet.version must be one version in every matrix that pins it (found: {found})")
print(next(iter(versions)))
EOF
}

if [ "${1:-}" = --pin ]; then
    read_pin
    exit
fi

root="$(realpath -m "${1:-${GPUFORGE_KUBE_ROOT:-.cache/kube-root}}")"
mirror="${GPUFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
pin="$(read_pin)"
if ! [[ "$pin" =~ ^1\.([0-9]+)\.([0-9]+)$ ]]; then
    echo "kubelet version '$pin' in $matrices is not 1.MINOR.PATCH" >&2
    exit 1
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
key="pin: kubernetes $pin"

# shellcheck source=scripts/lib-test-root.sh
. scripts/lib-test-root.sh
# shellcheck source=scripts/lib-go-module.sh
. scripts/lib-go-module.sh
test_root_exit_if_current kube test_root_marker_details
test_root_skip_unless_root kube "needs root, as the Slurm root does" "the API server tests will skip"
go_toolchain "kube-apiserver $pin"
test_root_lock kube
test_root_workspace

echo "==> kube test root: building kube-apiserver $pin (Go module k8s.io/kubernetes@v$pin) in $staging"
go_module_copy "$go" "k8s.io/kubernetes@v$pin" "is it in https://proxy.golang.org/k8s.io/kubernetes/@v/list ?"
# The zip's vendor/ holds only an OWNERS file; without modules.txt it would only confuse -mod.
rm -rf "$build/src/vendor"
bin_dir="$(cd "$staging/usr/bin" && pwd)"
(
    cd "$build/src"
    edits=()
    while read -r module; do
        edits+=(-dropreplace "$module" -require "$module@$staging_version")
    done < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' go.mod)
    [ "${#edits[@]}" -gt 0 ] || { echo "go.mod of k8s.io/kubernetes@v$pin has no ./staging replaces" >&2; exit 1; }
    "${go_env[@]}" "$go" mod edit "${edits[@]}" -droprequire k8s.io/sample-cli-plugin -droprequire k8s.io/sample-controller
    version_flags=(
        "-X k8s.io/component-base/version.gitVersion=v$pin"
        "-X k8s.io/component-base/version.gitCommit=$module_sum"
        "-X k8s.io/component-base/version.gitTreeState=clean"
        "-X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    )
    "${go_env[@]}" "$go" build -mod=mod -trimpath -ldflags "-s -w ${version_flags[*]}" \
        -o "$bin_dir/kube-apiserver" ./cmd/kube-apiserver
) >>"$log" 2>&1 || fail "building kube-apiserver $pin failed"

echo "==> kube test root: Debian forky's etcd-server"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror forky main" >"$apt_dir/sources.list"
apt_options=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "Acquire::Languages=none"
)
apt-get "${apt_options[@]}" update >>"$log" 2>&1 || fail "apt-get update (forky) failed"
(cd "$apt_dir/debs" && apt-get "${apt_options[@]}" download etcd-server) >>"$log" 2>&1 ||
    fail "apt-get download etcd-server (forky) failed"
dpkg -x "$apt_dir"/debs/etcd-server_*.deb "$apt_dir/unpacked"
cp "$apt_dir/unpacked/usr/bin/etcd" "$staging/usr/bin/etcd"

# Whole output, then its first line: `| head -n 1` under pipefail fails the script when the binary
# is still writing as head exits (SIGPIPE, exit 141; seen with etcd on a fresh machine).
apiserver_reported="$("$staging/usr/bin/kube-apiserver" --version 2>&1)" || true
apiserver_reported="${apiserver_reported%%$'\n'*}"
[ "$apiserver_reported" = "Kubernetes v$pin" ] ||
    fail "kube-apiserver reports '$apiserver_reported', not 'Kubernetes v$pin' (the pin in $matrices)"
etcd_reported="$("$staging/usr/bin/etcd" --version 2>&1)" || true
etcd_reported="${etcd_reported%%$'\n'*}"
case "$etcd_reported" in
"etcd Version: 3.5."*) ;;
*) fail "etcd reports '$etcd_reported', not 3.5.x (kube-apiserver $pin supports etcd 3.5)" ;;
esac
printf '%s\n%s\n%s\n' "$key" "$apiserver_reported" "$etcd_reported" >"$staging/.gpuforge-complete"
test_root_install kube
