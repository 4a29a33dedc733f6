"""`--image NAME`: the operator replicas and agents run from the image's root filesystem.

The image (built by hack/image/build.sh, in buildah's storage) gets a working container of its own
(`buildah from`), whose root filesystem `buildah mount` gives; each process then starts in it through
`enter_image`: read-only, as the pod's numeric user, with the image's environment and working
directory, and with only the mounts the pod asks for (hostPath, Secret and emptyDir volumes) plus
its kubeconfig. `close` removes the working container.

Why a chroot and not `buildah run`, and what a container runtime gives that this does not:
docs/development.md#running-from-the-image
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from colocation.apimachinery.objects import Obj
from colocation_sandbox.launcher.child_processes import run

BUILDAH = ("buildah", "--storage-driver", "vfs")  # as hack/image/build.sh stores the image
BUILDAH_TIMEOUT_SECONDS = 300.0
# Where a process finds the kubeconfig the launcher gives it (a real pod reads its token from
# /var/run/secrets/kubernetes.io/serviceaccount instead).
KUBECONFIG = "/run/colocation-sandbox/kubeconfig"
# Where the operators find the cluster CA their extender's client certificates must chain to
# (outside /tmp, which the pod's emptyDir covers).
CLUSTER_CA = "/run/colocation-sandbox/cluster-ca.crt"


class ImageUnavailable(Exception):
    """buildah is missing, or the image is not in its storage."""


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = True


def _buildah(*args: str) -> str:
    try:
        result = run([*BUILDAH, *args], timeout=BUILDAH_TIMEOUT_SECONDS)
    except FileNotFoundError:
        raise ImageUnavailable("buildah is not installed (apt-get install buildah)") from None
    if result.returncode != 0:
        raise ImageUnavailable(f"buildah {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


def numeric_user(user: str) -> tuple[int, int]:
    """An image's USER as (uid, gid); refused unless numeric, as the kubelet needs it to verify runAsNonRoot."""
    uid, _, gid = (user or "0").partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        raise ImageUnavailable(f"the image's user {user!r} is not numeric")
    return int(uid), int(gid or uid)


def pod_user(pod_spec: Obj, container: Obj, image_user: tuple[int, int]) -> tuple[int, int]:
    """The container's uid and gid: its securityContext's, else the pod's, else the image's."""
    chosen = list(image_user)
    for context in (pod_spec.get("securityContext") or {}, container.get("securityContext") or {}):
        for index, key in enumerate(("runAsUser", "runAsGroup")):
            if context.get(key) is not None:
                chosen[index] = int(context[key])
    return chosen[0], chosen[1]


@dataclass(frozen=True, kw_only=True)
class ImageRoot:
    image: str
    image_id: str  # the sha256 of its configuration
    container: str
    path: Path
    env: dict[str, str]
    user: tuple[int, int]
    workdir: str

    @classmethod
    def open(cls, image: str) -> ImageRoot:
        inspected = orjson.loads(_buildah("inspect", "--type", "image", image))
        config = inspected.get("OCIv1", {}).get("config", {})
        container = _buildah("from", "--pull=never", image).splitlines()[-1]
        try:
            path = Path(_buildah("mount", container))
        except ImageUnavailable:
            _buildah("rm", container)
            raise
        env = dict(item.split("=", 1) for item in config.get("Env") or ())
        return cls(image=image, image_id=inspected["FromImageID"], container=container, path=path, env=env,
                   user=numeric_user(config.get("User", "")), workdir=config.get("WorkingDir") or "/")

    def close(self) -> None:
        _buildah("umount", self.container)
        _buildah("rm", self.container)

    def command(self, program: Sequence[str], *, user: tuple[int, int], mounts: Sequence[Mount],
                env: Mapping[str, str]) -> list[str]:
        """`program` (found on the image's PATH) run in the image, as `enter_image` starts it."""
        return [sys.executable, "-m", "colocation_sandbox.launcher.controlplane.enter_image",
                "--root", str(self.path), "--user", f"{user[0]}:{user[1]}", "--workdir", self.workdir,
                *(f"--mount={m.source}:{m.target}{':ro' if m.read_only else ''}" for m in mounts),
                *(f"--env={name}={value}" for name, value in {**self.env, **env}.items()),
                "--", *program]
