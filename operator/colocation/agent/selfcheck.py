"""Did an agent process behave like its real agents would? The check to pass before reporting figures.

Between a read of every agent process's metrics before a window and one after it, a run passes
when no heartbeat was late and none is overdue at the end (a node never heard is overdue), every
informer is synced and none failed, no warning or error was logged, and no process restarted
(its counters did not go back). `python -m colocation.agent.selfcheck --state-dir SANDBOX_STATE
--window 120` checks a running sandbox and exits 1 on any problem; benchmarks call
`read_sandbox` before and after their window and `problems` on the two.

The metrics it reads: docs/agent.md#self-check
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, kw_only=True)
class AgentHealth:
    """What one read of an agent process's /metrics says about its nodes."""

    nodes: int = 0
    renewals: float = 0.0  # successful Lease renewals, all nodes
    reports: float = 0.0  # accepted reports, all nodes
    late_heartbeats: float = 0.0
    heartbeats_overdue: int = 0
    oldest_heartbeat_age: float = 0.0  # seconds
    informers: int = 0
    informers_synced: int = 0
    informer_failures: float = 0.0
    errors: Mapping[str, float] = field(default_factory=dict)  # logger → warnings and errors logged
    loop_lag: float = 0.0  # seconds

    @property
    def error_count(self) -> float:
        return sum(self.errors.values())


def parse_health(exposition: str) -> AgentHealth:
    values: dict[str, float] = {}
    errors: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "colocation_agent_errors_total":
                logger = sample.labels.get("logger", "")
                errors[logger] = errors.get(logger, 0.0) + sample.value
            elif sample.name in ("colocation_agent_informer_failures_total", "colocation_agent_reports_sent_total"):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
            else:
                values[sample.name] = sample.value

    def number(name: str) -> float:
        value = values.get(name, 0.0)
        return 0.0 if math.isnan(value) else value

    return AgentHealth(
        nodes=int(number("colocation_agent_nodes")),
        renewals=number("colocation_agent_lease_renew_duration_seconds_count"),
        reports=number("colocation_agent_reports_sent_total"),
        late_heartbeats=number("colocation_agent_heartbeats_late_total"),
        heartbeats_overdue=int(number("colocation_agent_heartbeats_overdue")),
        oldest_heartbeat_age=number("colocation_agent_heartbeat_oldest_age_seconds"),
        informers=int(number("colocation_agent_informers")),
        informers_synced=int(number("colocation_agent_informers_synced")),
        informer_failures=number("colocation_agent_informer_failures_total"),
        errors=errors,
        loop_lag=number("colocation_agent_event_loop_lag_seconds"))


def problems(before: AgentHealth, after: AgentHealth, *, warnings_expected: bool = False) -> list[str]:
    """What went wrong between two reads of one process; [] when its nodes did what real agents do.

    `warnings_expected`: the window injected faults that agents rightly warn about (a leader killed:
    reports fail until the next one serves, so heartbeats come late), so only whether every node
    is heard at the end and the informers are judged.
    """
    found: list[str] = []
    if after.renewals < before.renewals or after.reports < before.reports or after.error_count < before.error_count:
        return ["the agent process was restarted during the window (its counters went back)"]
    if after.nodes == 0:
        found.append("the process runs no node")
    if (late := after.late_heartbeats - before.late_heartbeats) and not warnings_expected:
        found.append(f"{late:.0f} heartbeats were late (an accepted report or Lease renewal more than the "
                     f"heartbeat interval plus a tenth after the one before)")
    if after.heartbeats_overdue:
        found.append(f"{after.heartbeats_overdue} of {after.nodes} nodes' heartbeats are overdue at the end (the "
                     f"oldest is {after.oldest_heartbeat_age:.1f} s old)")
    if after.informers_synced < after.informers:
        found.append(f"{after.informers - after.informers_synced} of {after.informers} informers are not synced")
    if failed := after.informer_failures - before.informer_failures:
        found.append(f"{failed:.0f} list or watch attempts failed")
    if (logged := after.error_count - before.error_count) and not warnings_expected:
        by_logger = ", ".join(f"{logger}: {count - before.errors.get(logger, 0.0):.0f}"
                              for logger, count in sorted(after.errors.items())
                              if count > before.errors.get(logger, 0.0))
        found.append(f"the agents logged {logged:.0f} warnings or errors ({by_logger})")
    return found


