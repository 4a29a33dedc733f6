"""What the launcher's kubelet runs for a container of our image: its environment and command, and
the files of its Secret volumes.

The kubelet resolves `$(VAR)` and the downward API in env and args; hostPath mounts are read from
the host path, since the process runs on this machine, not in the container's filesystem; a Secret
volume is written to a directory of the kubelet's (`write_secret_volume`), read from there likewise.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from colocation.apimachinery.objects import Obj


def container_environment(container: Obj, fields: dict[str, str]) -> dict[str, str]:
    """The container's env: literal values (with `$(VAR)` of earlier entries expanded) and the
    downward API's fieldRefs, from `fields` (fieldPath -> value)."""
    env: dict[str, str] = {}
    for item in container.get("env") or ():
        if "value" in item:
            env[item["name"]] = expand_variables(str(item["value"]), env)
        elif path := ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath"):
            env[item["name"]] = fields.get(path, "")
    return env


def container_command(pod_spec: Obj, container: Obj, env: dict[str, str], *,
                      volume_dirs: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(program, args) for a `colocation` container, run here by this Python: `$(VAR)` expanded in
    args, and every path under a volume's mountPath read from where the volume is on this machine
    instead: a hostPath volume's host path, or `volume_dirs`' directory for the volumes the kubelet
    wrote (Secret volumes, by volume name). A path is an argument of its own or the value of a
    `--flag=PATH` argument."""
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or ()}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod_spec.get("volumes") or () if "hostPath" in v}
    host_paths.update(volume_dirs or {})
    rewrites = [(mounts[name], path) for name, path in host_paths.items() if name in mounts]
    args = []
    for value in container_args(container, env):
        flag, equals, path = value.partition("=") if value.startswith("--") else ("", "", value)
        for mount_path, host_path in rewrites:
            if path == mount_path or path.startswith(mount_path + "/"):
                path = host_path + path[len(mount_path):]
        args.append(flag + equals + path)
    return [sys.executable, "-m", "colocation", *(container.get("command") or [])[1:]], args


def container_args(container: Obj, env: dict[str, str]) -> list[str]:
    """The container's args with `$(VAR)` expanded, as the kubelet passes them."""
    return [expand_variables(str(arg), env) for arg in container.get("args") or ()]


def container_mounts(pod_spec: Obj, container: Obj, volume_dirs: Mapping[str, str]) -> list[tuple[str, str, bool]]:
    """(source on this machine, mountPath, readOnly) of each volume the container mounts: a hostPath
    volume's host path, or `volume_dirs`' directory for the volumes the kubelet made."""
    sources = {v["name"]: v["hostPath"]["path"] for v in pod_spec.get("volumes") or () if "hostPath" in v}
    sources.update(volume_dirs)
    return [(sources[m["name"]], m["mountPath"], bool(m.get("readOnly")))
            for m in container.get("volumeMounts") or () if m["name"] in sources]


def empty_dir_volumes(pod_spec: Obj) -> list[str]:
    """The names of the pod's emptyDir volumes."""
    return [v["name"] for v in pod_spec.get("volumes") or () if "emptyDir" in v]


def container_port(container: Obj, name: str, default: int) -> int:
    return next((int(p["containerPort"]) for p in container.get("ports") or () if p.get("name") == name), default)


def expand_variables(value: str, env: dict[str, str]) -> str:
    """`$(VAR)` as the kubelet expands it in args and env values; `$$(VAR)` stays literal."""
    return re.sub(r"\$\$\(|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$(" if m.group(0) == "$$(" else env.get(m.group(1), m.group(0)), value)


def secret_volumes(pod_spec: Obj) -> dict[str, Obj]:
    """The pod's Secret volumes: volume name -> its `secret` source (secretName, items, optional)."""
    return {v["name"]: v["secret"] for v in pod_spec.get("volumes") or () if "secret" in v}


def secret_files(source: Obj, secret: Obj) -> dict[str, bytes]:
    """The files a Secret volume holds: each key of the Secret's data (base64) under its own name,
    or, when the volume lists `items`, those keys only, each at its `path`."""
    data = {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}
    items = source.get("items")
    if not items:
        return data
    return {item["path"]: data[item["key"]] for item in items if item["key"] in data}


def write_secret_volume(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Write a Secret volume's files as the kubelet's atomic writer does, so a reader never sees a
    renewal half written: the files go to a new directory, the `..data` link is swapped to it in one
    rename, and each file's name is a link through `..data`. False when the files are already so."""
    directory.mkdir(parents=True, exist_ok=True)
    data_link = directory / "..data"
    if data_link.is_dir() and {p.name: p.read_bytes() for p in data_link.iterdir()} == dict(files):
        return False
    previous = os.readlink(data_link) if data_link.is_symlink() else None
    version = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns()}"
    version.mkdir()
    for name, content in files.items():
        (version / name).write_bytes(content)
        (version / name).chmod(0o644)
    new_link = directory / "..data_tmp"
    new_link.unlink(missing_ok=True)
    new_link.symlink_to(version.name)
    new_link.rename(data_link)
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(Path("..data") / name)
    for stale in directory.iterdir():
        if stale.is_symlink() and not stale.name.startswith("..") and stale.name not in files:
            stale.unlink()
    if previous is not None:
        for old in (directory / previous).iterdir():
            old.unlink()
        (directory / previous).rmdir()
    return True
