"""Realistic Nodes and Pods for capacity runs, generated deterministically from their index.

The shapes follow what a kubelet registers and what Deployments create on a real cluster (labels,
capacity and allocatable, conditions, 1-2 containers with requests and limits, the default
tolerations), so memory, list and watch figures reflect the bytes of a real cluster, not of
stubs. Everything is a pure function of (index, sizes): the baseline and the sandbox receive
exactly the same bodies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

_ZONES = ("zone-a", "zone-b", "zone-c")
_INSTANCE_TYPES = (("m6i.4xlarge", 16, 64), ("m6i.8xlarge", 32, 128), ("r6i.4xlarge", 16, 128))
# (app name, tier, cpu request in millicores, memory request in MiB, sidecar?)
_APPS = (("web", "frontend", 500, 512, True), ("api", "backend", 1000, 1024, True),
         ("worker", "batch", 2000, 4096, False), ("cache", "backend", 250, 2048, False),
         ("ingest", "batch", 1000, 2048, False), ("search", "backend", 1500, 3072, True))
_CREATED = "2026-11-22T00:00:00Z"
_STARTED = "2026-11-22T00:00:05Z"
_KUBELET = "v1.32.0"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what generateName suffixes are made of


@dataclass(frozen=True)
class Sizes:
    nodes: int
    pods_per_node: int
    namespaces: int

    @property
    def pods(self) -> int:
        return self.nodes * self.pods_per_node


def _digest(*parts: object, length: int = 10) -> str:
    return hashlib.blake2s("/".join(map(str, parts)).encode(), digest_size=8).hexdigest()[:length]


def namespace_name(index: int) -> str:
    return f"team-{index:02d}"


def namespace(index: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace_name(index), "labels": {"kubernetes.io/metadata.name":
                                                                    namespace_name(index)}}}


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def node(index: int) -> Obj:
    """A Node as a kubelet registers it (with its status: nodes are created with it)."""
    name = node_name(index)
    zone = _ZONES[index % len(_ZONES)]
    instance_type, cpus, memory_gib = _INSTANCE_TYPES[index % len(_INSTANCE_TYPES)]
    memory_ki = memory_gib * 1024 * 1024
    capacity = {"cpu": str(cpus), "memory": f"{memory_ki}Ki", "pods": "110", "ephemeral-storage": "203056560Ki",
                "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    allocatable = {"cpu": f"{cpus * 1000 - 600}m", "memory": f"{memory_ki - 1_800_000}Ki", "pods": "110",
                   "ephemeral-storage": "187136925387", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    condition = {"lastHeartbeatTime": _STARTED, "lastTransitionTime": _CREATED}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                       "node.kubernetes.io/instance-type": instance_type,
                       "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": zone,
                       "node-role.kubernetes.io/worker": ""},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": f"10.{index // 256 % 256}.{index % 256}.0/24",
                 "podCIDRs": [f"10.{index // 256 % 256}.{index % 256}.0/24"],
                 "providerID": f"sandbox://{zone}/{name}"},
        "status": {
            "capacity": capacity, "allocatable": allocatable,
            "conditions": [
                {**condition, "type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {**condition, "type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure"},
                {**condition, "type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available"},
                {**condition, "type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"},
            ],
            "addresses": [{"type": "InternalIP", "address": f"172.16.{index // 256 % 256}.{index % 256}"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": _digest("machine", index, length=32),
                         "systemUUID": _digest("uuid", index, length=32),
                         "bootID": _digest("boot", index, length=32), "kernelVersion": "6.1.0-27-amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.22",
                         "kubeletVersion": _KUBELET, "kubeProxyVersion": _KUBELET, "operatingSystem": "linux",
                         "architecture": "amd64"},
        },
    }


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    node: str


def _pod_suffix(index: int) -> str:
    """Five characters from generateName's alphabet, distinct for every index below 27**5 (14 million)."""
    digits = []
    for _ in range(5):
        index, digit = divmod(index, len(_SUFFIX_ALPHABET))
        digits.append(_SUFFIX_ALPHABET[digit])
    return "".join(digits)


def pod_ref(index: int, sizes: Sizes) -> PodRef:
    """Pod `index`: on node index % nodes (so every node fills evenly), in namespace index % namespaces."""
    app = _APPS[index % len(_APPS)][0]
    return PodRef(namespace_name(index % sizes.namespaces), f"{app}-{_digest('rs', index % 97, length=10)}-"
                  f"{_pod_suffix(index)}", node_name(index % sizes.nodes))


def _container(name: str, image: str, cpu_m: int, memory_mi: int, port: int | None) -> Obj:
    container: Obj = {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{memory_mi}Mi"},
                      "limits": {"cpu": f"{cpu_m * 2}m", "memory": f"{memory_mi}Mi"}},
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "LOG_LEVEL", "value": "info"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                          "readOnly": True}],
    }
    if port is not None:
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        container["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"},
                                       "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1,
                                       "failureThreshold": 3}
    return container


def pod(index: int, sizes: Sizes) -> Obj:
    """A scheduled Pod as a ReplicaSet creates it and the scheduler binds it (spec.nodeName set)."""
    ref = pod_ref(index, sizes)
    app, tier, cpu_m, memory_mi, sidecar = _APPS[index % len(_APPS)]
    template_hash = ref.name.split("-")[1]
    containers = [_container(app, f"registry.example.com/{app}:1.{index % 7}", cpu_m, memory_mi, 8080)]
    if sidecar:
        containers.append(_container("proxy", "registry.example.com/envoy:1.31", 100, 128, None))
    labels = {"app.kubernetes.io/name": app, "app": app, "tier": tier, "pod-template-hash": template_hash}
    if tier == "batch":
        labels["koordinator.sh/qosClass"] = "BE"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": ref.name, "namespace": ref.namespace, "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{template_hash}",
                                 "uid": _digest("rs-uid", ref.namespace, template_hash, length=32),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "nodeName": ref.node, "containers": containers, "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
            "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority", "securityContext": {},
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
        },
    }


def running_status(index: int, sizes: Sizes, restarts: int = 0) -> Obj:
    """The status a kubelet reports for a running pod, as its strategic merge patch of /status.

    containerStatuses has no merge key upstream, so a kubelet sends the whole list on every change
    (a restart too): the patch of a restart is this same body with a higher `restarts`.
    """
    ref = pod_ref(index, sizes)
    app, _, _, _, sidecar = _APPS[index % len(_APPS)]
    node_index = index % sizes.nodes
    names = [app, "proxy"] if sidecar else [app]
    condition = {"lastProbeTime": None, "lastTransitionTime": _STARTED, "status": "True"}
    return {"status": {
        "phase": "Running", "qosClass": "Burstable",
        "hostIP": f"172.16.{node_index // 256 % 256}.{node_index % 256}",
        "podIP": f"10.{node_index // 256 % 256}.{node_index % 256}.{index // sizes.nodes % 250 + 2}",
        "startTime": _STARTED,
        "conditions": [{**condition, "type": t} for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                                            "ContainersReady", "PodScheduled")],
        "containerStatuses": [
            {"name": name, "ready": True, "started": True, "restartCount": restarts,
             "image": f"registry.example.com/{name}", "imageID": f"sha256:{_digest('image', name, length=32)}",
             "containerID": f"containerd://{_digest('container', ref.name, name, length=32)}",
             "state": {"running": {"startedAt": _STARTED}}, "lastState": {}}
            for name in names],
    }}

