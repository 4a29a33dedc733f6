"""The node's pressure stall information (PSI) as Prometheus metrics of the agent's /metrics.

The collector reads /proc/pressure/{cpu,memory,io} with every sample; Koordinator's NodeMetric
has no field for it, so the latest values are exported at scrape time instead:
`colocation_agent_psi_stall_ratio{resource, kind, window}` (the share of time, 0..1, some or all
non-idle tasks stalled, over the kernel's 10s, 60s or 300s) and
`colocation_agent_psi_stall_seconds_total{resource, kind}`. A kernel without PSI gives no series;
nor does cpu `full` before Linux 5.13.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from colocation.agent.procfs import Pressure, PressureStat

__all__ = ["PsiMetrics"]


class PsiMetrics:
    """A Prometheus collector of the PSI `latest()` returns (an empty mapping: nothing yet)."""

    def __init__(self, latest: Callable[[], Mapping[str, Pressure]]) -> None:
        self._latest = latest

    def register(self, registry: CollectorRegistry) -> PsiMetrics:
        registry.register(self)
        return self

    def collect(self) -> Iterator[Metric]:
        ratio = GaugeMetricFamily("colocation_agent_psi_stall_ratio",
                                  "Share of time (0..1) tasks stalled on the resource, as the node's "
                                  "/proc/pressure averages it over the window (latest sample).",
                                  labels=["resource", "kind", "window"])
        seconds = CounterMetricFamily("colocation_agent_psi_stall_seconds",
                                      "Cumulative time tasks stalled on the resource, per the node's /proc/pressure "
                                      "(latest sample).", labels=["resource", "kind"])
        for resource, pressure in sorted(self._latest().items()):
            for kind, stat in _lines(pressure):
                for window, value in (("10s", stat.avg10), ("60s", stat.avg60), ("300s", stat.avg300)):
                    ratio.add_metric([resource, kind, window], value / 100)
                seconds.add_metric([resource, kind], stat.total_usec / 1e6)
        yield ratio
        yield seconds

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected at scrape time only: nothing to check at registration


def _lines(pressure: Pressure) -> Iterator[tuple[str, PressureStat]]:
    yield "some", pressure.some
    if pressure.full is not None:
        yield "full", pressure.full
