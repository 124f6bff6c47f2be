"""migslice's servers run from the container image, as a container runtime would run them.

``image/build.sh`` builds the image (cached) and exports its root filesystem and OCI config to
``image/.build/``. :class:`ImageServerProcess` starts ``migslice <command>`` from that root the
way a pod with the shipped security context runs it, without a container runtime:

* a private mount namespace (``unshare --mount``) in which the root filesystem is bind-mounted
  read-only (``readOnlyRootFilesystem: true``), with a tmpfs at ``/tmp`` (the emptyDir), a tmpfs
  ``/dev`` holding only null, zero, full, random and urandom, and ``/proc``;
* the serving certificate and its CA at ``/etc/migslice/tls`` (the Deployments' ``mountPath``,
  as the TLS Secret's keys) and a
  projected service-account volume at ``/var/run/secrets/kubernetes.io/serviceaccount`` (token,
  ``ca.crt``, namespace), both read-only, with ``KUBERNETES_SERVICE_HOST``/``_PORT`` naming the
  e2e kube-apiserver: the in-cluster configuration path, no kubeconfig;
* ``chroot`` into it as the image's ``User`` (65532:65532, no other groups), with exactly the
  image's ``Env`` (``env -i``) and its ``Entrypoint``.

Only the network namespace is the host's, so the servers listen on 127.0.0.1 as the other
e2e servers do. This needs root (mounts, chroot); ``MIGSLICE_E2E_SERVERS=venv`` runs the servers
from ``.venv`` instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.paths import REPO
from migslice.serving.process import ServerProcess

BUILD_SCRIPT = REPO / "image" / "build.sh"
DEFAULT_OUT = REPO / "image" / ".build"

TLS_DIR = "/etc/migslice/tls"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# Runs as root in the new (private) mount namespace; "$@" is the final command (env -i ...).
_MOUNT_SCRIPT = """
root=$1 tls=$2 tls_at=$3 account=$4 account_at=$5
shift 5
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m tmpfs "$root/tmp"
mount -t tmpfs -o nosuid,noexec,mode=755,size=64k tmpfs "$root/dev"
for device in null zero full random urandom; do
    touch "$root/dev/$device"
    mount --bind "/dev/$device" "$root/dev/$device"
done
mount --bind -o ro "$tls" "$tls_at"
mount --bind -o ro "$account" "$account_at"
mount -o remount,bind,ro "$root"
exec "$@"
"""


def resolve_in(root: Path, path: str) -> Path:
    """``path`` inside ``root`` with symlinks resolved there (``/var/run`` -> ``/run``), not on
    the host; missing components are kept as they are."""
    resolved = root
    parts = [p for p in path.split("/") if p]
    hops = 0
    while parts:
        part = parts.pop(0)
        candidate = resolved / part
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise ImageUnavailableError(f"{path}: too many symlinks in {root}")
            target = os.readlink(candidate)
            parts = [p for p in target.split("/") if p] + parts
            if target.startswith("/"):
                resolved = root
            continue
        resolved = resolved.parent if part == ".." and resolved != root else candidate
    return resolved


class ImageUnavailableError(RuntimeError):
    """The image cannot be built or run here; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Image:
    """A built image: its exported root filesystem and what its OCI config says."""

    name: str
    rootfs: Path
    env: tuple[str, ...]
    entrypoint: tuple[str, ...]
    user: str
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, out_dir: Path = DEFAULT_OUT) -> Image:
        stamp = dict(
            line.split("=", 1) for line in (out_dir / "stamp").read_text().splitlines() if line
        )
        config = json.loads((out_dir / "config.json").read_text())
        return cls(
            name=stamp["image"],
            rootfs=out_dir / "rootfs",
            env=tuple(config.get("Env") or ()),
            entrypoint=tuple(config.get("Entrypoint") or ()),
            user=config.get("User") or "0:0",
            labels=dict(config.get("Labels") or {}),
        )


