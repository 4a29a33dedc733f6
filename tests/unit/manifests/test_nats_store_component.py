"""manifests/components/nats-store: 3 nats-servers with JetStream, and the operator on them with TLS and a password.

Rendered, and checked with Kubernetes' schemas; its nats-server configuration is checked by
nats-server itself (`-t`), and run: 3 servers of it on loopback take the operator's stream, with
the operator's own flags parsed by its command. Not run on a Kubernetes cluster here.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import nats
import pytest

from colocation.apimachinery.certificates import issue_certificate, new_ca
from colocation.jetstream.nats_connection import NatsOptions, connect
from colocation.jetstream.nodemetric_log import LogSettings, ensure_stream, last_sequence, subject_of
from colocation.kube import permissions
from colocation.manager.operator_command import operator_command
from colocation_sandbox.launcher.child_processes import start_logged
from colocation_sandbox.launcher.nats_cluster import (
    NatsCluster,
    NatsServer,
    NatsServerMissing,
    locate_nats_server,
)
from colocation_sandbox.launcher.port_claims import free_port
from colocation_sandbox.launcher.project_install import render_manifests
from tests.unit.manifests.test_manifests import KUBECTL, KUBERNETES_VERSIONS, REPO, env_of, find, operator_args

NS = permissions.OPERATOR_NAMESPACE
SERVERS = "colocation-nats"  # the StatefulSet
TLS_SECRET = "colocation-nats-tls"
PASSWORD_SECRET = ("colocation-nats-operator", "password")
# The names docs/install.md tells users to put in the servers' certificate.
CLIENT_NAME = f"colocation-nats.{NS}.svc"
ROUTE_NAMES = f"*.colocation-nats-headless.{NS}.svc"
NATS_FLAGS = ("--store", "--nats-server", "--nats-ca-file", "--nats-user", "--nats-password-file",
              "--nats-storage", "--nats-replicas")
CONFIG_TEST_SECONDS = 30


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    return render_manifests(REPO)


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """manifests/ with components/nats-store, through an overlay as docs/install.md shows."""
    if KUBECTL is None:
        pytest.skip("no kubectl (neither built by hack/kube/build.sh nor on the PATH): manifests/ cannot be rendered")
    return render_manifests(REPO, components=("nats-store",))


def nats_server_binary() -> str:
    """nats-server, or a skip saying how to build it."""
    try:
        return locate_nats_server(build=False)
    except NatsServerMissing as missing:
        pytest.skip(f"nats-server is not built (make nats): {missing}")


@pytest.fixture(scope="module")
def nats_server() -> str:
    return nats_server_binary()


def nats_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = find(objects, "StatefulSet", SERVERS, NS)["spec"]["template"]
    return pod


def nats_config(objects: list[dict[str, Any]]) -> str:
    """nats.conf of the ConfigMap the servers mount, found through the pod's volume."""
    pod = nats_pod(objects)["spec"]
    (container,) = pod["containers"]
    config_path = PurePosixPath(container["command"][container["command"].index("--config") + 1])
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    configmap = find(objects, "ConfigMap", volumes[mount["name"]]["configMap"]["name"], NS)
    text: str = configmap["data"][config_path.name]
    return text


def conf_values(text: str, key: str) -> list[str]:
    """Every value of `key: value` lines in a nats-server configuration."""
    return re.findall(rf"^\s*{key}:\s*(\S+?)\s*$", text, re.MULTILINE)


def routes(text: str) -> list[str]:
    (block,) = re.findall(r"routes:\s*\[(.*?)\]", text, re.DOTALL)
    return str(block).split()


def parsed_operator_flags(objects: list[dict[str, Any]], files: dict[str, Path] | None = None) -> dict[str, Any]:
    """The operator's options as its command parses the rendered args; a mounted file's path is
    replaced by `files[path]` (click checks that the files exist)."""
    args = operator_args(objects)
    for path, local in (files or {}).items():
        args = [arg.replace(f"={path}", f"={local}") for arg in args]
    assert args[0] == "operator"
    return dict(operator_command.make_context("operator", args[1:]).params)


def flag_values(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in operator_args(objects) if arg.startswith(("--store", "--nats-")))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_component_renders_valid_kubernetes(rendered: list[dict[str, Any]], version: str) -> None:
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "colocation", obj["metadata"]


