"""The nats-ingest suite's arithmetic, sizing, verdicts and section, from made-up windows (no sandbox)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks import cp_cluster, machine, nats_ingest
from benchmarks.markdown import markers
from benchmarks.nats_sizing import (
    MEMORY,
    MEMORY_2,
    MEMORY_2_CUSTOM,
    NATS,
    NATS_1,
    NATS_2,
    NATS_2_CUSTOM,
    NATS_2_SMALL,
    ApplyRate,
    ConfigRun,
    EvaluationSplit,
    ProbeWindow,
    ReplicaFigures,
    Scenario,
    ServerFigures,
    Sizing,
    Spec,
    UnitCosts,
    apply_at,
    derive,
    replica_cores,
    replicas_needed,
    size,
    verdicts,
)

WHERE = machine.Machine("Test CPU", 2, 8 << 30, "3.11.7", "6.1", "3.13.0", "abc1234", "2026-01-01 00:00 UTC")
NODES, SECONDS = 1000, 60.0  # 6,000 reports in a window: every node every 10 s
EVALUATIONS = 0.75  # s of the leader's CPU in evaluations in every window


def replica(name: str, *, leader: bool, net: float, reports: float, rss: int = 200 << 20,
            custom: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> ReplicaFigures:
    """A replica whose CPU less the evaluations (the leader's) is `net` s; `custom`: its samples in the
    window, since it started, and its series."""
    cpu = net + (EVALUATIONS if leader else 0.0)
    samples, samples_total, series = custom
    return ReplicaFigures(identity=name, leader=leader, cpu=cpu, rss=rss, rss_before=rss, reports=reports,
                          samples=samples, samples_total=samples_total, series=series,
                          evaluation_share=EVALUATIONS / cpu if leader else math.nan)


def servers(total: float, rss: int = 50 << 20) -> list[ServerFigures]:
    shares = ((1, 0.5), (2, 0.25), (3, 0.25))
    return [ServerFigures(name=f"nats-{i}", cpu=total * share, rss=rss) for i, share in shares]


def window(name: str, store: str, replicas: list[ReplicaFigures], *, nodes: int = NODES, custom: bool = False,
           server_cpu: float = 0.0, server_rss: int = 50 << 20, probe: ProbeWindow | None = None,
           problems: list[str] | None = None, sample_stream: float = 0.0) -> ConfigRun:
    streams = {"KV_colocation-nodemetrics": nodes * 2000.0} | ({"colocation-samples": sample_stream}
                                                                if sample_stream else {})
    return ConfigRun(spec=Spec(name=name, store=store, replicas=len(replicas), nodes=nodes, custom_metrics=custom),
                     report_interval=10.0, seconds=SECONDS, replicas=replicas,
                     servers=servers(server_cpu, server_rss) if store == NATS else [],
                     stream_bytes=streams if store == NATS else {},
                     agents_cpu=12.0, agents_busiest_cpu=12.0, sandbox_cpu=3.0, machine_cores=2, probe=probe,
                     agent_problems=problems or [])


def runs(*, memory_net: float = 3.0, nats_one_problems: list[str] | None = None) -> dict[str, ConfigRun]:
    """Every replica 0.01 cores whatever the reports (0.6 s a window), then: in memory 500 µs per report all
    in; NATS w = 500 µs, a = 100 µs; nats-server 0.01 cores and 300 µs per report with two replicas
    (300 all in with one, 400 with two at 1,000 nodes); custom metrics: 60,000 samples, 44,955 series."""
    custom = (60_000.0, 899_100.0, 44_955.0)
    found = [
        window(MEMORY_2, MEMORY, [replica("m-0", leader=True, net=memory_net, reports=6000),
                                  replica("m-1", leader=False, net=0.6, reports=0)]),
        window(NATS_1, NATS, [replica("n-0", leader=True, net=0.6 + 3.0, reports=6000)], server_cpu=1.8,
               problems=nats_one_problems),
        # 1.2 s fixed + 6,000 x 600 µs
        window(NATS_2, NATS, [replica("n-0", leader=True, net=2.4, reports=3000),
                              replica("n-1", leader=False, net=2.4, reports=3000)], server_cpu=2.4,
               probe=ProbeWindow(seconds=30.0, cpu=0.3, writes=3000, servers_cpu=1.5)),
        # 10 µs per sample on the leader, 5 on the standby; 1,000 B more RSS per series, each holding 20
        # samples; 100 B of the sample stream per sample.
        window(NATS_2_CUSTOM, NATS, [replica("n-0", leader=True, net=3.0, reports=3000, rss=(200 << 20) + 44_955_000,
                                             custom=custom),
                                     replica("n-1", leader=False, net=2.7, reports=3000,
                                             rss=(200 << 20) + 22_477_500, custom=(0.0, 0.0, 44_955.0))],
               custom=True, server_cpu=3.0, sample_stream=89_910_000.0),
        window(MEMORY_2_CUSTOM, MEMORY, [replica("m-0", leader=True, net=memory_net + 0.9, reports=6000,
                                                 custom=custom),
                                         replica("m-1", leader=False, net=0.9, reports=0)], custom=True),
        # 250 nodes: 1.2 s fixed + 1,500 x 600 µs; replicas 20 KiB and servers 4 KiB less per node.
        window(NATS_2_SMALL, NATS, [replica("n-0", leader=True, net=1.05, reports=750, rss=(200 << 20) - 750 * 20480),
                                    replica("n-1", leader=False, net=1.05, reports=750, rss=150 << 20)],
               nodes=250, server_cpu=1.05, server_rss=(50 << 20) - 750 * 4096),
    ]
    return {run.spec.name: run for run in found}


def units(*, ingest: float = 500.0, apply: float = 50.0, evaluation: float = 0.0, shard_part: float = 0.0,
          sample: float = 10.0, fixed: float = 0.0) -> UnitCosts:
    """`evaluation`: the part every replica pays; `shard_part`: the rest, shared among the shards."""
    return UnitCosts(fixed_cores=fixed, ingest_us=ingest, apply_us=apply, evaluation_global_us=evaluation,
                     evaluation_shard_us=shard_part, sample_us=sample,
                     server_fixed_cores=0.0, server_us=400.0, server_per_replica_us=100.0, server_sample_us=2.0,
                     busiest_server_share=0.5, series_per_pod=1.5, series_bytes=2600.0, replica_fixed=100 << 20,
                     replica_per_node=20480.0, server_fixed=40 << 20, server_per_node=4096.0, stream_per_node=2000.0,
                     stream_per_sample=100.0)


def test_the_per_unit_costs_from_the_windows() -> None:
    d = derive(runs(), pods_per_node=30, scraped_share=1.0, scrape_interval=5.0)
    assert d.memory_us == pytest.approx(500.0) and d.memory_standby_us == pytest.approx(100.0)
    assert d.all_in_us == pytest.approx(600.0) and d.ratio == pytest.approx(1.2)
    assert d.fixed_cores == pytest.approx(0.01) and d.marginal_us == pytest.approx(600.0)
    assert d.ingest_us == pytest.approx(500.0)  # nats-1: (3.6 s - 0.6 s fixed) over 6,000 reports
    assert d.apply_probe_us == pytest.approx(100.0)  # 0.3 s over 3,000 writes
    assert d.two_ingest_us == pytest.approx(500.0) and d.two_vs_one == pytest.approx(0.0)
    assert d.apply_model_us == pytest.approx(200.0)  # 800 - 600 µs: the second replica's fixed cost counts in it
    assert d.evaluation_us == pytest.approx(12.5)  # 0.75 s / 60 s / 1,000 nodes
    assert d.server_one_us == pytest.approx(300.0) and d.server_two_us == pytest.approx(400.0)
    assert d.server_fixed_cores == pytest.approx(0.01) and d.server_marginal_us == pytest.approx(300.0)
    assert d.server_probe_us == pytest.approx(100.0)  # 0.05 cores against the window's 0.04, at 100 writes/s
    assert d.busiest_server_share == pytest.approx(0.5)
    assert d.replica_per_node == pytest.approx(20480.0) and d.replica_fixed == pytest.approx((200 << 20) - 1000 * 20480)
    assert d.server_per_node == pytest.approx(4096.0)
    assert d.stream_per_node == pytest.approx(2000.0)


def test_without_the_small_run_there_is_no_fixed_cost_and_no_two_vs_one() -> None:
    found = runs()
    del found[NATS_2_SMALL]
    d = derive(found, pods_per_node=30, scraped_share=1.0, scrape_interval=5.0)
    assert d.all_in_us == pytest.approx(600.0) and math.isnan(d.fixed_cores) and math.isnan(d.two_vs_one)
    lines = verdicts(found, d, size(UnitCosts.of(d), Scenario(nodes=100_000, cadence=10.0, share=0.0)))
    assert [v for _, _, v in lines] == ["met", "inconclusive", "inconclusive (projected)"]


def test_custom_metrics_cost_per_sample_and_per_series_replica_by_replica() -> None:
    samples = derive(runs(), pods_per_node=30, scraped_share=1.0, scrape_interval=5.0).samples
    nats, memory = samples[NATS], samples[MEMORY]
    assert nats.sample_rate == pytest.approx(1000.0)
    assert nats.leader_us == pytest.approx(10.0) and nats.standby_us == pytest.approx(5.0)
    assert nats.busiest_us == pytest.approx(10.0)
    assert nats.server_us == pytest.approx(10.0)  # 0.01 more cores of nats-server at 1,000 samples/s
    assert nats.series_per_pod == pytest.approx(1.5)  # 44,955 series over 999 simulated nodes x 30 pods
    assert nats.rss_per_series == pytest.approx(1000.0) and nats.held == pytest.approx(20.0)
    # 600 s of retention at 5 s: 120 samples, 100 more than held, 16 B each.
    assert nats.steady_series_bytes == pytest.approx(1000.0 + 100 * 16)
    assert nats.stream_per_sample == pytest.approx(100.0)
    assert memory.leader_us == pytest.approx(15.0) and memory.standby_us == pytest.approx(5.0)
    assert math.isnan(memory.server_us) and math.isnan(memory.stream_per_sample)


def test_series_per_pod_count_the_scraped_pods_only() -> None:
    # The same 44,955 series over a fifth of the pods: 6 of each simulated node's 30.
    samples = derive(runs(), pods_per_node=30, scraped_share=0.2, scrape_interval=5.0).samples
    assert samples[NATS].series_per_pod == pytest.approx(44_955 / (999 * 6))
    assert math.isnan(derive(runs(), pods_per_node=30, scraped_share=0.0, scrape_interval=5.0)
                      .samples[NATS].series_per_pod)


def test_a_replica_shares_the_ingest_and_applies_every_other_write() -> None:
    u = units(ingest=500.0, apply=50.0, sample=10.0)
    scenario = Scenario(nodes=100_000, cadence=10.0, share=0.0)  # 10,000 reports/s
    assert replica_cores(u, scenario, 1) == pytest.approx(5.0)
    assert replica_cores(u, scenario, 4) == pytest.approx(1.25 + 0.375)
    # 20 % of 30 pods at 1.5 series each, every 5 s: 180,000 samples/s at 10 µs on every replica.
    scraped = Scenario(nodes=100_000, cadence=10.0, share=0.2)
    assert scraped.series_with(u) == pytest.approx(900_000) and scraped.sample_rate(u) == pytest.approx(180_000)
    assert replica_cores(u, scraped, 4) == pytest.approx(1.25 + 0.375 + 1.8)


@pytest.mark.parametrize(("apply", "replicas"), [(40.0, 8), (45.0, 9), (97.0, 135), (100.0, None), (120.0, None)])
def test_the_replicas_needed_and_none_when_the_applies_alone_take_a_core(apply: float, replicas: int | None) -> None:
    # 10,000 reports/s: 0.4 + 4.6 / R cores at a = 40 µs, 8 replicas; 0.45 + 4.55 / R at 45 µs, 9; at
    # 100 µs the applies alone take the core.
    assert replicas_needed(units(apply=apply), Scenario(nodes=100_000, cadence=10.0, share=0.0)) == replicas


def test_the_evaluations_and_every_replica_s_fixed_cost_count_against_its_core() -> None:
    scenario = Scenario(nodes=100_000, cadence=10.0, share=0.0)
    assert replicas_needed(units(apply=40.0, fixed=0.1), scenario) == 10  # 0.5 + 4.6 / R
    assert replica_cores(units(apply=40.0, fixed=0.1), scenario, 10, busiest=False) == pytest.approx(0.96)
    assert replicas_needed(units(apply=40.0, evaluation=3.0), scenario) == 16  # 0.7 + 4.6 / R
    assert replicas_needed(units(apply=40.0, evaluation=7.0), scenario) is None  # 0.4 + 0.7: no core left
    assert replicas_needed(units(), Scenario(nodes=10_000, cadence=60.0, share=0.0)) == 1


def test_the_shards_evaluations_are_shared_and_the_busiest_replica_holds_the_most() -> None:
    scenario = Scenario(nodes=100_000, cadence=10.0, share=0.0)
    u = units(apply=40.0, evaluation=1.0, shard_part=16.0)  # 0.1 cores on every replica, 1.6 shared in 16 shards
    assert replica_cores(u, scenario, 1) == pytest.approx(0.4 + 4.6 + 0.1 + 1.6)
    # 5 replicas: the busiest holds 4 shards (0.4 cores of them), the others 3 (0.3).
    assert replica_cores(u, scenario, 5) == pytest.approx(0.4 + 4.6 / 5 + 0.1 + 0.4)
    assert replica_cores(u, scenario, 5, busiest=False) == pytest.approx(0.4 + 4.6 / 5 + 0.1 + 0.3)
    assert replicas_needed(u, scenario) == 16  # 0.5 + 4.6 / R + 0.1 x ceil(16 / R): 0.89 at 16, 1.02 at 15
    assert size(u, scenario).floor_cores == pytest.approx(0.4 + 0.1 + 0.1)  # one shard each, at most


def test_without_the_in_process_split_every_replica_pays_every_evaluation() -> None:
    d = derive(runs(), pods_per_node=30, scraped_share=1.0, scrape_interval=5.0)
    assert math.isnan(d.evaluation_global_share)
    assert UnitCosts.of(d).evaluation_global_us == pytest.approx(12.5) and UnitCosts.of(d).evaluation_shard_us == 0.0
    split = EvaluationSplit(nodes=1000, shards=16, whole_us=160.0, no_shard_us=8.0, one_shard_us=18.0)
    d = derive(runs(), pods_per_node=30, scraped_share=1.0, scrape_interval=5.0, split=split)
    assert d.evaluation_global_share == pytest.approx(0.05)
    u = UnitCosts.of(d)
    assert u.evaluation_global_us == pytest.approx(0.625) and u.evaluation_shard_us == pytest.approx(11.875)


def test_the_sizing_row() -> None:
    row = size(units(apply=40.0), Scenario(nodes=100_000, cadence=10.0, share=0.2))
    assert row.replicas is None  # 180,000 samples/s at 10 µs: 1.8 cores on every replica
    assert row.floor_cores == pytest.approx(0.4 + 1.8) and math.isnan(row.busiest_cores)
    row = size(units(apply=40.0), Scenario(nodes=100_000, cadence=10.0, share=0.0))
    assert row.replicas == 8 and row.busiest_cores == pytest.approx(0.4 + 4.6 / 8)
    assert row.server_cores == pytest.approx(10_000 * (400 + 6 * 100) / 1e6)
    assert row.busiest_server_cores == pytest.approx(row.server_cores / 2)
    assert row.replica_bytes == pytest.approx((100 << 20) + 100_000 * 20480)
    assert row.server_bytes == pytest.approx((40 << 20) + 100_000 * 4096)
    assert row.stream_bytes == pytest.approx(200_000_000) and not row.over_series_cap
    scraped = size(units(apply=40.0, sample=1.0), Scenario(nodes=10_000, cadence=10.0, share=0.2))
    assert scraped.series == pytest.approx(90_000) and scraped.over_series_cap
    assert scraped.replica_bytes == pytest.approx((100 << 20) + 10_000 * 20480 + 90_000 * 2600)
    # 18,000 samples/s held 600 s at 100 B each in the sample stream, beside the NodeMetrics' 2,000 B per node.
    assert scraped.stream_bytes == pytest.approx(10_000 * 2000 + 18_000 * 600 * 100)


def _goal(replicas: int) -> Sizing:
    """The 100,000-node row needing 8 (a = 40 µs) or 9 (a = 45 µs) replicas."""
    return size(units(apply={8: 40.0, 9: 45.0}[replicas]), Scenario(nodes=100_000, cadence=10.0, share=0.0))


def _verdicts(found: dict[str, ConfigRun], goal: int = 8) -> list[str]:
    derived = derive(found, pods_per_node=30, scraped_share=1.0, scrape_interval=5.0)
    return [v for _, _, v in verdicts(found, derived, _goal(goal))]


def test_the_verdicts_come_from_the_numbers() -> None:
    assert _verdicts(runs()) == ["met", "met", "met (projected)"]
    assert _verdicts(runs(), goal=9)[2] == "missed (projected)"
    assert _verdicts(runs(memory_net=2.4))[0] == "missed"  # 400 µs in memory: 1.5x


def test_two_replicas_dearer_per_report_miss_and_a_held_down_run_is_inconclusive() -> None:
    found = runs()
    probe = found[NATS_2].probe
    assert probe is not None
    probe.cpu = 0.12  # the probe's applies cost 40 µs: w2 = 600 - 40 = 560 µs, 12 % above w1
    assert derive(found, pods_per_node=30, scraped_share=1.0, scrape_interval=5.0).two_vs_one == pytest.approx(0.12)
    assert _verdicts(found)[1] == "missed"
    probe.cpu = 0.135  # 45 µs: w2 = 555 µs, 11 % above
    assert _verdicts(found)[1] == "missed"
    probe.cpu = 0.165  # 55 µs: w2 = 545 µs, 9 % above
    assert _verdicts(found)[1] == "met"
    behind = runs(nats_one_problems=["12 heartbeats were late"])
    assert _verdicts(behind) == ["inconclusive", "inconclusive", "inconclusive (projected)"]
    assert "nats-1: agent self-check: 12 heartbeats were late" in nats_ingest.render(
        nats_ingest.NatsIngestReport(config=nats_ingest.IngestConfig(), runs=list(behind.values())), "x")


def test_a_window_is_held_down_when_the_agents_fall_behind() -> None:
    run = runs()[NATS_2]
    assert run.problems() == []
    run.replicas[0].reports = 1000  # 4,000 of 6,000 due
    assert "fell behind: 4,000 reports accepted of 6,000 due" in run.problems()[0]
    run = runs()[NATS_2]
    run.agents_busiest_cpu = 57.0
    assert "0.95 cores" in run.problems()[0]
    run = runs()[NATS_2_CUSTOM]
    run.replicas[0].series_dropped = 12
    assert run.problems() == ["12 samples dropped for the series limit"]


def report() -> nats_ingest.NatsIngestReport:
    return nats_ingest.NatsIngestReport(config=nats_ingest.IngestConfig(), agent_args=["--max-report-interval=10"],
                                        runs=list(runs().values()), load=[(1.0, 1.0, 1.0)] * 6, seconds=1200.0,
                                        machine=WHERE, evaluation_split=EvaluationSplit(
                                            nodes=1000, shards=16, whole_us=160.0, no_shard_us=8.0,
                                            one_shard_us=18.0))


def test_the_section_states_the_verdicts_and_renders_again_from_the_raw_json(tmp_path: Path) -> None:
    saved = report()
    section = nats_ingest.render(saved, "python -m benchmarks.run --suite nats-ingest")
    assert "≤ 1.3x the in-memory store's replica CPU per report" in section
    assert "1.20x (600 µs on NATS with one replica, 500 µs in memory)" in section and ": **met**" in section
    # 0.01 cores fixed, 10,000 writes/s at 100 µs, and of 12.5 µs per node per second of evaluations 5 %
    # on every replica (0.06 cores) and one of 16 shards of the rest (0.07): 1.15 cores
    assert "no replica count: the busiest keeps 1.15 cores with any number: **missed (projected)**" in section
    assert "| in process: holding none of 16 shards (every node's health, the guard) | 8.0 | µs |" in section
    assert "| g / e: the evaluations' part every replica pays | 5% |" in section
    assert "none (≥ 1.15 cores each)" in section
    assert "**20 % of the simulated pods scraped** every 5 s (6 of each node's 30 carry the scrape annotation" \
        in section
    assert "20 % of the simulated pods (6 per node) are scraped every 5 s" in section
    assert "(7.50 per scraped pod)" in section  # 44,955 series over 999 nodes x 6 scraped pods
    assert "100 %" not in section
    assert "Raw samples: `benchmarks/plots/nats_ingest.json`." in section
    saved.to_file(tmp_path / "nats_ingest.json")
    again = nats_ingest.NatsIngestReport.from_file(tmp_path / "nats_ingest.json")
    assert again == saved and nats_ingest.render(again, "x") == nats_ingest.render(saved, "x")
    output = tmp_path / "BENCHMARKS.md"
    from benchmarks.markdown import write_section

    write_section(output, nats_ingest.SECTION, section)
    begin, end = markers(nats_ingest.SECTION)
    assert begin in output.read_text() and end in output.read_text()


def test_a_run_that_failed_renders_inconclusive() -> None:
    saved = report()
    saved.runs = [r for r in saved.runs if r.spec.name != NATS_2]
    saved.runs.append(ConfigRun(spec=Spec(name=NATS_2, store=NATS, replicas=2, nodes=NODES), report_interval=10.0,
                                failures=["TimeoutError()"]))
    section = nats_ingest.render(saved, "x")
    assert "nats-2: TimeoutError()" in section and "**met (projected)**" not in section


def test_configurations_by_name() -> None:
    config = nats_ingest.IngestConfig(configs=(NATS_2_SMALL, NATS_1), small_nodes=100)
    assert [(s.name, s.nodes, s.probe) for s in config.specs()] == [(NATS_1, 1000, True), (NATS_2_SMALL, 100, False)]


def test_the_nats_servers_from_the_state_file_or_proc(tmp_path: Path) -> None:
    state = tmp_path / "state"
    conf = state / "nats" / "nats-2" / "nats-server.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("server_name: nats-2\nlisten: 127.0.0.1:4222\nhttp: 127.0.0.1:8222\n")
    proc = tmp_path / "proc"
    for pid, args in ((101, ["/cache/nats-server", "--config", str(conf)]),
                      (102, ["/cache/nats-server", "--config", "/elsewhere/nats-server.conf"]),
                      (103, ["python", "-m", "colocation", "operator"])):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")
    assert nats_ingest.nats_servers(state, proc) == [nats_ingest.NatsProcess("nats-2", 101, 8222)]
    (state / "nats" / "cluster.json").write_bytes(orjson.dumps([{"name": "nats-1", "pid": 7, "monitorPort": 9}]))
    assert nats_ingest.nats_servers(state, proc) == [nats_ingest.NatsProcess("nats-1", 7, 9)]


def test_the_probe_connects_as_the_replica_does() -> None:
    options = nats_ingest.nats_options(["python", "-m", "colocation", "operator", "--store=nats",
                                        "--nats-server=tls://127.0.0.1:1", "--nats-server", "tls://127.0.0.1:2",
                                        "--nats-ca-file=/ca.crt", "--nats-user", "op", "--nats-password-file=/pw"])
    assert options.servers == ("tls://127.0.0.1:1", "tls://127.0.0.1:2")
    assert (options.ca_file, options.user, options.password_file) == ("/ca.crt", "op", "/pw")


def test_the_streams_of_a_jsz_answer() -> None:
    jsz = {"account_details": [{"stream_detail": [{"name": "KV_colocation-nodemetrics",
                                                   "state": {"bytes": 2_000_000, "messages": 1000}}]}]}
    assert nats_ingest.streams(jsz) == {"KV_colocation-nodemetrics": (2_000_000.0, 1000.0)}
    assert nats_ingest.streams({}) == {}


def test_the_apply_cost_is_taken_at_each_rows_write_rate() -> None:
    curve = ((100.0, 500.0), (1000.0, 200.0), (3000.0, 100.0))
    assert apply_at(curve, 50.0, 9.0) == 500.0  # below the slowest: its figure
    assert apply_at(curve, math.sqrt(100.0 * 1000.0), 9.0) == pytest.approx(350.0)  # halfway over log rate
    assert apply_at(curve, 10_000.0, 9.0) == 100.0  # past the fastest: its figure
    assert apply_at((), 10_000.0, 9.0) == 9.0  # not measured: the probe's
    u = dataclasses.replace(units(ingest=500.0, apply=700.0), apply_curve=curve)
    # 10,000 writes/s at 100 µs: a replica of 4 takes 2,500 reports/s and applies 7,500 writes/s.
    assert replica_cores(u, Scenario(nodes=100_000, cadence=10.0, share=0.0), 4) == pytest.approx(1.25 + 0.75)
    points = [ApplyRate(rate=100.0, writes=1500, cpu=0.75), ApplyRate(rate=2800.0, writes=42_000, cpu=4.2)]
    d = derive(runs(), pods_per_node=30, scraped_share=1.0, scrape_interval=5.0, apply_rates=points)
    assert d.apply_curve == ((100.0, 500.0), (2800.0, 100.0))
    assert UnitCosts.of(d).apply_at(2800.0) == pytest.approx(100.0)


def test_a_run_saved_before_the_share_existed_reads_as_every_pod_scraped_and_says_so() -> None:
    """Files saved before `scraped_share` come from runs that annotated every simulated pod."""
    document = nats_ingest.NatsIngestReport.from_file(nats_ingest.RAW).document()
    assert document["config"]["scraped_share"] == 0.2  # the committed run
    del document["config"]["scraped_share"]
    older = nats_ingest.NatsIngestReport.model_validate(document)
    assert older.config.scraped_share == 1.0
    assert "**every simulated pod scraped (100 %)**" in nats_ingest.render(older, "x")
    assert nats_ingest.IngestConfig().scraped_share == 0.2


def test_the_custom_metrics_sandboxes_annotate_the_configured_share(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[str, ...]] = []

    async def start(state_dir: Path, **options: Any) -> None:
        started.append(options["extra"])
        raise RuntimeError("not starting a sandbox here")

    monkeypatch.setattr(cp_cluster, "start", start)
    parser = argparse.ArgumentParser()
    nats_ingest.add_arguments(parser)
    config = nats_ingest.config_from(parser.parse_args(["--nats-ingest-scraped-share", "0.5"]), tmp_path)
    assert config.scraped_share == 0.5
    for spec in config.specs():
        with pytest.raises(RuntimeError, match="not starting"):
            asyncio.run(nats_ingest._run_config(config, spec, []))
    shares = {spec.name: [arg for arg in extra if arg.startswith("--scraped-pod-share")]
              for spec, extra in zip(config.specs(), started, strict=True)}
    assert shares == {NATS_2_CUSTOM: ["--scraped-pod-share=0.5"], MEMORY_2_CUSTOM: ["--scraped-pod-share=0.5"],
                      MEMORY_2: [], NATS_1: [], NATS_2: [], NATS_2_SMALL: []}
    with pytest.raises(SystemExit):
        parser.parse_args(["--nats-ingest-scraped-share", "1.5"])
