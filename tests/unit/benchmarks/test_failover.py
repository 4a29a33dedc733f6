"""Smoke run of the failover and staleness benchmark at a tiny size: the report's shape, not its timings."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks import cp_plots, cp_report, machine, operator_failover
from benchmarks.markdown import replace_section


async def test_a_tiny_failover_and_staleness_run_reports_every_case(tmp_path: Path) -> None:
    config = operator_failover.FailoverConfig(
        nodes=3, pods_per_node=2, operators=3, repetitions=1, lease_settings=(operator_failover.SHORT_LEASE,),
        staleness_nodes=3, grace=2.0, evaluation_interval=0.25, staleness_repetitions=1, state_dir=tmp_path)
    report = await operator_failover.run(config)

    assert [(t.settings, t.signal) for t in report.takeovers] == [("short", "SIGKILL"), ("short", "SIGTERM")]
    for takeover in report.takeovers:
        assert 0 < takeover.lease_moved <= takeover.direct
        assert math.isfinite(takeover.apiservice)
    staleness = report.staleness
    assert staleness is not None
    assert len(staleness.one_agent) == 1
    assert (staleness.simulated_nodes, staleness.removed) == (2, 2)  # every simulated node lost its batch resources

    section = cp_report.render_failover(report, machine.describe(), "python -m benchmarks.run --suite failover")
    assert section.startswith("## Operator failover and staleness: 3 nodes")
    assert "| short (2 s / 1.5 s / 0.25 s) | SIGKILL | 1 |" in section
    assert report.agent_problems == [] and "Meanwhile the agents kept their heartbeats" in section
    assert "### Staleness (grace period 2 s" in section
    cp_plots.failover(report, tmp_path / "failover.png")
    cp_plots.staleness(report, tmp_path / "staleness.png")
    for name in ("failover.png", "staleness.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")


def test_a_section_is_replaced_in_place_and_the_others_are_kept() -> None:
    document = "# Benchmarks\n\n<!-- a:begin -->\nold a\n<!-- a:end -->\n\n<!-- b:begin -->\nb\n<!-- b:end -->\n"
    updated = replace_section(document, "a", "new a")
    assert updated == "# Benchmarks\n\n<!-- a:begin -->\nnew a\n<!-- a:end -->\n\n<!-- b:begin -->\nb\n<!-- b:end -->\n"
    appended = replace_section(updated, "c", "c")
    assert appended.endswith("<!-- b:end -->\n\n<!-- c:begin -->\nc\n<!-- c:end -->\n")
