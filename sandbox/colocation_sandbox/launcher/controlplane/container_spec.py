"""What the launcher's kubelet runs for a container of our image (pure): its environment and command.

The kubelet resolves `$(VAR)` and the downward API in env and args; hostPath mounts are read from
the host path, since the process runs on this machine, not in the container's filesystem.
"""

from __future__ import annotations

import re
import sys

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


def container_command(pod_spec: Obj, container: Obj, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(program, args) for a `colocation` container, run here by this Python: `$(VAR)` expanded in
    args, and every path under a hostPath volume's mountPath read from the host path instead (what
    the container sees there is the host's)."""
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or ()}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod_spec.get("volumes") or () if "hostPath" in v}
    rewrites = [(mounts[name], path) for name, path in host_paths.items() if name in mounts]
    args = []
    for arg in container.get("args") or ():
        value = expand_variables(str(arg), env)
        for mount_path, host_path in rewrites:
            if value == mount_path or value.startswith(mount_path + "/"):
                value = host_path + value[len(mount_path):]
        args.append(value)
    return [sys.executable, "-m", "colocation", *(container.get("command") or [])[1:]], args


def container_port(container: Obj, name: str, default: int) -> int:
    return next((int(p["containerPort"]) for p in container.get("ports") or () if p.get("name") == name), default)


def expand_variables(value: str, env: dict[str, str]) -> str:
    """`$(VAR)` as the kubelet expands it in args and env values; `$$(VAR)` stays literal."""
    return re.sub(r"\$\$\(|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$(" if m.group(0) == "$$(" else env.get(m.group(1), m.group(0)), value)
