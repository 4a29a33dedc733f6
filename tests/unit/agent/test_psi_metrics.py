"""PSI on the agent's /metrics: the latest sample's /proc/pressure, as ratios and cumulative seconds."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, generate_latest

from colocation.agent.procfs import Pressure, parse_pressure
from colocation.agent.psi_metrics import PsiMetrics

CPU = "some avg10=12.50 avg60=3.00 avg300=0.75 total=2500000\n"
MEMORY = ("some avg10=1.00 avg60=0.00 avg300=0.00 total=1000\n"
          "full avg10=0.50 avg60=0.00 avg300=0.00 total=500\n")


def pressures() -> dict[str, Pressure]:
    parsed = {"cpu": parse_pressure(CPU), "memory": parse_pressure(MEMORY)}
    return {resource: pressure for resource, pressure in parsed.items() if pressure is not None}


def test_the_latest_pressure_is_exported_as_ratios_and_seconds() -> None:
    latest: Mapping[str, Pressure] = {}
    registry = CollectorRegistry()
    PsiMetrics(lambda: latest).register(registry)
    assert b"colocation_agent_psi_stall_ratio{" not in generate_latest(registry)  # no sample yet: no series
    latest = pressures()
    value = registry.get_sample_value
    assert value("colocation_agent_psi_stall_ratio", {"resource": "cpu", "kind": "some", "window": "10s"}) == 0.125
    assert value("colocation_agent_psi_stall_ratio", {"resource": "cpu", "kind": "some", "window": "300s"}) == 0.0075
    assert value("colocation_agent_psi_stall_seconds_total", {"resource": "cpu", "kind": "some"}) == 2.5
    assert value("colocation_agent_psi_stall_ratio", {"resource": "memory", "kind": "full", "window": "10s"}) == 0.005
    # cpu has no `full` line on this kernel: no series for it, rather than a made-up 0.
    assert value("colocation_agent_psi_stall_ratio", {"resource": "cpu", "kind": "full", "window": "10s"}) is None
