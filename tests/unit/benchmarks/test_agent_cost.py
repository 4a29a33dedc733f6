"""The agent-cost suite: its fake node as the agent reads it, its verdicts and its section, from made-up numbers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import agent_cost_host, agent_cost_report, machine
from benchmarks.agent_cost import CostConfig, CostReport, CostWindow
from benchmarks.agent_cost_host import CPUS, FakeHost, node_pods
from colocation.agent.collector import RealCollector
from colocation.agent.strategies.cpu_suppress import cpu_suppress
from tests.clock import FakeClock

MIB = 2**20


def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path, {f"00000000-0000-0000-0000-{n:012d}": pod for n, pod in enumerate(node_pods(109))})


def test_the_node_has_best_effort_latency_sensitive_and_scraped_pods() -> None:
    pods = node_pods(109)
    assert (sum(p.qos == "BE" for p in pods), sum(p.qos == "LS" for p in pods)) == (65, 44)
    assert sum(p.scraped for p in pods) == 20 and all(p.qos == "LS" for p in pods if p.scraped)
    assert len({p.name for p in pods}) == 109


def test_the_agent_measures_the_fake_node_as_designed_and_suppress_stays_off_a_cpu_edge(tmp_path: Path) -> None:
    """Node 300m + 65 x 20m + 44 x 10m = 2,040m; BE pods may use 65 % of 8 cpus less the rest (740m): 4,460m,
    i.e. 5 cpus, and still 5 with the rest off by half either way (the fake counters move in steps)."""
    fake, clock = host(tmp_path), FakeClock(100.0)
    collector = RealCollector(fake.proc, fake.cgroup, clock=clock)
    collector.sample(1.0)
    clock.now += 2.0
    fake.advance(2.0)
    sample = collector.sample(3.0)
    assert len(sample.pods) == 109 and sample.read_errors == 0
    assert sample.node_cpu_millis == pytest.approx(2040, abs=10)
    be = sum(p.cpu_millis for p in sample.pods if "besteffort" in p.cgroup_path)
    assert be == 1300
    policy = cpu_suppress.SuppressPolicy(enabled=True, threshold_percent=65)

    def cpus_left(rest_factor: float) -> int:
        rest = round((sample.node_cpu_millis - be) * rest_factor)
        usage = cpu_suppress.CpuUsage(capacity=CPUS * 1000, node=rest + be, all_pods=be + 440, non_be_pods=440,
                                      host_applications=0)
        return math.ceil(cpu_suppress.be_budget_millis(usage, policy) / 1000)

    assert [cpus_left(factor) for factor in (0.5, 1.0, 1.5)] == [5, 5, 5]
    assert be < 0.9 * 4000  # under cpuEvictBEUsageThresholdPercent's default of the least cpus left: no eviction


def test_only_the_agents_writes_count_as_written(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.advance(5.0)  # the counters moving is not a write of the agent's
    assert fake.written() == {"cpu.max": 0, "cpu.max.burst": 0, "cpu.weight": 0, "memory.max": 0, "cpuset.cpus": 0}
    best_effort = fake.cgroup / "kubepods" / "besteffort"
    (best_effort / "cpuset.cpus").write_text("0-2\n")
    fake.advance(6.0)
    assert fake.written()["cpuset.cpus"] == 1
    assert (best_effort / "cpuset.cpus").read_text() == "0-2\n"


def window(cpu_percent: float, *, hwm_mib: float = 80.0, samples: float = 20.0) -> CostWindow:
    return CostWindow(seconds=20.0, cpu_seconds=cpu_percent / 100 * 20.0, rss=int((hwm_mib - 1) * MIB),
                      hwm=int(hwm_mib * MIB), counters={"colocation_agent_samples_total": samples},
                      load=(2.0, 2.0, 2.0))


def report(windows: list[CostWindow], **kwargs: object) -> CostReport:
    return CostReport(config=CostConfig(), agent_args=["--node-name", "n"], import_rss=[70 * MIB] * 5,
                      import_modules=1400, windows=windows, **kwargs)


def verdict_of(r: CostReport) -> dict[str, str]:
    return {target: verdict for target, _, verdict in agent_cost_report.verdicts(r)}


def test_cpu_and_rss_under_target_are_met() -> None:
    verdicts = verdict_of(report([window(1.0), window(1.5), window(1.2), window(1.9), window(1.1)]))
    assert verdicts["CPU ≤ 2 % of a core"] == "met" and verdicts["RSS ≤ 100 MiB"] == "met"


def test_one_window_over_the_target_is_not_met_and_rss_is_judged_on_the_peak() -> None:
    verdicts = verdict_of(report([window(1.0), window(1.0), window(2.5), window(1.0), window(1.0, hwm_mib=101)]))
    assert verdicts["CPU ≤ 2 % of a core"] == "not met" and verdicts["RSS ≤ 100 MiB"] == "not met"


def test_an_agent_short_of_cpu_makes_a_low_figure_inconclusive() -> None:
    """17 of 20 samples due: it may have used little cpu because it got little, not because it needs little."""
    verdicts = verdict_of(report([window(1.0), window(1.0, samples=17), window(1.0), window(1.0), window(1.0)]))
    assert verdicts["CPU ≤ 2 % of a core"] == "inconclusive"


def test_too_few_windows_or_a_failure_is_not_measured() -> None:
    assert set(verdict_of(report([window(1.0)] * 4)).values()) == {"not measured", "measured"}
    assert "met" not in verdict_of(report([window(1.0)] * 5, failures=["TimeoutError()"])).values()


def test_spread_is_min_median_p90_max() -> None:
    assert agent_cost_report.spread([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 3.0, 5.0, 5.0)
    assert math.isnan(agent_cost_report.spread([float("nan")])[0])


def test_the_section_says_what_was_measured_and_renders_again_from_the_raw_json(tmp_path: Path) -> None:
    r = report([window(1.0), window(1.5), window(1.2), window(1.9), window(1.1)], written={"cpuset.cpus": 131},
               gauges={"colocation_agent_cpu_suppress_millicores": 3000.0}, load_before=(1.0, 1.0, 1.0),
               machine_busy=1.4)
    where = machine.Machine("cpu", 2, 8 << 30, "3.11", "6.1", "3.9", "abc1234", "2026-11-26 17:00 UTC")
    text = agent_cost_report.render(r, where, "python -m benchmarks.run --suite agent-cost")
    assert "110 pods" in text and "**met**" in text and "cpuset.cpus 131" in text
    assert "| agent CPU, % of one core | 1.00 % | 1.20 % | 1.90 % | 1.90 % |" in text
    assert "1.40 of 2 cores busy machine-wide" in text
    raw = tmp_path / "agent_cost.json"
    agent_cost_report.save_raw(r, raw, where)
    again = CostReport.from_file(raw)
    assert agent_cost_report.render(again, where, "python -m benchmarks.run --suite agent-cost") == text


def test_pods_get_the_kubelets_view_of_their_qos_and_scrape_annotations() -> None:
    be, ls = next(p for p in node_pods(109) if p.qos == "BE"), next(p for p in node_pods(109) if p.scraped)
    assert agent_cost_host.running_status(be)["qosClass"] == "BestEffort"
    manifest = agent_cost_host.pod_manifest(ls, "node-a", 9100)
    assert manifest["metadata"]["annotations"] == {"colocation.dev/scrape": "true", "colocation.dev/port": "9100",
                                                   "colocation.dev/path": "/metrics"}
    assert manifest["spec"]["nodeName"] == "node-a"
