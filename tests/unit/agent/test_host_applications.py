"""Host applications: from NodeSLO entries to measured cgroups, reported and left out of systemUsage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.aggregate import Aggregator
from colocation.agent.host_applications import HostApplication, host_applications_of, resolve_cgroup_path
from colocation.agent.leader_locator import LeaderLocator
from colocation.agent.nodemetric import node_metric_from
from colocation.agent.runtime import NodeAgent
from colocation.nodemetrics.report_schema import MAX_HOST_APPLICATIONS, validate_report
from tests.unit.agent.test_collector import MI, Machine
from tests.unit.agent.test_runtime import NoKube


def nodeslo(*entries: Any) -> dict[str, Any]:
    return {"spec": {"hostApplications": list(entries)}}


# (entry, (base, path under it, priority, qos)) as koordlet places and classes it.
PLACES: list[tuple[dict[str, Any], tuple[str, str, str | None, str | None]]] = [
    ({"name": "nginx", "qos": "LS", "priority": "koord-prod"},
     ("CgroupRoot", "host-latency-sensitive/nginx", "koord-prod", "LS")),
    ({"name": "db", "qos": "LSR"}, ("CgroupRoot", "host-latency-sensitive/db", None, "LSR")),
    ({"name": "backup", "qos": "BE", "priority": "koord-batch"},
     ("CgroupRoot", "host-best-effort/backup", "koord-batch", "BE")),
    ({"name": "sshd"}, ("CgroupRoot", "sshd", None, None)),
    ({"name": "nginx", "cgroupPath": {"parentDir": "system.slice", "relativePath": "nginx.service"}},
     ("CgroupRoot", "system.slice/nginx.service", None, None)),
    ({"name": "agent", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "agent/"}},
     ("KubepodsBesteffort", "agent", None, None)),
    ({"name": "top", "cgroupPath": {"base": "Kubepods", "parentDir": "/host/", "relativePath": "./top"}},
     ("Kubepods", "host/top", None, None)),
    # A class that is not Koordinator's is dropped, the application kept.
    ({"name": "odd", "priority": "high", "qos": "Burstable"}, ("CgroupRoot", "odd", None, None)),
]


@pytest.mark.parametrize(("entry", "place"), PLACES)
def test_an_entry_is_placed_as_koordlet_places_it(entry: dict[str, Any],
                                                  place: tuple[str, str, str | None, str | None]) -> None:
    (app,), problems = host_applications_of(nodeslo(entry))
    assert (app.base, app.cgroup_path, app.priority, app.qos) == place
    assert bool(problems) == (entry["name"] == "odd")


@pytest.mark.parametrize("entry", [
    "nginx", {"qos": "LS"}, {"name": ""}, {"name": "x" * 254}, {"name": 7},
    {"name": "esc", "cgroupPath": {"relativePath": "../../etc"}},
    {"name": "base", "cgroupPath": {"base": "Kubepods-Burstable"}},
    {"name": "path", "cgroupPath": "system.slice"},
    {"name": "dir", "cgroupPath": {"parentDir": 3}},
])
def test_an_unusable_entry_is_left_out_with_a_reason(entry: Any) -> None:
    apps, problems = host_applications_of(nodeslo(entry, {"name": "ok"}))
    assert [app.name for app in apps] == ["ok"]
    assert len(problems) == 1 and problems[0].startswith("hostApplications[0]")


def test_a_repeated_name_and_entries_beyond_the_reports_limit_are_left_out() -> None:
    apps, problems = host_applications_of(nodeslo({"name": "a"}, {"name": "a", "qos": "BE"}))
    assert [(app.name, app.qos) for app in apps] == [("a", None)] and len(problems) == 1
    many = [{"name": f"app-{n}"} for n in range(MAX_HOST_APPLICATIONS + 5)]
    apps, problems = host_applications_of(nodeslo(*many))
    assert len(apps) == MAX_HOST_APPLICATIONS and len(problems) == 1


@pytest.mark.parametrize("slo", [None, {}, {"spec": {}}, {"spec": {"hostApplications": None}}])
def test_no_host_applications(slo: dict[str, Any] | None) -> None:
    assert host_applications_of(slo) == ((), [])


@pytest.mark.parametrize(("root", "expected"), [
    ("kubepods", "kubepods/besteffort/agent"),
    ("kubepods.slice", "kubepods.slice/kubepods-besteffort.slice/agent"),
    ("kubelet.slice/kubelet-kubepods.slice",
     "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/agent"),
])
def test_a_kubepods_base_is_the_kubelets_directory_in_the_drivers_spelling(tmp_path: Path, root: str,
                                                                           expected: str) -> None:
    (tmp_path / root).mkdir(parents=True)
    agent = HostApplication(name="agent", cgroup_path="agent", base="KubepodsBesteffort")
    assert resolve_cgroup_path(agent, tmp_path) == expected
    assert resolve_cgroup_path(HostApplication(name="top", cgroup_path="", base="Kubepods"), tmp_path) == root
    assert resolve_cgroup_path(agent, tmp_path / "elsewhere") is None  # no kubelet here


@pytest.mark.parametrize("version", [1, 2])
def test_host_applications_are_reported_with_their_classes_and_left_out_of_system_usage(
        tmp_path: Path, version: int) -> None:
    machine = Machine(tmp_path, cgroup_version=version)
    machine.cpu(busy=1000)
    (machine.cgroup / ("cpu,cpuacct" if version == 1 else "") / "kubepods").mkdir(parents=True)
    paths = {"nginx": "system.slice/nginx.service", "agent": "kubepods/besteffort/agent"}
    for path in paths.values():
        machine.pod(path, usage_usec=0, anon=300 * MI)
    apps, _ = host_applications_of(nodeslo(
        {"name": "nginx", "priority": "koord-prod", "qos": "LS",
         "cgroupPath": {"parentDir": "system.slice", "relativePath": "nginx.service"}},
        {"name": "agent", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "agent"}}))
    collector = machine.collector(host_applications=apps)
    aggregator = Aggregator(window_seconds=60)
    aggregator.add(collector.sample(100.0))
    machine.clock.now += 2
    machine.cpu(busy=1300)  # 1500m over 2 s
    for path in paths.values():
        machine.pod(path, usage_usec=1_000_000)  # 500m each
    sample = collector.sample(102.0)
    assert sample.read_errors == 0
    aggregator.add(sample)
    report = node_metric_from(aggregator, "node-a", 102.0, by_uid={}, by_name={})
    assert report is not None
    status = orjson.loads(validate_report(orjson.dumps(report), "node-a").status_json)
    assert status["hostApplicationMetric"] == [
        {"name": "agent", "usage": {"resources": {"cpu": "500m", "memory": "300Mi"}}, "qos": "BE"},
        {"name": "nginx", "usage": {"resources": {"cpu": "500m", "memory": "300Mi"}}, "priority": "koord-prod",
         "qos": "LS"}]
    assert status["nodeMetric"]["systemUsage"]["resources"]["cpu"] == "500m"  # 1500m - 2 x 500m


async def test_the_agent_measures_what_the_nodeslo_lists_from_its_watch(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    collector = machine.collector()

    async def no_put(*args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise AssertionError("no report expected")

    agent = NodeAgent("node-a", NoKube(), collector, locator=LeaderLocator(NoKube()), direct=no_put,
                      metrics=AgentMetrics())
    listed = {"metadata": {"name": "node-a"}, **nodeslo({"name": "nginx", "qos": "LS"})}
    await agent._nodeslo_sync([listed], "1")
    assert collector.host_applications == (HostApplication(name="nginx", cgroup_path="host-latency-sensitive/nginx",
                                                           qos="LS"),)
    await agent._nodeslo_event("DELETED", listed)
    assert len(collector.host_applications) == 0