def test_it_adds_the_servers_and_changes_only_the_operator(
    base: list[dict[str, Any]], rendered: list[dict[str, Any]]
) -> None:
    added = [o for o in rendered if o not in base and o["kind"] != "Deployment"]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in added) == [
        ("ConfigMap", SERVERS), ("PodDisruptionBudget", SERVERS), ("Service", SERVERS),
        ("Service", "colocation-nats-headless"), ("StatefulSet", SERVERS)]
    # The agents never talk to NATS: their DaemonSet is the base's.
    assert find(rendered, "DaemonSet", "colocation-agent", NS) == find(base, "DaemonSet", "colocation-agent", NS)
    assert operator_args(rendered)[:len(operator_args(base))] == operator_args(base)


def test_the_operator_reaches_the_client_service_over_tls_as_its_user(rendered: list[dict[str, Any]]) -> None:
    flags = flag_values(rendered)
    assert set(flags) == set(NATS_FLAGS)
    assert {opt for param in operator_command.params for opt in param.opts} >= set(NATS_FLAGS)
    assert flags["--store"] == "nats"
    url = urlsplit(flags["--nats-server"])
    service = find(rendered, "Service", SERVERS, NS)
    (port,) = service["spec"]["ports"]
    assert (url.scheme, url.hostname, url.port) == ("tls", CLIENT_NAME, port["port"])
    assert service["spec"]["selector"].items() <= nats_pod(rendered)["metadata"]["labels"].items()
    (container,) = nats_pod(rendered)["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == 4222
    assert conf_values(nats_config(rendered), "listen")[0] == "0.0.0.0:4222"  # the top-level (client) listen
    # The servers know the operator by that user name.
    assert re.search(rf"\{{user: {re.escape(flags['--nats-user'])}, password: ", nats_config(rendered))


def test_the_operator_mounts_the_ca_and_its_password_read_only_and_never_the_servers_key(
    rendered: list[dict[str, Any]]
) -> None:
    flags = flag_values(rendered)
    pod = find(rendered, "Deployment", "colocation-operator", NS)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}

    def secret_file(path: str) -> tuple[str, str]:
        mount = mounts[str(PurePosixPath(path).parent)]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        (item,) = [i for i in secret["items"] if i["path"] == PurePosixPath(path).name]
        return secret["secretName"], item["key"]

    assert secret_file(flags["--nats-ca-file"]) == (TLS_SECRET, "ca.crt")
    assert secret_file(flags["--nats-password-file"]) == PASSWORD_SECRET
    # Only those two keys reach the operator's pods: tls.key stays with the servers.
    mounted_keys = {(v["secret"]["secretName"], i["key"]) for v in volumes.values() if "secret" in v
                    for i in v["secret"].get("items", [{"key": "*"}])}
    assert mounted_keys == {(TLS_SECRET, "ca.crt"), PASSWORD_SECRET}


def test_the_password_is_in_no_configmap_and_no_argument(rendered: list[dict[str, Any]]) -> None:
    """The servers take it from the operator's Secret through an environment variable."""
    config = nats_config(rendered)
    passwords = re.findall(r"password:\s*([^,}\s]+)", config)
    assert passwords and all(p.startswith("$") for p in passwords), passwords
    (container,) = nats_pod(rendered)["spec"]["containers"]
    env = env_of(container)
    for reference in set(passwords):
        source = env[reference.removeprefix("$")]["secretKeyRef"]
        assert (source["name"], source["key"]) == PASSWORD_SECRET
    assert not any("password" in arg.lower() and not arg.startswith("--nats-password-file=")
                   for arg in [*operator_args(rendered), *container["command"], *container.get("args", [])])
    assert not any(re.search(r"password:\s*[^$\s]", value) for o in rendered if o["kind"] in ("ConfigMap", "Secret")
                   for value in o.get("data", {}).values())