def summary(before: AgentHealth, after: AgentHealth) -> str:
    return (f"{after.nodes} nodes: {after.reports - before.reports:.0f} reports accepted, "
            f"{after.renewals - before.renewals:.0f} Lease renewals; heartbeats "
            f"{after.late_heartbeats - before.late_heartbeats:.0f} late, {after.heartbeats_overdue} overdue, oldest "
            f"{after.oldest_heartbeat_age:.1f} s; informers {after.informers_synced}/{after.informers} synced, "
            f"{after.informer_failures - before.informer_failures:.0f} failures; "
            f"{after.error_count - before.error_count:.0f} warnings or errors; event loop lag "
            f"{after.loop_lag * 1000:.0f} ms")


async def read_health(session: aiohttp.ClientSession, url: str, timeout: float = 10.0) -> AgentHealth:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
        response.raise_for_status()
        return parse_health(await response.text())


def sandbox_metrics_urls(state_dir: Path) -> dict[str, str]:
    """The /metrics URL of every agent process of a sandbox, by a name for it (from STATE_DIR/agents.json;
    on loopback, or at the `host` an entry names: a pod's address on the sandbox with a real API server)."""
    entries = orjson.loads((state_dir / "agents.json").read_bytes())
    return {f"{'simulated' if entry['simulated'] else 'real'} agent ({len(entry['nodes'])} nodes, pid "
            f"{entry['pid']})": f"http://{entry.get('host', '127.0.0.1')}:{entry['metricsPort']}/metrics"
            for entry in entries}


async def read_all(urls: Mapping[str, str]) -> dict[str, AgentHealth]:
    async with aiohttp.ClientSession() as session:
        healths = await asyncio.gather(*(read_health(session, url) for url in urls.values()))
    return dict(zip(urls, healths, strict=True))


async def read_sandbox(state_dir: Path) -> dict[str, AgentHealth]:
    """One read of every agent process of a sandbox."""
    return await read_all(sandbox_metrics_urls(state_dir))


def sandbox_problems(before: Mapping[str, AgentHealth], after: Mapping[str, AgentHealth], *,
                     warnings_expected: bool = False) -> list[str]:
    """`problems` for every process read twice, each prefixed with its name."""
    found = [f"{name}: {problem}" for name in after if name in before
             for problem in problems(before[name], after[name], warnings_expected=warnings_expected)]
    found += [f"{name}: not read before the window (restarted?)" for name in after if name not in before]
    return found


def sandbox_verdict(before: Mapping[str, AgentHealth], after: Mapping[str, AgentHealth], *,
                    warnings_expected: bool = False) -> tuple[dict[str, str], list[str]]:
    """What a window did to every process read before and after it: (summary by process, problems)."""
    summaries = {name: summary(before[name], health) for name, health in after.items() if name in before}
    return summaries, sandbox_problems(before, after, warnings_expected=warnings_expected)


async def watch(urls: Mapping[str, str], window: float) -> tuple[dict[str, str], list[str]]:
    """Read every process, wait `window` seconds, read again: (summary by process, problems)."""
    before = await read_all(urls)
    await asyncio.sleep(window)  # the measured window itself
    return sandbox_verdict(before, await read_all(urls))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m colocation.agent.selfcheck", description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", type=Path, help="A running sandbox's state directory (its agents.json).")
    where.add_argument("--url", action="append", help="An agent process's /metrics URL (repeatable).")
    parser.add_argument("--window", type=float, default=60.0, help="Seconds to watch (default 60).")
    args = parser.parse_args(argv)
    urls = sandbox_metrics_urls(args.state_dir) if args.state_dir else {url: url for url in args.url}
    summaries, found = asyncio.run(watch(urls, args.window))
    for name, text in summaries.items():
        print(f"{name}: {text}")
    for problem in found:
        print(f"problem: {problem}")
    print("ok" if not found else f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