def build_image(out_dir: Path = DEFAULT_OUT) -> Image:
    """Run ``image/build.sh`` (seconds when nothing changed) and load what it made."""
    if os.geteuid() != 0:
        raise ImageUnavailableError(
            "running the servers from the image needs root (mounts, chroot); "
            "set MIGSLICE_E2E_SERVERS=venv to run them from .venv"
        )
    env = dict(os.environ, MIGSLICE_IMAGE_DIR=str(out_dir))
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, check=False)
    if result.returncode != 0:
        raise ImageUnavailableError(f"image/build.sh failed with exit code {result.returncode}")
    return Image.load(out_dir)


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    """What a projected service-account volume holds, and where the API server is."""

    name: str
    namespace: str
    token: str
    ca_cert: Path
    api_server: str  # https://127.0.0.1:PORT

    def environment(self) -> list[str]:
        host_port = self.api_server.removeprefix("https://")
        host, port = host_port.rsplit(":", 1)
        return [f"KUBERNETES_SERVICE_HOST={host}", f"KUBERNETES_SERVICE_PORT={port}"]


@dataclass
class ImageServerProcess(ServerProcess):
    """``migslice <command>`` from the image's root filesystem (see the module docstring)."""

    image: Image | None = None
    account: ServiceAccount | None = None

    def _volumes(self, image: Image, account: ServiceAccount) -> tuple[Path, Path]:
        """The pod's volumes on the host: tls/ and serviceaccount/, owned by the image's user."""
        uid, _, gid = image.user.partition(":")
        owner = (int(uid), int(gid or uid))
        pod = self.log_path.parent / f"{self.server_name.split('.')[0]}-volumes"
        tls, projected = pod / "tls", pod / "serviceaccount"
        for folder in (tls, projected):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        files = {
            tls / "tls.crt": self.bundle.cert.read_bytes(),
            tls / "tls.key": self.bundle.key.read_bytes(),
            tls / "ca.crt": self.bundle.ca_cert.read_bytes(),
            projected / "token": account.token.encode(),
            projected / "ca.crt": account.ca_cert.read_bytes(),
            projected / "namespace": account.namespace.encode(),
        }
        for path, data in files.items():
            path.write_bytes(data)
            os.chown(path, *owner)
            path.chmod(0o400)
        return tls, projected

    def command_line(self) -> list[str]:
        if self.image is None or self.account is None:
            raise ImageUnavailableError("ImageServerProcess needs an image and a service account")
        tools = {name: shutil.which(name) for name in ("unshare", "chroot", "env", "sh")}
        missing = [name for name, path in tools.items() if path is None]
        if missing:
            raise ImageUnavailableError(f"{', '.join(missing)} not found on PATH")
        tls, account = self._volumes(self.image, self.account)
        # Mount points, made in the root filesystem as a container runtime makes them.
        tls_at = resolve_in(self.image.rootfs, TLS_DIR)
        account_at = resolve_in(self.image.rootfs, SERVICE_ACCOUNT_DIR)
        for mount_point in (tls_at, account_at):
            mount_point.mkdir(parents=True, exist_ok=True)
        uid, _, gid = self.image.user.partition(":")
        served: Sequence[str] = [
            self.command,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            f"--tls-cert={TLS_DIR}/tls.crt",
            f"--tls-key={TLS_DIR}/tls.key",
            *self.client_arguments(f"{TLS_DIR}/ca.crt"),
            *self.args,
        ]
        return [
            str(tools["unshare"]),
            "--mount",
            "--",
            str(tools["sh"]),
            "-euc",
            _MOUNT_SCRIPT,
            "sh",
            str(self.image.rootfs),
            str(tls),
            str(tls_at),
            str(account),
            str(account_at),
            str(tools["env"]),
            "-i",
            *self.image.env,
            *self.account.environment(),
            str(tools["chroot"]),
            f"--userspec={uid}:{gid or uid}",
            f"--groups={gid or uid}",
            str(self.image.rootfs),
            *self.image.entrypoint,
            *served,
        ]
