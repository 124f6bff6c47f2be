#!/usr/bin/env bash
# The base image's root filesystem, from Debian packages only: the essential set of Debian SUITE
# with python3 and python3-venv, written as a tarball that image/build.sh imports as a local image. No container
# registry is involved. The apt sources are this machine's own (the entries of /etc/apt that
# serve SUITE), so the image gets what the host's apt would install.
#
#   image/base.sh SUITE OUTPUT.tar
#
# Environment: MIGSLICE_IMAGE_MIRROR  a Debian mirror URI to use instead of the host's sources.
set -euo pipefail

SUITE="${1:?usage: image/base.sh SUITE OUTPUT.tar}"
OUTPUT="${2:?usage: image/base.sh SUITE OUTPUT.tar}"
# What goes in besides the Essential:yes packages. python3-venv (3 MB) lets the Dockerfile's
# build stage make its venvs; that is why no apt is needed in the image, and so none is there
# (variant essential, not minbase: 21 MB less).
PACKAGES=python3,python3-venv

log() { printf '[image/base] %s\n' "$*" >&2; }

# The host's apt entries for SUITE and its -updates/-security/-backports suites, one-line
# (sources.list, *.list) and deb822 (*.sources) kept apart, as apt wants them.
host_sources() {
    local work="$1" f
    : >"$work/host.list"
    : >"$work/host.sources"
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$f" ]] || continue
        awk -v suite="$SUITE" '
            /^[[:space:]]*deb[[:space:]]/ {
                line = $0; gsub(/\[[^]]*\]/, "", line); split(line, w)
                if (w[3] == suite || index(w[3], suite "-") == 1) print $0
            }' "$f" >>"$work/host.list"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] || continue
        awk -v suite="$SUITE" '
            function flush() { if (keep && para != "") printf "%s\n", para; para = ""; keep = 0 }
            /^[[:space:]]*$/ { flush(); next }
            {
                para = para $0 "\n"
                if (tolower($1) == "suites:")
                    for (i = 2; i <= NF; i++)
                        if ($i == suite || index($i, suite "-") == 1) keep = 1
            }
            END { flush() }' "$f" >>"$work/host.sources"
    done
}

work="$(mktemp -d "${TMPDIR:-/tmp}/migslice-base.XXXXXX")"
trap 'rm -rf "$work"' EXIT

mirrors=()
if [[ -n "${MIGSLICE_IMAGE_MIRROR:-}" ]]; then
    mirrors=("$MIGSLICE_IMAGE_MIRROR")
else
    host_sources "$work"
    [[ -s "$work/host.list" ]] && mirrors+=("$work/host.list")
    [[ -s "$work/host.sources" ]] && mirrors+=("$work/host.sources")
    if ((${#mirrors[@]} == 0)); then
        log "no apt source in /etc/apt serves suite $SUITE; set MIGSLICE_IMAGE_MIRROR to a Debian mirror URI"
        exit 1
    fi
fi

log "mmdebstrap $SUITE (essential + $PACKAGES) -> $OUTPUT"
# merged-usr by hook rather than the usrmerge package (which would pull in perl); no manuals,
# translations or docs (the copyright files stay); no glibc iconv modules (Python has its own
# codecs).
mmdebstrap --variant=essential --include="$PACKAGES" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/lib/*/gconv/*' \
    "$SUITE" "$OUTPUT" "${mirrors[@]}" >"$work/mmdebstrap.log" 2>&1 || {
    tail -n 40 "$work/mmdebstrap.log" >&2
    log "mmdebstrap failed (its log's tail above)"
    exit 1
}
