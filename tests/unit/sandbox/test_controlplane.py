"""The real control plane's launcher: the pure parts (commands, environment, addresses, certificates, kwok)."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from colocation.agent import synthetic
from colocation_sandbox.launcher.controlplane import kwokstages, metricsserver, pki
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary
from colocation_sandbox.launcher.controlplane.components import audit_flags
from colocation_sandbox.launcher.controlplane.container_spec import (
    container_args,
    container_command,
    container_environment,
    container_mounts,
    empty_dir_volumes,
    expand_variables,
    secret_files,
    write_secret_volume,
)
from colocation_sandbox.launcher.controlplane.image_root import ImageUnavailable, numeric_user, pod_user
from colocation_sandbox.launcher.controlplane.kube_sandbox import KubeSandboxConfig, _project_objects
from colocation_sandbox.launcher.controlplane.podnetwork import SUPERNET, free_subnet, owner_pid

REPO = Path(__file__).resolve().parents[3]


def agent_pod_spec() -> dict[str, Any]:
    """The agent DaemonSet's pod template spec, as manifests/agent.yaml writes it."""
    documents = list(yaml.safe_load_all((REPO / "manifests" / "agent.yaml").read_text()))
    daemonset = next(d for d in documents if d["kind"] == "DaemonSet")
    return dict(daemonset["spec"]["template"]["spec"])


def test_variables_expand_as_the_kubelet_does() -> None:
    env = {"NODE_NAME": "node-1"}
    assert expand_variables("--node-name=$(NODE_NAME)", env) == "--node-name=node-1"
    assert expand_variables("$$(NODE_NAME)", env) == "$(NODE_NAME)"  # escaped: left literal
    assert expand_variables("$(UNSET)", env) == "$(UNSET)"  # unknown: left as written


def test_the_agent_container_runs_with_its_own_args_and_host_paths() -> None:
    spec = agent_pod_spec()
    container = spec["containers"][0]
    env = container_environment(container, {"spec.nodeName": "node-1", "metadata.name": "colocation-agent-x",
                                            "metadata.namespace": "colocation-system"})
    assert env["NODE_NAME"] == "node-1" and env["POD_NAME"] == "colocation-agent-x" and env["TZ"] == "UTC"
    program, args = container_command(spec, container, env)
    assert program == [sys.executable, "-m", "colocation"]
    # The manifest's args, with the variable expanded and the hostPath mounts read from the host.
    assert args[:3] == ["agent", "--node-name", "node-1"]
    assert args[args.index("--proc-root") + 1] == "/proc"
    assert args[args.index("--cgroup-root") + 1] == "/sys/fs/cgroup"


def test_in_the_image_the_agent_gets_its_mounts_and_its_pods_user() -> None:
    """With --image, the manifest's volumes are mounted where it says (the emptyDir: the kubelet's
    directory), its args stay as written, and it runs as its securityContext's user."""
    spec = agent_pod_spec()
    container = spec["containers"][0]
    assert empty_dir_volumes(spec) == ["tmp"]
    mounts = container_mounts(spec, container, {"tmp": "/state/volumes/tmp"})
    assert sorted(mounts) == [("/proc", "/host/proc", True), ("/state/volumes/tmp", "/tmp", False),
                              ("/sys/fs/cgroup", "/host/sys/fs/cgroup", True)]
    args = container_args(container, {"NODE_NAME": "node-1"})
    assert args[args.index("--proc-root") + 1] == "/host/proc"
    assert pod_user(spec, container, (1000, 1000)) == (65532, 65532)
    assert pod_user({}, {"securityContext": {"runAsUser": 7}}, (1000, 1001)) == (7, 1001)
    assert numeric_user("65532:65532") == (65532, 65532) and numeric_user("5") == (5, 5)
    with pytest.raises(ImageUnavailable):
        numeric_user("colocation")


def test_a_path_that_only_starts_like_a_mount_is_not_rewritten() -> None:
    spec = {"volumes": [{"name": "host", "hostPath": {"path": "/real"}}]}
    container = {"command": ["colocation"], "args": ["x", "/hostile", "/host", "/host/a"],
                 "volumeMounts": [{"name": "host", "mountPath": "/host"}]}
    assert container_command(spec, container, {})[1] == ["x", "/hostile", "/real", "/real/a"]


