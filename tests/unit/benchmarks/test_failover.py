"""Smoke run of the failover and staleness benchmark at a tiny size: the report's shape, not its timings."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from benchmarks import cp_plots, failover_report, machine, operator_failover
from benchmarks.failover_staleness import StalenessConfig
from benchmarks.markdown import replace_section


@pytest.mark.timed_pipeline
async def test_a_tiny_failover_and_staleness_run_reports_every_kill(tmp_path: Path) -> None:
    config = operator_failover.FailoverConfig(
        nodes=3, pods_per_node=2, targets=("builtin",), replica_counts=(2,), kills=1, state_dir=tmp_path,
        staleness=StalenessConfig(nodes=3, pods_per_node=2, grace=2.0, evaluation_interval=0.25, repetitions=1))
    report = await operator_failover.run(config)

    assert report.failures == [], report.failures
    assert [(k.setting, k.index) for k in report.kills] == [("sandbox, 2 replicas", 0)]
    for kill in report.kills:
        assert 0 < kill.lease_moved <= kill.recovered
        assert 0 < kill.first_report <= kill.recovered and 0 < kill.complete <= kill.recovered
        assert math.isfinite(kill.first_read) and kill.reads > 0 and kill.discovery > 0
    staleness = report.staleness
    assert staleness is not None
    assert len(staleness.one_agent) == 1
    assert (staleness.simulated_nodes, staleness.removed) == (2, 2)  # every simulated node lost its batch resources

    section = failover_report.render(report, machine.describe(), "python -m benchmarks.run --suite failover")
    assert section.startswith("## Operator failover and staleness: 3 nodes")
    assert "| sandbox, 2 replicas, every kill | 1 |" in section
    assert "at least 10 kills (1): **missed**" in section  # a verdict from the numbers, not a claim
    assert report.agent_problems == [] and "the agents kept their heartbeats" in section
    assert "### Staleness (grace period 2 s" in section
    failover_report.save_raw(report, tmp_path / "kills.json")
    assert len(orjson.loads((tmp_path / "kills.json").read_bytes())["kills"]) == 1
    cp_plots.failover(report, tmp_path / "failover.png")
    cp_plots.staleness(report, tmp_path / "staleness.png")
    for name in ("failover.png", "staleness.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")


def test_verdicts_follow_the_numbers() -> None:
    config = operator_failover.FailoverConfig(kills=10)
    kills = [operator_failover.Kill("kube", 3, i, 1.0, 0.0, 2.0 + i / 10, 1.5, 8.0, reads=20, discovery=20)
             for i in range(10)]
    kills[3].read_failures, kills[3].read_retries, kills[4].rv_monotonic = 1, 1, False
    report = operator_failover.FailoverReport(config=config, kills=kills)
    [line] = failover_report.verdicts(report)
    assert line.startswith("real control plane, 3 replicas: ≤ 3 s from SIGKILL to the first accepted report, "
                           "every kill (a killed replica restarted within 1 s; max 2.90 s): **met**")
    assert "0 failed reads (1 failed of 200): **missed**" in line
    assert "the lists' resourceVersion never decreased: **missed**" in line
    assert "0 failed discovery calls (0 failed, 0 retried, of 200): **met**" in line

    again = operator_failover.FailoverReport.model_validate(orjson.loads(orjson.dumps(report.document())))
    assert failover_report.verdicts(again) == [line]
    again.agent_problems = ["real control plane, 3 replicas: agent-vm: 1 Lease renewals were late"]
    assert failover_report.withheld(again) == {"real control plane, 3 replicas"} and not failover_report.verdicts(again)
    assert "Withheld: real control plane, 3 replicas." in failover_report.render(again, machine.describe(), "cmd")


def test_a_section_is_replaced_in_place_and_the_others_are_kept() -> None:
    document = "# Benchmarks\n\n<!-- a:begin -->\nold a\n<!-- a:end -->\n\n<!-- b:begin -->\nb\n<!-- b:end -->\n"
    updated = replace_section(document, "a", "new a")
    assert updated == "# Benchmarks\n\n<!-- a:begin -->\nnew a\n<!-- a:end -->\n\n<!-- b:begin -->\nb\n<!-- b:end -->\n"
    appended = replace_section(updated, "c", "c")
    assert appended.endswith("<!-- b:end -->\n\n<!-- c:begin -->\nc\n<!-- c:end -->\n")
