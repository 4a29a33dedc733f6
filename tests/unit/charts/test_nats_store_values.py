"""The chart's store.* values: the operator's NATS flags and mounts, the servers it deploys, and the
combinations it refuses. With store.nats.deploy at its defaults the chart renders the nats-store
component exactly (test_chart); here, what the values change."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.charts.helm_chart import CHART, helm, render, set_args
from tests.unit.manifests.test_nats_store_component import (
    CONFIG_TEST_SECONDS,
    local_config,
    local_files,
    nats_config,
    nats_pod,
    nats_server_binary,
    pod_env,
)

DEPLOYED = {"store.type": "nats", "store.nats.deploy": True}
# What `store.nats.deploy` serves clients on: the nats-store component's Service.
DEPLOYED_URL = "tls://colocation-nats.colocation-system.svc:4222"


def operator(objects: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The operator's args, its mounts by path, and its volumes by name."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "colocation-operator"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return (list(container["args"]), {m["mountPath"]: m for m in container["volumeMounts"]},
            {v["name"]: v for v in pod["volumes"]})


def nats_args(args: list[str]) -> list[str]:
    return [arg for arg in args if arg.startswith(("--store", "--nats-"))]


def test_the_memory_store_is_the_default_and_installs_no_nats(helm_path: str) -> None:
    objects = render(helm_path)
    args, mounts, _ = operator(objects)
    assert nats_args(args) == []
    assert set(mounts) == {"/tmp"}
    assert [o for o in objects if "nats" in o["metadata"]["name"]] == []


def test_your_own_servers_with_tls_and_a_user(helm_path: str) -> None:
    objects = render(helm_path, {
        "store.type": "nats", "store.nats.servers": ["tls://nats-a.example:4222", "tls://nats-b.example:4222"],
        "store.nats.tlsSecret": "my-nats-ca", "store.nats.user": "colocation", "store.nats.passwordSecret": "my-pw",
        "store.nats.storage": "memory", "store.nats.replicas": 5})
    args, mounts, volumes = operator(objects)
    assert nats_args(args) == [
        "--store=nats", "--nats-server=tls://nats-a.example:4222", "--nats-server=tls://nats-b.example:4222",
        "--nats-ca-file=/etc/colocation/nats-ca/ca.crt", "--nats-user=colocation",
        "--nats-password-file=/etc/colocation/nats-password/password", "--nats-storage=memory", "--nats-replicas=5"]
    for flag, secret, key in (("--nats-ca-file", "my-nats-ca", "ca.crt"),
                              ("--nats-password-file", "my-pw", "password")):
        path = Path(next(arg.split("=", 1)[1] for arg in args if arg.startswith(flag + "=")))
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["secret"] == {"secretName": secret, "items": [{"key": key, "path": path.name}]}
    # No servers of the chart's: the operator connects to yours.
    assert [o for o in objects if o["kind"] in ("StatefulSet", "ConfigMap") and "nats" in o["metadata"]["name"]] == []


def test_your_own_servers_without_tls_or_users(helm_path: str) -> None:
    objects = render(helm_path, {"store.type": "nats", "store.nats.servers": ["nats://nats.example:4222"],
                                 "store.nats.tlsSecret": "", "store.nats.user": "", "store.nats.passwordSecret": ""})
    args, mounts, _ = operator(objects)
    assert nats_args(args) == ["--store=nats", "--nats-server=nats://nats.example:4222", "--nats-storage=file",
                               "--nats-replicas=3"]
    assert set(mounts) == {"/tmp"}


def test_evaluation_shards_reach_the_operator_only_above_one(helm_path: str) -> None:
    own: dict[str, object] = {"store.type": "nats", "store.nats.servers": ["nats://nats.example:4222"]}
    args, _, _ = operator(render(helm_path, {**own, "store.nats.evaluationShards": 4}))
    assert [arg for arg in args if arg.startswith("--evaluation-shards")] == ["--evaluation-shards=4"]
    args, _, _ = operator(render(helm_path, own))
    assert [arg for arg in args if arg.startswith("--evaluation-shards")] == []  # 1: the operator's default


def test_values_reach_the_deployed_servers(helm_path: str) -> None:
    objects = render(helm_path, {
        **DEPLOYED, "store.nats.image.repository": "registry.example.com/nats", "store.nats.image.tag": "2.15.2-alpine",
        "store.nats.resources.limits.memory": "2Gi", "store.nats.volumeSizeGi": 20,
        "store.nats.storageClassName": "fast-ssd", "store.nats.user": "colocation",
        "store.nats.passwordSecret": "my-pw", "store.nats.tlsSecret": "my-nats-tls", "store.nats.replicas": 1})
    pod = nats_pod(objects)["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/nats:2.15.2-alpine"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    (statefulset,) = [o for o in objects if o["kind"] == "StatefulSet"]
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    config = nats_config(objects)
    assert re.findall(r"max_file_store: (\S+)", config) == ["16GB"]  # 80 % of the volume
    assert "{user: colocation, password: $OPERATOR_PASSWORD}" in config
    password = next(e for e in container["env"] if e["name"] == "OPERATOR_PASSWORD")["valueFrom"]["secretKeyRef"]
    assert password == {"name": "my-pw", "key": "password"}
    assert {"name": "tls", "secret": {"secretName": "my-nats-tls"}} in pod["volumes"]
    args, _, volumes = operator(objects)
    assert nats_args(args)[:2] == ["--store=nats", f"--nats-server={DEPLOYED_URL}"]
    assert "--nats-replicas=1" in args and "--nats-user=colocation" in args
    assert volumes["nats-ca"]["secret"]["secretName"] == "my-nats-tls"


def test_nats_server_accepts_the_configuration_of_other_values(
    helm_path: str, tmp_path: Path
) -> None:
    nats_server = nats_server_binary()
    objects = render(helm_path, {**DEPLOYED, "store.nats.volumeSizeGi": 7, "store.nats.user": "colocation_op-1.a"})
    files = local_files(tmp_path)
    config = tmp_path / "nats.conf"
    config.write_text(local_config(objects, files, data_dir=tmp_path / "data"))
    result = subprocess.run([nats_server, "--config", str(config), "-t"], capture_output=True, text=True,
                            env=pod_env(objects, pod_name="colocation-nats-0", password=files.password),
                            timeout=CONFIG_TEST_SECONDS, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("values", "message"), [
    ({"store.type": "nats"}, "store.type=nats needs NATS servers: set store.nats.deploy=true to install 3 with the "
                             "chart, or list yours in store.nats.servers"),
    ({"store.nats.deploy": True}, "store.nats.deploy=true installs NATS for store.type=nats, but store.type is memory"),
    ({**DEPLOYED, "store.nats.servers": ["tls://nats.example:4222"]},
     "store.nats.deploy=true connects the operator to the servers it installs: leave store.nats.servers empty"),
    ({**DEPLOYED, "store.nats.replicas": 5},
     "store.nats.replicas=5: the 3 servers of store.nats.deploy hold at most 3 replicas of the bucket"),
    ({**DEPLOYED, "store.nats.storage": "memory"}, "store.nats.storage=memory: the servers of store.nats.deploy keep"),
    ({**DEPLOYED, "store.nats.tlsSecret": ""}, "store.nats.deploy=true serves clients with TLS and a password"),
    ({**DEPLOYED, "store.nats.user": "", "store.nats.passwordSecret": ""},
     "store.nats.deploy=true serves clients with TLS and a password"),
    ({"store.type": "nats", "store.nats.servers": ["nats://nats.example:4222"], "store.nats.passwordSecret": ""},
     "store.nats.user needs its password: set store.nats.passwordSecret"),
    ({"store.type": "nats", "store.nats.servers": ["nats://nats.example:4222"], "store.nats.user": ""},
     "store.nats.passwordSecret is the password of store.nats.user"),
    ({"store.type": "etcd"}, "at '/store/type'"),
    ({"store.type": "nats", "store.nats.servers": ["https://nats.example:4222"]}, "at '/store/nats/servers/0'"),
    ({"store.nats.replicas": 6}, "at '/store/nats/replicas': maximum: got 6, want 5"),
    ({"store.nats.evaluationShards": 17}, "at '/store/nats/evaluationShards': maximum: got 17, want 16"),
    ({"store.nats.volumeSizeGi": 2}, "at '/store/nats/volumeSizeGi': minimum: got 2, want 4"),
    ({"store.nats.user": "colocation operator"}, "at '/store/nats/user'"),
    ({"store.nats.image.pullPolicy": "Sometimes"}, "at '/store/nats/image/pullPolicy'"),
    # A password is never a value (it would be in the release's Secret and in `helm get values`).
    ({"store.nats.password": "hunter2"}, "additional properties 'password' not allowed"),
], ids=lambda value: str(value) if isinstance(value, dict) else "")
def test_bad_store_values_fail_saying_what_to_set(helm_path: str, values: dict[str, object], message: str) -> None:
    result = helm(helm_path, "template", "colocation", str(CHART), *set_args(values), check=False)
    assert result.returncode != 0 and result.stdout == ""
    assert message in result.stderr, result.stderr
