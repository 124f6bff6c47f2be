#!/usr/bin/env bash
# Build the migslice container image from ./Dockerfile, cached by a hash of its inputs.
#
#   image/build.sh            build (or find cached) migslice:<version>, export its root filesystem
#   image/build.sh push DEST  the same, then push the image to DEST: a registry reference
#                             (REGISTRY/PATH/migslice:TAG) or, with buildah or podman, any
#                             containers-transports destination (docker-archive:FILE:TAG, ...)
#
# The builder is the first of docker, podman, buildah that works (a docker client without an
# engine does not); when none is there, buildah is installed with apt. The base image is made
# here from Debian packages (image/base.sh, mmdebstrap), not pulled, unless MIGSLICE_IMAGE_BASE
# names one. buildah keeps its images under the output folder (vfs driver, chroot isolation).
#
# Output in image/.build/ (ignored by git; override with MIGSLICE_IMAGE_DIR):
#   stamp        key=value: the input hashes, image name and id, builder, size, timings
#   config.json  the image's OCI config (Env, Entrypoint, Cmd, User, Labels)
#   rootfs/      the image's root filesystem, as a container runtime would unpack it
#
# Environment:
#   MIGSLICE_IMAGE_DIR      output folder (default: image/.build)
#   MIGSLICE_IMAGE_BUILDER  docker, podman or buildah: use this one, do not probe
#   MIGSLICE_IMAGE_BASE     an existing image to build on (Debian with python3 and apt); skips
#                           image/base.sh
#   MIGSLICE_IMAGE_SUITE    Debian suite of the base (default: this machine's, from os-release)
#   MIGSLICE_IMAGE_FORCE=1  build again even when the stamp matches
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OUT="${MIGSLICE_IMAGE_DIR:-$HERE/.build}"
cd "$ROOT"

log() { printf '[image/build] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

ACTION="${1:-build}"
DEST="${2:-}"
case "$ACTION" in
    build) ;;
    push) [[ -n "$DEST" ]] || die "usage: image/build.sh push DESTINATION (e.g. REGISTRY/platform/migslice:TAG)" ;;
    *) die "usage: image/build.sh [push DESTINATION]" ;;
esac

# The version is migslice.__version__ (pyproject.toml reads it from there: dynamic).
VERSION="$(sed -n 's/^__version__ *= *"\([^"]*\)".*/\1/p' migslice/__init__.py | head -n1)"
[[ -n "$VERSION" ]] || die "cannot read __version__ from migslice/__init__.py"
IMAGE="migslice:$VERSION"
if [[ -z "${MIGSLICE_IMAGE_SUITE:-}" ]]; then
    MIGSLICE_IMAGE_SUITE="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
fi
SUITE="${MIGSLICE_IMAGE_SUITE:-}"
[[ -n "$SUITE" || -n "${MIGSLICE_IMAGE_BASE:-}" ]] \
    || die "cannot tell the Debian suite from /etc/os-release; set MIGSLICE_IMAGE_SUITE (e.g. bookworm)"

mkdir -p "$OUT"
exec 9>"$OUT/lock"
flock 9 # one build per output folder at a time (make image and make e2e may both ask)

# ---------------------------------------------------------------- tools
apt_install() {
    [[ $EUID -eq 0 ]] || die "$* missing; install it (apt-get install $*) or run as root"
    log "installing $* with apt"
    local apt=(apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$@" >/dev/null 2>&1 || {
        apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
        DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$@" >/dev/null
    }
}

pick_builder() {
    if [[ -n "${MIGSLICE_IMAGE_BUILDER:-}" ]]; then
        echo "$MIGSLICE_IMAGE_BUILDER"
        return
    fi
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        echo docker
    elif command -v podman >/dev/null 2>&1 && podman info >/dev/null 2>&1; then
        echo podman
    else
        command -v docker >/dev/null 2>&1 && log "docker: no engine answers; trying podman, buildah"
        command -v buildah >/dev/null 2>&1 || apt_install buildah
        echo buildah
    fi
}

BUILDER="$(pick_builder)"
case "$BUILDER" in
    buildah)
        # Images live under $OUT, not in the machine-wide store; vfs needs no kernel overlay.
        B=(buildah --root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs) ;;
    docker | podman) B=("$BUILDER") ;;
    *) die "MIGSLICE_IMAGE_BUILDER=$BUILDER: use docker, podman or buildah" ;;
