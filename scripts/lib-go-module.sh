# shellcheck shell=bash
# Sourced by scripts/kube-root.sh and scripts/monitoring-root.sh: how both find Go, fetch a Go module
# and build from a copy of it. go_module_copy expects, set by the caller: $build (an empty work
# folder), $log (the build log), $python (the project's interpreter) and a `fail MESSAGE` function
# that exits (scripts/lib-test-root.sh gives the folders and `fail`).
#
# Checksum verification is forced on whatever the environment says: GOSUMDB names the public
# database, and no GONOSUMDB/GOPRIVATE/GONOPROXY/GOINSECURE pattern or GOFLAGS entry exempts anything.
# -buildvcs=false: the copy sits inside gpuforge's git work tree, whose revision is not the module's.
# The caches in .cache/go are shared by both scripts.
# shellcheck disable=SC2034  # go_env, go, source_dir and module_sum are read by the sourcing script
go_env=(
    env "GOMODCACHE=$PWD/.cache/go/mod" "GOCACHE=$PWD/.cache/go/build" "GOFLAGS=-modcacherw -buildvcs=false"
    GOSUMDB=sum.golang.org GONOSUMDB= GOPRIVATE= GONOPROXY= GOINSECURE=
    GOWORK=off GO111MODULE=on GOTOOLCHAIN=local CGO_ENABLED=0
)

# go_toolchain WHAT: set $go to the Go toolchain (go on PATH, else /usr/local/go/bin/go), or exit 1
# saying that it builds WHAT for the tests.
go_toolchain() {
    go="$(command -v go || echo /usr/local/go/bin/go)"
    if [ ! -x "$go" ]; then
        echo "no Go toolchain (go on PATH or /usr/local/go/bin/go): it builds $1 for the tests" >&2
        exit 1
    fi
}

# go_module_copy GO MODULE@VERSION HINT: download and verify the module (fail with HINT if the
# proxy or the checksum database refuses it), copy it to $build/src, writable, and set
# $source_dir and $module_sum (its go.sum hash, which the builds stamp as their revision).
# The module cache is shared: the build works in the copy (it writes nothing there, but a copy keeps it so).
# shellcheck disable=SC2154  # build, log and python are the caller's (see the top)
go_module_copy() {
    local go="$1" module="$2" hint="$3" download
    download="$(cd "$build" && "${go_env[@]}" "$go" mod download -json "$module" 2>>"$log")" ||
        fail "go mod download $module failed ($hint)"
    source_dir="$("$python" -P -c 'import json, sys; print(json.load(sys.stdin)["Dir"])' <<<"$download")"
    module_sum="$("$python" -P -c 'import json, sys; print(json.load(sys.stdin)["Sum"])' <<<"$download")"
    cp -r "$source_dir" "$build/src"
    chmod -R u+w "$build/src"
}
