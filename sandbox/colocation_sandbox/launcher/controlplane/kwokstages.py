"""What kwok does to the simulated nodes and their pods, as kwok Stage objects (its configuration API).

Three transitions, the least that makes a fake node behave like a healthy kubelet's: a new node
becomes Ready with an address, and the port of its kubelet endpoint when kwok has a `--node-port`
(its Lease kwok renews by itself, every 10 s of a 40 s duration); a pending pod on it becomes
Running and Ready with an address from kwok's pool; a pod marked for deletion is removed, as the
kubelet does once its containers stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_READY_NODE = """\
{{ $now := Now }}
phase: Running
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
"""

_RUNNING_POD = """\
{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
conditions:
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
"""


def _stage(name: str, kind: str, expressions: list[dict[str, Any]], *, step: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind},
                     "selector": {"matchExpressions": expressions}, "next": step}}


def _not_ready() -> dict[str, Any]:
    return {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "NotIn",
            "values": ["True"]}


def stages() -> list[dict[str, Any]]:
    alive = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
    return [
        _stage("colocation-node-ready", "Node", [_not_ready()], step={"statusTemplate": _READY_NODE}),
        _stage("colocation-pod-running", "Pod",
               [alive, {"key": ".status.phase", "operator": "In", "values": ["Pending"]}, _not_ready()],
               step={"statusTemplate": _RUNNING_POD}),
        _stage("colocation-pod-deleted", "Pod",
               [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}], step={"delete": True}),
    ]


def write(path: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    """The stages, and `extra` kwok configuration documents after them, in one file for `--config`."""
    path.write_text(yaml.safe_dump_all([*stages(), *(extra or [])], sort_keys=False))
    return path