esac

has_image() {
    case "$BUILDER" in
        buildah) "${B[@]}" inspect --type image "$1" >/dev/null 2>&1 ;;
        *) "${B[@]}" image inspect "$1" >/dev/null 2>&1 ;;
    esac
}

# ---------------------------------------------------------------- input hashes
sha() { sha256sum | cut -d' ' -f1; }

# The build context: the .dockerignore's "!" entries, minus what git ignores (caches, eggs).
context_files() {
    local paths
    mapfile -t paths < <(sed -n 's/^!//p' .dockerignore)
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files --cached --others --exclude-standard -- "${paths[@]}"
    else # not a git checkout: the same paths, minus the caches .dockerignore leaves out
        find "${paths[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*'
    fi | LC_ALL=C sort -u
}

base_hash() {
    if [[ -n "${MIGSLICE_IMAGE_BASE:-}" ]]; then
        echo "given:$MIGSLICE_IMAGE_BASE" | sha
        return
    fi
    {
        cat image/base.sh
        echo "suite=$SUITE mirror=${MIGSLICE_IMAGE_MIRROR:-}"
        cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    } | sha
}

image_hash() {
    {
        echo "base=$1 builder=$BUILDER image=$IMAGE"
        sha256sum Dockerfile .dockerignore image/build.sh
        context_files | while IFS= read -r f; do [[ -f "$f" ]] && sha256sum "$f"; done
    } | sha
}

stamp_get() { sed -n "s/^$1=//p" "$OUT/stamp" 2>/dev/null | head -n1; }

push() {
    [[ "$ACTION" == push ]] || return 0
    log "pushing $IMAGE to $DEST"
    case "$BUILDER" in
        docker)
            "${B[@]}" tag "$IMAGE" "$DEST"
            "${B[@]}" push "$DEST"
            ;;
        *)
            local target="$DEST"
            case "$target" in
                docker://* | docker-archive:* | docker-daemon:* | oci:* | oci-archive:* | dir:*) ;;
                *) target="docker://$target" ;;
            esac
            "${B[@]}" push "$IMAGE" "$target"
            ;;
    esac
}

# ---------------------------------------------------------------- base
BASE_HASH="$(base_hash)"
if [[ -n "${MIGSLICE_IMAGE_BASE:-}" ]]; then
    BASE="$MIGSLICE_IMAGE_BASE"
else
    BASE="migslice-base:$SUITE-${BASE_HASH:0:12}"
fi
IMAGE_HASH="$(image_hash "$BASE_HASH")"

if [[ "${MIGSLICE_IMAGE_FORCE:-0}" != 1 && "$(stamp_get image_hash)" == "$IMAGE_HASH" \
    && -d "$OUT/rootfs/usr" && -f "$OUT/config.json" ]] && has_image "$IMAGE"; then
    log "$IMAGE: cached (inputs ${IMAGE_HASH:0:12}, $(stamp_get size_mb) MB, $BUILDER; $OUT/stamp)"
    push
    exit 0
fi

t0=$SECONDS
base_s=0
if [[ -z "${MIGSLICE_IMAGE_BASE:-}" ]] && ! has_image "$BASE"; then
    command -v mmdebstrap >/dev/null 2>&1 || apt_install mmdebstrap
    [[ $EUID -eq 0 ]] || die "building the base with mmdebstrap needs root here; or set MIGSLICE_IMAGE_BASE"
    tarball="$OUT/base-$SUITE.tar"
    image/base.sh "$SUITE" "$tarball"
    log "importing the base as $BASE"
    path_env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    case "$BUILDER" in
        buildah)
            ctr="$("${B[@]}" from scratch)"
            "${B[@]}" add --quiet "$ctr" "$tarball" / >/dev/null
            "${B[@]}" config --env "$path_env" --cmd /bin/bash "$ctr"
            "${B[@]}" commit --quiet --rm "$ctr" "$BASE" >/dev/null
            ;;
        *) "${B[@]}" import --change "ENV $path_env" --change 'CMD ["/bin/bash"]' "$tarball" "$BASE" >/dev/null ;;
    esac
    rm -f "$tarball"
    base_s=$((SECONDS - t0))
    log "base ready in ${base_s}s"