def operator_pod_spec_with_cert_manager() -> dict[str, Any]:
    """The operator Deployment's pod spec as manifests/ renders with the cert-manager component."""
    from colocation_sandbox.launcher.project_install import render_manifests

    kubectl = kubectl_binary()
    if kubectl is None:
        pytest.skip("no kubectl to render the manifests with kustomize")
    objects = render_manifests(REPO, components=("cert-manager",), kubectl=kubectl)
    deployment = next(o for o in objects
                      if o["kind"] == "Deployment" and o["metadata"]["name"] == "colocation-operator")
    return dict(deployment["spec"]["template"]["spec"])


def test_a_secret_volume_is_read_from_the_directory_the_kubelet_wrote() -> None:
    spec = operator_pod_spec_with_cert_manager()
    container = spec["containers"][0]
    args = container_command(spec, container, {},
                             volume_dirs={"serving-certificate": "/state/volumes/op/serving-certificate"})[1]
    assert "--tls-cert-file=/state/volumes/op/serving-certificate/tls.crt" in args
    assert "--tls-ca-file=/state/volumes/op/serving-certificate/ca.crt" in args


def test_a_secret_volume_holds_its_keys_or_its_items() -> None:
    secret = {"data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}}
    assert secret_files({"secretName": "s"}, secret) == {"tls.crt": b"cert", "tls.key": b"key"}
    items = {"secretName": "s", "items": [{"key": "tls.key", "path": "private.pem"}]}
    assert secret_files(items, secret) == {"private.pem": b"key"}


def test_a_secret_volume_is_replaced_at_once_and_only_when_it_changed(tmp_path: Path) -> None:
    volume = tmp_path / "serving"
    assert write_secret_volume(volume, {"tls.crt": b"cert-1", "tls.key": b"key-1", "old": b"x"})
    opened = (volume / "tls.crt").open("rb")  # a reader holding the first version
    assert not write_secret_volume(volume, {"tls.crt": b"cert-1", "tls.key": b"key-1", "old": b"x"})
    assert write_secret_volume(volume, {"tls.crt": b"cert-2", "tls.key": b"key-2"})
    # Both files of the new version through the one `..data` link, swapped in one rename; the
    # key the Secret lost is gone, and so is the previous version's directory.
    assert (volume / "tls.crt").read_bytes() == b"cert-2" and (volume / "tls.key").read_bytes() == b"key-2"
    assert (volume / "tls.crt").is_symlink() and os.readlink(volume / "tls.crt") == "..data/tls.crt"
    assert not (volume / "old").exists()
    assert sorted(p.name for p in volume.iterdir() if p.name.startswith("..") and p.is_dir()
                  and not p.is_symlink()) == [os.readlink(volume / "..data")]
    with opened:
        assert opened.read() == b"cert-1"


def test_the_pod_network_takes_a_subnet_no_route_uses() -> None:
    first = free_subnet([])
    assert first == ipaddress.ip_network("10.244.1.0/24")  # 10.244.0.0/24 is left alone
    taken = free_subnet(["default", "10.244.1.0/24", "10.244.2.0/23", "192.168.1.0/24", "not-an-address"])
    assert taken == ipaddress.ip_network("10.244.4.0/24")
    with pytest.raises(RuntimeError, match="no free /24"):
        free_subnet([str(SUPERNET)])


def test_leftovers_are_recognised_by_the_pid_in_their_name() -> None:
    assert owner_pid("colob1f2a") == 0x1F2A
    assert owner_pid("colon1f2a-12") == 0x1F2A
    assert owner_pid("eth0") is None and owner_pid("colo") is None and owner_pid("colobxyz") is None


def test_certificates_name_every_address_and_group(tmp_path: Path) -> None:
    made = pki.create(tmp_path / "pki", apiserver_ips=("10.244.1.1", "10.96.0.1"))
    serving = x509.load_pem_x509_certificate((tmp_path / "pki" / "apiserver.crt").read_bytes())
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"10.244.1.1", "10.96.0.1"}
    assert "kubernetes.default.svc" in names.get_values_for_type(x509.DNSName)
    cert_path, key_path = made.client("node-a", "system:node:a", ("system:nodes",))
    client = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:a"
    assert [a.value for a in client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    assert oct(Path(key_path).stat().st_mode & 0o777) == "0o600"
    # Issued once: asking again gives the same certificate.
    assert made.client("node-a", "system:node:a", ("system:nodes",)) == (cert_path, key_path)
    assert Path(cert_path).read_bytes() == client.public_bytes(serialization.Encoding.PEM)


def test_kwok_is_told_three_transitions(tmp_path: Path) -> None:
    written = list(yaml.safe_load_all(kwokstages.write(tmp_path / "stages.yaml").read_text()))
    assert [(s["spec"]["resourceRef"]["kind"], s["metadata"]["name"]) for s in written] == [
        ("Node", "colocation-node-ready"), ("Pod", "colocation-pod-running"), ("Pod", "colocation-pod-deleted")]
    running = written[1]["spec"]
    assert {"key": ".status.phase", "operator": "In", "values": ["Pending"]} in running["selector"]["matchExpressions"]
    assert "podIP:" in running["next"]["statusTemplate"] and "\\\n" not in running["next"]["statusTemplate"]
    assert written[2]["spec"]["next"] == {"delete": True}


def test_kwok_gives_nodes_their_kubelet_port_and_resource_metrics_when_asked(tmp_path: Path) -> None:
    written = list(yaml.safe_load_all(kwokstages.write(tmp_path / "stages.yaml",
                                                       metricsserver.kwok_documents()).read_text()))
    assert [d["kind"] for d in written] == ["Stage", "Stage", "Stage", "ClusterResourceUsage", "Metric"]
    ready = written[0]["spec"]["next"]["statusTemplate"]
    assert "{{ with NodePort }}" in ready and "Port: {{ . }}" in ready  # no port: no daemonEndpoints
    usage, metric = written[3], written[4]
    assert metricsserver.metrics_path("n") == metric["spec"]["path"].replace("{nodeName}", "n")
    names = {m["name"]: m for m in metric["spec"]["metrics"]}
    # What metrics-server reads of a kubelet's /metrics/resource.
    assert {"node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes", "container_start_time_seconds"} <= set(names)
    assert synthetic.SYSTEM_CPU_ANNOTATION in names["node_cpu_usage_seconds_total"]["value"]
    cpu = usage["spec"]["usages"][0]["usage"]["cpu"]["expression"]
    assert synthetic.CPU_USAGE_ANNOTATION in cpu


def test_metrics_server_replicas_each_get_an_endpoint_behind_one_apiservice() -> None:
    made = metricsserver.routing_objects("10.244.1.1", [4443, 4444], b"CA")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in made:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (apiservice,) = by_kind["APIService"]
    assert apiservice["metadata"]["name"] == "v1beta1.metrics.k8s.io"
    assert apiservice["spec"]["service"] == {"namespace": "kube-system", "name": "metrics-server", "port": 443}
    (service,) = by_kind["Service"]
    assert "selector" not in service["spec"]  # its endpoints are ours: the processes are no pods
    assert [(s["endpoints"][0]["addresses"], s["ports"][0]["port"]) for s in by_kind["EndpointSlice"]] == [
        (["10.244.1.1"], 4443), (["10.244.1.1"], 4444)]
    assert all(s["metadata"]["labels"]["kubernetes.io/service-name"] == "metrics-server"
               for s in by_kind["EndpointSlice"])


@pytest.mark.skipif(kubectl_binary() is None, reason="no kubectl to render manifests/ with")
def test_the_operator_count_and_the_apiservices_follow_the_flags() -> None:
    two = _project_objects(REPO, KubeSandboxConfig(state_dir=Path("unused"), operators=3,
                                                   components=("resource-metrics",)), str(kubectl_binary()))
    deployment = next(o for o in two if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert {o["metadata"]["name"] for o in two if o["kind"] == "APIService"} == {
        "v1alpha1.metrics.colocation.dev", "v1beta1.metrics.k8s.io"}
    none = _project_objects(REPO, KubeSandboxConfig(state_dir=Path("unused"), operators=0), str(kubectl_binary()))
    assert not [o for o in none if o["kind"] == "APIService"]  # nobody would serve them


def test_the_audit_log_is_opt_in_and_records_writes_only(tmp_path: Path) -> None:
    assert audit_flags(tmp_path, None) == []
    flags = audit_flags(tmp_path, tmp_path / "logs" / "audit.log")
    options = dict(zip(flags[::2], flags[1::2], strict=True))
    assert options["--audit-log-path"] == str(tmp_path / "logs" / "audit.log")
    policy = yaml.safe_load(Path(options["--audit-policy-file"]).read_text())
    assert policy["kind"] == "Policy" and policy["omitStages"] == ["RequestReceived"]
    reviews, writes, last = policy["rules"]
    # TokenReviews and SubjectAccessReviews are creates that store nothing: not writes to count.
    assert reviews == {"level": "None", "resources": [{"group": "authentication.k8s.io"},
                                                      {"group": "authorization.k8s.io"}]}
    assert writes["level"] == "Metadata" and {"create", "update", "patch", "delete"} <= set(writes["verbs"])
    assert last == {"level": "None"}  # reads are not logged
