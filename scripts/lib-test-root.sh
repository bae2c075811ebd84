# shellcheck shell=bash
# Sourced by scripts/kube-root.sh, scripts/monitoring-root.sh and scripts/slurm-root.sh: the steps every
# test root takes around its build. A root is the folder $root; its marker, $root/.gpuforge-complete,
# holds on its first line $key, what the root was built from (the pins, or the package list), and on
# further lines what the root reports it holds. A root whose marker names another key is rebuilt.
# Expects, set by the caller: $root and $key. LABEL below is the name the messages give the root.
# shellcheck disable=SC2154  # root and key are the caller's (see above)

# test_root_current: whether $root was built from $key.
test_root_current() {
    [ -f "$root/.gpuforge-complete" ] && [ "$(head -n 1 "$root/.gpuforge-complete")" = "$key" ]
}

# test_root_marker_details: the marker's further lines, joined with ';' (what the root holds).
test_root_marker_details() {
    tail -n +2 "$root/.gpuforge-complete" | paste -sd ';' -
}

# test_root_exit_if_current LABEL COMMAND...: when $root is current, print
# "==> LABEL test root: $root (what COMMAND prints)" and exit 0.
test_root_exit_if_current() {
    local label="$1"
    shift
    if test_root_current; then
        echo "==> $label test root: $root ($("$@"))"
        exit 0
    fi
}

# test_root_skip_unless_root LABEL WHY CONSEQUENCE: a root is built as root (chroot, dpkg, the build
# folders), so for anyone else say so and exit 0; the tests that need the root skip.
test_root_skip_unless_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "==> $1 test root: skipped ($2); $3"
        exit 0
    fi
}

# test_root_lock LABEL: one build at a time (two test runs may start together); the second waits on
# $root.lock (file descriptor 9, held until the script exits) and finds the first's result.
test_root_lock() {
    mkdir -p "$(dirname "$root")"
    exec 9>"$root.lock"
    flock -w 3600 9
    if test_root_current; then
        echo "==> $1 test root: $root (built meanwhile)"
        exit 0
    fi
}

# test_root_workspace: empty build folders beside $root, and `fail MESSAGE`, which shows the log's end.
# $staging becomes the root; $build and $apt_dir are removed once it is in place; $log is kept.
# shellcheck disable=SC2034  # staging, build and apt_dir are read by the sourcing script
test_root_workspace() {
    staging="$root.new"
    build="$root.build"
    apt_dir="$root.apt"
    log="$root.log"
    rm -rf "$staging" "$build" "$apt_dir"
    mkdir -p "$staging/usr/bin" "$build" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
    : >"$log"
}

fail() {
    tail -n 20 "$log" >&2
    echo "$1 (full log: $log)" >&2
    exit 1
}

# test_root_install LABEL: $staging (its marker written) replaces $root, and the build folders go.
test_root_install() {
    rm -rf "$root.old"
    if [ -d "$root" ]; then
        mv "$root" "$root.old"
    fi
    mv "$staging" "$root"
    rm -rf "$root.old" "$build" "$apt_dir"
    echo "==> $1 test root: $root ($(test_root_marker_details))"
}