fi

# ---------------------------------------------------------------- image
# pip in the build stage trusts what this machine trusts (a TLS-intercepting proxy's CA, say).
build_args=(--build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" -t "$IMAGE" -f Dockerfile)
for cert in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [[ -n "$cert" && -s "$cert" ]]; then
        build_args+=(--secret "id=pip-cert,src=$cert")
        break
    fi
done

t1=$SECONDS
log "building $IMAGE on $BASE with $BUILDER"
case "$BUILDER" in
    buildah) "${B[@]}" bud --isolation chroot "${build_args[@]}" . >"$OUT/build.log" 2>&1 ;;
    docker) DOCKER_BUILDKIT=1 "${B[@]}" build "${build_args[@]}" . >"$OUT/build.log" 2>&1 ;;
    podman) "${B[@]}" build "${build_args[@]}" . >"$OUT/build.log" 2>&1 ;;
esac || { tail -n 40 "$OUT/build.log" >&2; die "build failed; the whole log: $OUT/build.log"; }
image_s=$((SECONDS - t1))

# ---------------------------------------------------------------- root filesystem, config
# The OCI config (Env, Entrypoint, Cmd, User, Labels) out of an inspect document, by key path.
image_config() {
    python3 -c '
import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("."):
    value = value[int(key)] if isinstance(value, list) else value[key]
json.dump(value, sys.stdout, indent=1, sort_keys=True)
print()' "$1"
}

log "exporting the root filesystem to $OUT/rootfs"
rm -rf "$OUT/rootfs.new" "$OUT/rootfs"
mkdir -p "$OUT/rootfs.new"
case "$BUILDER" in
    buildah)
        ctr="$("${B[@]}" from --pull-never "$IMAGE")"
        mnt="$("${B[@]}" mount "$ctr")"
        cp -a "$mnt/." "$OUT/rootfs.new/"
        "${B[@]}" umount "$ctr" >/dev/null
        "${B[@]}" rm "$ctr" >/dev/null
        "${B[@]}" inspect --type image "$IMAGE" | image_config OCIv1.config >"$OUT/config.json"
        image_id="$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")"
        # Drop what earlier builds left: older bases, then untagged images.
        "${B[@]}" images --format '{{.Name}}:{{.Tag}}' | grep '/migslice-base:' \
            | grep -v -x "localhost/$BASE" | xargs -r "${B[@]}" rmi >/dev/null 2>&1 || true
        "${B[@]}" rmi --prune >/dev/null 2>&1 || true
        ;;
    *)
        ctr="$("${B[@]}" create "$IMAGE")"
        "${B[@]}" export "$ctr" | tar -x -C "$OUT/rootfs.new"
        "${B[@]}" rm "$ctr" >/dev/null
        "${B[@]}" image inspect "$IMAGE" | image_config 0.Config >"$OUT/config.json"
        image_id="$("${B[@]}" image inspect --format '{{.Id}}' "$IMAGE")"
        ;;
esac
mv "$OUT/rootfs.new" "$OUT/rootfs"

size_mb="$(du -s --apparent-size --block-size=1M "$OUT/rootfs" | cut -f1)"
{
    echo "image=$IMAGE"
    echo "image_id=$image_id"
    echo "image_hash=$IMAGE_HASH"
    echo "base=$BASE"
    echo "base_hash=$BASE_HASH"
    echo "builder=$BUILDER"
    echo "size_mb=$size_mb"
    echo "base_seconds=$base_s"
    echo "image_seconds=$image_s"
    echo "total_seconds=$((SECONDS - t0))"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$OUT/stamp"
log "$IMAGE built in $((SECONDS - t0))s (base ${base_s}s, image ${image_s}s): ${size_mb} MB uncompressed, id ${image_id:0:12}"
push
