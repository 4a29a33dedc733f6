"""Pod addresses the real kube-apiserver accepts and dials: a bridge and one network namespace per pod.

kube-apiserver refuses loopback addresses in endpoints, and with no kube-proxy nothing routes a
Service's ClusterIP; so, as on a real node, every pod of the launcher's node gets a network
namespace of its own, joined by a veth pair to a bridge that this run creates. The bridge holds
the gateway address, where kube-apiserver listens, and a second one for what runs beside it (the
NATS servers): a test can cut a pod off from those alone. Each pod holds one address of the same /24,
where its process listens (port 8443 in every pod, as in its manifest). The aggregator then
reaches the leader through the Service's endpoints (`--enable-aggregator-routing`), and nothing
leaves this machine: every address here exists only on interfaces this run made, and all of it
is removed on stop (and, at the next start, whatever a killed run left behind).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import shutil
from dataclasses import dataclass, field

import orjson

from colocation_sandbox.launcher.child_processes import run

log = logging.getLogger(__name__)

SUPERNET = ipaddress.ip_network("10.244.0.0/16")  # one /24 of it per run
PREFIX = "colo"  # every interface and namespace this module makes starts with it
FIRST_POD_HOST = 10
COMMAND_TIMEOUT_SECONDS = 10.0


class PodNetworkUnavailable(RuntimeError):
    """Network namespaces cannot be made here (no CAP_NET_ADMIN or no iproute2); one line."""


def _ip(*args: str, check: bool = True) -> str:
    result = run(["ip", *args], timeout=COMMAND_TIMEOUT_SECONDS)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def check_available() -> None:
    """Raise PodNetworkUnavailable with the reason when this process cannot make namespaces."""
    if shutil.which("ip") is None:
        raise PodNetworkUnavailable("the real control plane needs iproute2 (`ip`) for pod network namespaces")
    probe = f"{PREFIX}probe{os.getpid():x}"
    result = run(["ip", "netns", "add", probe], timeout=COMMAND_TIMEOUT_SECONDS)
    if result.returncode != 0:
        raise PodNetworkUnavailable("the real control plane needs CAP_NET_ADMIN to create pod network "
                                    f"namespaces ({result.stderr.strip() or 'ip netns add failed'})")
    _ip("netns", "delete", probe, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> int:
    """Delete the bridges and namespaces of runs whose process is gone (a SIGKILLed launcher)."""
    removed = 0
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        owner = owner_pid(name)
        if owner is not None and not _alive(owner):
            _ip("netns", "delete", name, check=False)
            removed += 1
    for link in orjson.loads(_ip("-j", "link", "show", check=False) or "[]"):
        owner = owner_pid(link.get("ifname", ""))
        if owner is not None and not _alive(owner) and link.get("ifname", "").startswith(f"{PREFIX}b"):
            _ip("link", "delete", link["ifname"], check=False)
            removed += 1
    return removed


def owner_pid(name: str) -> int | None:
    # Names are PREFIX + kind letter + the owner's pid in hex + optional "-N".
    if not name.startswith(PREFIX) or len(name) < len(PREFIX) + 2:
        return None
    with contextlib.suppress(ValueError):
        return int(name[len(PREFIX) + 1:].split("-")[0], 16)
    return None


def free_subnet(routes: list[str]) -> ipaddress.IPv4Network:
    """The first /24 of SUPERNET (past its first) that overlaps none of `routes` (destinations)."""
    used = []
    for dst in routes:
        with contextlib.suppress(ValueError):
            if dst and dst != "default":
                used.append(ipaddress.ip_network(dst, strict=False))
    for subnet in SUPERNET.subnets(new_prefix=24):
        if subnet.network_address.packed[2] == 0:
            continue
        if not any(subnet.overlaps(other) for other in used):
            return subnet  # type: ignore[return-value]
    raise RuntimeError(f"no free /24 left in {SUPERNET} for a pod network")


def _routes() -> list[str]:
    return [str(route.get("dst", "")) for route in orjson.loads(_ip("-j", "-4", "route", "show", check=False) or "[]")]


@dataclass(kw_only=True)
class PodNetwork:
    """The bridge and the pods' namespaces of one run."""

    subnet: ipaddress.IPv4Network
    tag: str = field(default_factory=lambda: f"{os.getpid():x}")
    _next_host: int = FIRST_POD_HOST
    _free: list[int] = field(default_factory=list)
    _pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod key -> (namespace, address)

    @classmethod
    def create(cls) -> PodNetwork:
        check_available()
        removed = remove_leftovers()
        if removed:
            log.info("removed pod networks of runs that are gone", extra={"removed": removed})
        network = cls(subnet=free_subnet(_routes()))
        _ip("link", "add", network.bridge, "type", "bridge")
        _ip("addr", "add", f"{network.gateway}/{network.subnet.prefixlen}", "dev", network.bridge)
        _ip("addr", "add", f"{network.beside_address}/{network.subnet.prefixlen}", "dev", network.bridge)
        _ip("link", "set", network.bridge, "up")
        log.info("pod network created", extra={"bridge": network.bridge, "subnet": str(network.subnet)})
        return network

    @property
    def bridge(self) -> str:
        return f"{PREFIX}b{self.tag}"

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def beside_address(self) -> str:
        """The bridge's second address: for the servers that run beside kube-apiserver (NATS)."""
        return str(self.subnet.network_address + 2)

    def _allocate(self) -> int:
        if self._free:
            return self._free.pop()
        host = self._next_host
        if host >= self.subnet.num_addresses - 1:
            raise RuntimeError(f"pod network {self.subnet} is full")
        self._next_host += 1
        return host

    def add_pod(self, key: str) -> tuple[str, str]:
        """A namespace with one address for the pod `key` (namespace/name): (netns name, address)."""
        if key in self._pods:
            return self._pods[key]
        host = self._allocate()
        netns, veth = f"{PREFIX}n{self.tag}-{host}", f"{PREFIX}v{self.tag}-{host}"
        address = str(self.subnet.network_address + host)
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", netns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.gateway)
        self._pods[key] = (netns, address)
        return netns, address

    def remove_pod(self, key: str) -> None:
        entry = self._pods.pop(key, None)
        if entry is None:
            return
        netns, address = entry
        _ip("netns", "delete", netns, check=False)  # takes the veth pair with it
        self._free.append(int(ipaddress.ip_address(address)) - int(self.subnet.network_address))

    def teardown(self) -> None:
        for key in list(self._pods):
            self.remove_pod(key)
        _ip("link", "delete", self.bridge, check=False)