def test_three_servers_keep_a_quorum_through_one_disruption(rendered: list[dict[str, Any]]) -> None:
    statefulset = find(rendered, "StatefulSet", SERVERS, NS)
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["replicas"] == 3
    assert int(flag_values(rendered)["--nats-replicas"]) <= statefulset["spec"]["replicas"]
    pdb = find(rendered, "PodDisruptionBudget", SERVERS, NS)["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    (term,) = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    # Each server keeps its stream on a volume of its own, where the configuration stores it.
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    (data,) = [m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    assert conf_values(nats_config(rendered), "store_dir") == [data["mountPath"]]


def test_the_routes_name_every_server_through_the_headless_service(rendered: list[dict[str, Any]]) -> None:
    statefulset = find(rendered, "StatefulSet", SERVERS, NS)
    headless = find(rendered, "Service", statefulset["spec"]["serviceName"], NS)
    assert headless["spec"]["clusterIP"] == "None"
    # Servers find each other before any is ready.
    assert headless["spec"]["publishNotReadyAddresses"] is True
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    (port,) = headless["spec"]["ports"]
    config = nats_config(rendered)
    pods = [f"{SERVERS}-{index}" for index in range(statefulset["spec"]["replicas"])]
    assert routes(config) == [f"nats://{pod}.{headless['metadata']['name']}.{NS}.svc:{port['port']}" for pod in pods]
    assert conf_values(config, "listen")[1] == f"0.0.0.0:{port['port']}"  # the cluster block's
    # A route verifies its peer's certificate both ways; its host name is the certificate's wildcard name.
    (cluster_tls,) = re.findall(r"cluster\s*\{.*?\btls\s*\{(.*?)\}", config, re.DOTALL)
    assert conf_values(cluster_tls, "verify") == ["true"]
    assert all(str(urlsplit(route).hostname).partition(".")[2] == ROUTE_NAMES.removeprefix("*.")
               for route in routes(config))


def test_the_servers_run_non_root_on_a_read_only_root_and_are_probed_on_jetstream(
    rendered: list[dict[str, Any]]
) -> None:
    pod = nats_pod(rendered)["spec"]
    (container,) = pod["containers"]
    context = {**pod["securityContext"], **container["securityContext"]}
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]} and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
    # Pinned: a release, never a moving tag.
    assert re.fullmatch(r"nats:2\.15\.2-alpine", container["image"])
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly", False)]
    assert writable == conf_values(nats_config(rendered), "store_dir")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert conf_values(nats_config(rendered), "http") == [f"0.0.0.0:{ports['monitor']}"]
    for probe in ("livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert (get["path"], ports[get["port"]]) == ("/healthz?js-enabled-only=true", ports["monitor"])


# --- nats-server on the rendered configuration ----------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class LocalFiles:
    """The Secrets' files as the pods would mount them, in a temporary directory."""

    tls_dir: Path
    password_file: Path
    password: str


def local_files(directory: Path) -> LocalFiles:
    ca = new_ca("colocation-nats-test-ca")
    # The names docs/install.md says, and localhost for the routes and clients of this test.
    serving = issue_certificate(ca, "colocation-nats", dns_names=[CLIENT_NAME, ROUTE_NAMES, "localhost"],
                                server=True, client=True)
    tls_dir = directory / "tls"
    serving.write(tls_dir, "tls")
    (tls_dir / "ca.crt").write_bytes(ca.cert_pem)
    # Starts with digits, as `openssl rand -hex 32` may: the servers must still read a string.
    password = "0123456789abcdef0123456789abcdef"
    password_file = directory / "password"
    password_file.write_text(password + "\n")  # a file made by hand ends with a newline
    return LocalFiles(tls_dir=tls_dir, password_file=password_file, password=password)


def mount_path(pod: dict[str, Any], volume_name: str) -> str:
    (container,) = pod["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume_name]
    path: str = mount["mountPath"]
    return path


def replaced(text: str, old: str, new: str, *, count: int) -> str:
    assert text.count(old) == count, f"{old!r} is in the configuration {text.count(old)} times, not {count}"
    return text.replace(old, new)


def local_config(objects: list[dict[str, Any]], files: LocalFiles, *, data_dir: Path) -> str:
    """nats.conf with the pod's mount paths replaced by local ones."""
    pod = nats_pod(objects)
    (tls_volume,) = [v for v in pod["spec"]["volumes"] if v.get("secret", {}).get("secretName") == TLS_SECRET]
    text = replaced(nats_config(objects), mount_path(pod, tls_volume["name"]) + "/", f"{files.tls_dir}/", count=6)
    (claim,) = find(objects, "StatefulSet", SERVERS, NS)["spec"]["volumeClaimTemplates"]
    data = mount_path(pod, claim["metadata"]["name"])
    return replaced(text, f"store_dir: {data}\n", f"store_dir: {data_dir}\n", count=1)


def pod_env(objects: list[dict[str, Any]], *, pod_name: str, password: str) -> dict[str, str]:
    """The environment the kubelet gives the server container, and nothing else."""
    (container,) = nats_pod(objects)["spec"]["containers"]
    env = {}
    for name, value in env_of(container).items():
        if value == {"fieldRef": {"fieldPath": "metadata.name"}}:
            env[name] = pod_name
        elif (value["secretKeyRef"]["name"], value["secretKeyRef"]["key"]) == PASSWORD_SECRET:
            env[name] = password
    assert env.keys() == env_of(container).keys(), "an environment variable this test cannot fill in"
    return env


def test_nats_server_accepts_the_configuration_with_the_pods_environment(
    rendered: list[dict[str, Any]], nats_server: str, tmp_path: Path
) -> None:
    files = local_files(tmp_path)
    config = tmp_path / "nats.conf"
    config.write_text(local_config(rendered, files, data_dir=tmp_path / "data"))
    result = subprocess.run([nats_server, "--config", str(config), "-t"], capture_output=True, text=True,
                            env=pod_env(rendered, pod_name=f"{SERVERS}-0", password=files.password),
                            timeout=CONFIG_TEST_SECONDS, check=False)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stderr + result.stdout


@pytest.fixture
async def local_cluster(rendered: list[dict[str, Any]], nats_server: str,
                        tmp_path: Path) -> AsyncIterator[tuple[NatsCluster, LocalFiles]]:
    """The rendered configuration run by 3 servers on loopback: ports of their own, routes to
    localhost (a name of the test's certificate); everything else as rendered."""
    files = local_files(tmp_path)
    config = local_config(rendered, files, data_dir=Path("DATA"))
    pods = [f"{SERVERS}-{index}" for index in range(3)]
    servers = [NatsServer(name=pod, client_host="localhost", client_port=free_port(), route_port=free_port(),
                          monitor_port=free_port(), tls=True,
                          store_dir=tmp_path / pod / "data", config=tmp_path / pod / "nats.conf",
                          log=tmp_path / f"{pod}.log") for pod in pods]
    for server in servers:
        text = replaced(config, "listen: 0.0.0.0:4222\n", f"listen: 127.0.0.1:{server.client_port}\n", count=1)
        text = replaced(text, "http: 0.0.0.0:8222\n", f"http: 127.0.0.1:{server.monitor_port}\n", count=1)
        text = replaced(text, "listen: 0.0.0.0:6222\n", f"listen: 127.0.0.1:{server.route_port}\n", count=1)
        text = replaced(text, "store_dir: DATA\n", f"store_dir: {server.store_dir}\n", count=1)
        for route, other in zip(routes(config), servers, strict=True):
            text = replaced(text, route, f"nats://localhost:{other.route_port}", count=1)
        server.config.parent.mkdir(parents=True)
        server.config.write_text(text)
    cluster = NatsCluster(binary=nats_server, servers=servers)
    try:
        for server in servers:
            server.process = await start_logged(
                [nats_server, "--config", str(server.config)], server.log,
                pod_env(rendered, pod_name=server.name, password=files.password))
            server.pid = server.process.pid
        await cluster.wait_ready()
        yield cluster, files
    finally:
        await cluster.stop()


async def test_the_operator_writes_its_stream_to_three_servers_of_the_rendered_configuration(
    rendered: list[dict[str, Any]], local_cluster: tuple[NatsCluster, LocalFiles]
) -> None:
    """TLS to clients, the password from the environment, routes with mutual TLS, and the
    operator's stream with the component's storage and replicas; a wrong password gets nothing."""
    cluster, files = local_cluster
    flags = flag_values(rendered)
    params = parsed_operator_flags(rendered, {flags["--nats-ca-file"]: files.tls_dir / "ca.crt",
                                              flags["--nats-password-file"]: files.password_file})
    url = cluster.servers[0].url
    options = NatsOptions(servers=(url,), ca_file=params["nats_ca_file"], user=params["nats_user"],
                          password_file=params["nats_password_file"])
    connection = await connect(options, name="test-operator")
    try:
        js = connection.jetstream()
        await ensure_stream(js, LogSettings(replicas=params["nats_replicas"], storage=params["nats_storage"]),
                            wall=time.time)
        acknowledged = await js.publish(subject_of("node-1"), b"{}")
        assert await last_sequence(js) == acknowledged.seq
        info = await js.stream_info(acknowledged.stream)
        assert info.cluster is not None and len(info.cluster.replicas or []) == params["nats_replicas"] - 1
    finally:
        await connection.close()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(url, tls=ssl.create_default_context(cafile=params["nats_ca_file"]),
                           user=params["nats_user"], password="wrong", connect_timeout=2,
                           allow_reconnect=False, max_reconnect_attempts=0)
