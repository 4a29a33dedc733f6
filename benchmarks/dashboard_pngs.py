"""The Grafana dashboard's panels as PNGs: what a real Prometheus answers for a real sandbox run.

    python -m benchmarks.dashboard_pngs                      # run a sandbox, record, render
    python -m benchmarks.dashboard_pngs --from-samples FILE  # render again from a recording

The run: `colocation sandbox --nodes 20` (builtin API server, two operator replicas, one simulated-
agents process), every operator replica's and agent process's /metrics scraped every --interval
seconds for --duration seconds; halfway through, the leader is stopped (SIGTERM: it hands its Lease
over and the sandbox restarts it, as the kubelet would) so that the leader panel shows a handover.
There is no kube-state-metrics in the sandbox: each round also reads the Nodes and records their
batch allocatable as `kube_node_status_allocatable` (resource kubernetes_io_batch_cpu, ...), the
series kube-state-metrics exports for them. The samples the panels read are written as JSON.

The drawing: the recording is written as OpenMetrics, turned into TSDB blocks by `promtool tsdb
create-blocks-from openmetrics`, and served by prometheus over those blocks (both built by
hack/prometheus/build.sh); each line is a panel query's query_range answer over the run, one step
per recorded interval.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import plotting, processes, prometheus
from benchmarks.client import say
from colocation.apimachinery.quantity import parse_quantity
from colocation_sandbox.launcher.controlplane.binaries import kubectl_binary

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "manifests" / "components" / "monitoring" / "dashboard.json"
OUTPUT = REPO / "docs" / "dashboard"
BATCH_RESOURCES = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")
SCRAPE_TIMEOUT = 5.0
PROMTOOL_TIMEOUT_SECONDS = 300
# The run's time 0 as a Unix time in the TSDB. Any fixed time does: the blocks are read, not aged.
RECORDING_EPOCH = 1_700_000_000.0
# How far back a query looks for a series' last sample, in recorded intervals (Prometheus: 5
# minutes). The queries come half an interval after each scrape (query_times), so each sees that
# scrape's samples and no older ones. A recorded staleness marker (a failed scrape) cannot be written
# in OpenMetrics, so it is left out; with this look-back its series is gone from the next query on,
# as the marker would have it.
LOOKBACK_INTERVALS = 1.0
Sample = tuple[float, dict[str, str], float]  # (seconds since the run started, labels with __name__, value)
Matrix = list[dict[str, Any]]  # a query_range answer's result: [{"metric": labels, "values": [[t, "v"], ...]}]


@dataclass(frozen=True)
class Line:
    legend: str
    points: list[tuple[float, float]]
    target: int = 0  # which of the panel's queries: each is drawn in its own line style


def exposition_samples(text: str, t: float, target: Mapping[str, str], keep: set[str]) -> list[Sample]:
    """The samples of one /metrics answer whose names are in `keep`, labelled with the target (job, instance)."""
    return [(t, {"__name__": s.name, **s.labels, **target}, float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples if s.name in keep]


def allocatable_samples(nodes: Iterable[Mapping[str, Any]], t: float) -> list[Sample]:
    """Nodes' batch allocatable as kube-state-metrics names it (resource name with `.`, `/`, `-` as `_`)."""
    found = []
    for node in nodes:
        allocatable = node.get("status", {}).get("allocatable", {})
        for resource in BATCH_RESOURCES:
            if resource in allocatable:
                found.append((t, {"__name__": "kube_node_status_allocatable", "job": "kube-state-metrics",
                                  "node": node["metadata"]["name"], "resource": re.sub(r"[./-]", "_", resource),
                                  "unit": "integer"}, float(parse_quantity(allocatable[resource]))))
    return found


def legend(template: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend format: `{{label}}` replaced by the series' value of that label."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def openmetrics(samples: Iterable[Sample], epoch: float = RECORDING_EPOCH) -> str:
    """The samples as OpenMetrics text for promtool's backfill: each series' samples together and in
    time order, times from `epoch`; staleness markers (NaN) left out."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    for t, labels, value in samples:
        if not math.isnan(value):
            key = (labels["__name__"], tuple(sorted((k, v) for k, v in labels.items() if k != "__name__")))
            series.setdefault(key, []).append((t, value))
    lines = []
    for (name, pairs), points in sorted(series.items()):  # by name: a metric's series together
        selector = name + "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs) + "}"
        lines += [f"{selector} {_number(value)} {epoch + t:.3f}" for t, value in sorted(points)]
    return "\n".join([*lines, "# EOF", ""])


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return ("+Inf" if value > 0 else "-Inf") if math.isinf(value) else repr(value)


def panel_lines(panel: Mapping[str, Any], answers: Sequence[Matrix], epoch: float = RECORDING_EPOCH) -> list[Line]:
    """One line per legend of each of the panel's queries, from their query_range answers (in the
    order of its targets), at times since the run started."""
    lines: list[Line] = []
    for index, (target, matrix) in enumerate(zip(panel["targets"], answers, strict=True)):
        for series in matrix:
            name = legend(target.get("legendFormat") or target["expr"], series["metric"])
            lines.append(Line(name, [(float(t) - epoch, float(v)) for t, v in series["values"]], index))
    return sorted(lines, key=lambda line: (line.target, line.legend))


def with_gaps(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A NaN point wherever the series skipped more than one and a half of its usual spacing, so that
    the plot shows a gap (a replica restarting) instead of a line drawn across it."""
    steps = sorted(b[0] - a[0] for a, b in itertools.pairwise(points))
    if not steps:
        return points
    usual = steps[len(steps) // 2]
    out = [points[0]]
    for before, after in itertools.pairwise(points):
        if after[0] - before[0] > 1.5 * usual:
            out.append(((before[0] + after[0]) / 2, math.nan))
        out.append(after)
    return out


def render(panel: Mapping[str, Any], lines: list[Line], times: list[float], path: Path) -> Path:
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    styles = ("-", "--", ":", "-.")
    for line in lines:
        xs, ys = zip(*with_gaps(line.points), strict=True)
        ax.plot(xs, ys, styles[line.target % len(styles)], label=line.legend, linewidth=1.4)
    if not lines:
        ax.text(0.5, 0.5, "no series in this run", ha="center", va="center", transform=ax.transAxes)
    if times:
        ax.set_xlim(times[0], times[-1])
    ax.set_title(panel["title"])
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel(panel["fieldConfig"]["defaults"].get("custom", {}).get("axisLabel", ""))
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize=7, ncol=max(1, math.ceil(len(lines) / 8)), loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return plotting.save(fig, path)


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def query_times(times: Sequence[float]) -> tuple[float, float, float]:
    """(start, end, step) of the queries over a recording whose scrapes came at `times`: one query
    half an interval after each scrape, where the jitter of the scrapes moves none across a query."""
    step = round((times[-1] - times[0]) / (len(times) - 1), 3) if len(times) > 1 else 1.0
    return times[0] + step / 2, times[-1] + step / 2, step


def backfill(promtool: str, samples: Iterable[Sample], directory: Path) -> Path:
    """A TSDB under `directory` holding the samples (promtool tsdb create-blocks-from openmetrics)."""
    recording = directory / "recording.om"
    recording.write_text(openmetrics(samples))
    data = directory / "data"
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(recording), str(data)],
                            capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_SECONDS, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"promtool tsdb create-blocks-from openmetrics failed:\n{result.stderr}")
    return data


def query_panels(binaries: prometheus.Binaries, dashboard: Mapping[str, Any],
                 samples: list[Sample]) -> list[list[Line]]:
    """Each panel's lines: its queries' query_range answers from a Prometheus over the samples."""
    times = sorted({t for t, _, _ in samples})
    if not times:
        return [[] for _ in dashboard["panels"]]
    start, end, step = query_times(times)
    span = {"start": f"{RECORDING_EPOCH + start:.3f}", "end": f"{RECORDING_EPOCH + end:.3f}",
            "step": f"{step}", "lookback_delta": f"{LOOKBACK_INTERVALS * step:.3f}"}  # seconds
    with tempfile.TemporaryDirectory(prefix="colocation-dashboard-") as tmp:
        backfill(binaries.promtool, samples, Path(tmp))
        with prometheus.serving(binaries.prometheus, Path(tmp), {}) as url:
            return [panel_lines(panel, [prometheus.api(url, "query_range", {"query": target["expr"], **span})["result"]
                                        for target in panel["targets"]])
                    for panel in dashboard["panels"]]


def render_all(binaries: prometheus.Binaries, dashboard: Mapping[str, Any], samples: list[Sample],
               output: Path) -> list[Path]:
    times = sorted({t for t, _, _ in samples})
    return [render(panel, lines, times, output / f"{slug(panel['title'])}.png")
            for panel, lines in zip(dashboard["panels"], query_panels(binaries, dashboard, samples), strict=True)]


def dashboard_metric_names(binaries: prometheus.Binaries, dashboard: Mapping[str, Any]) -> set[str]:
    """Every metric the panels read, as Prometheus parses their queries."""
    with tempfile.TemporaryDirectory(prefix="colocation-dashboard-") as tmp, \
            prometheus.serving(binaries.prometheus, Path(tmp), {}) as url:
        return {name for panel in dashboard["panels"] for target in panel["targets"]
                for name in prometheus.metric_names(url, target["expr"])}


def dump_samples(samples: list[Sample], path: Path) -> None:
    """Grouped by series (labels once, then [t, value] points); non-finite values as strings (JSON has no
    Infinity or NaN; NaN is a staleness marker)."""
    grouped: dict[tuple[tuple[str, str], ...], list[list[float | str]]] = {}
    for t, labels, value in samples:
        grouped.setdefault(tuple(sorted(labels.items())), []).append(
            [round(t, 3), value if math.isfinite(value) else str(value)])
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"series": [{"labels": dict(labels), "points": points} for labels, points in grouped.items()]}
    path.write_text(json.dumps(document, separators=(",", ":")) + "\n")


def load_samples(path: Path) -> list[Sample]:
    return sorted(((float(t), series["labels"], float(value))
                   for series in json.loads(path.read_text())["series"] for t, value in series["points"]),
                  key=lambda sample: sample[0])


class Recorder:
    """Scrapes a running sandbox's operator replicas and agent processes, and reads its Nodes."""

    def __init__(self, state_dir: Path, kubeconfig: str, keep: set[str]) -> None:
        self.state_dir = state_dir
        self.kubeconfig = kubeconfig
        self.keep = keep
        self.samples: list[Sample] = []
        self._seen: dict[str, list[dict[str, str]]] = {}  # labels of each target's last scrape
        self.started = time.monotonic()

    def targets(self) -> dict[str, tuple[str, str]]:
        """{instance: (job, /metrics URL)} from the sandbox's state files."""
        found = {}
        for replica in json.loads((self.state_dir / "operators.json").read_text()):
            found[replica["identity"]] = ("colocation-operator", f"https://127.0.0.1:{replica['port']}/metrics")
        for index, agents in enumerate(json.loads((self.state_dir / "agents.json").read_text())):
            found[f"agents-{index}"] = ("colocation-agent", f"http://127.0.0.1:{agents['metricsPort']}/metrics")
        return found

    async def round(self, session: aiohttp.ClientSession) -> None:
        t = time.monotonic() - self.started
        targets = self.targets()
        answers = await asyncio.gather(*(self._get(session, url) for _, url in targets.values()))
        for (instance, (job, _)), text in zip(targets.items(), answers, strict=True):
            if text is None:  # Prometheus marks the target's series stale when a scrape fails
                self.samples += [(t, labels, math.nan) for labels in self._seen.pop(instance, [])]
                continue
            scraped = exposition_samples(text, t, {"job": job, "instance": instance}, self.keep)
            self._seen[instance] = [labels for _, labels, _ in scraped]
            self.samples += scraped
        self.samples += allocatable_samples(await self._nodes(), t)

    async def _get(self, session: aiohttp.ClientSession, url: str) -> str | None:
        # The operators' serving certificates come from a CA they create inside the sandbox; this is
        # loopback only, so the scrape does not verify them (the ServiceMonitor does, in a cluster).
        try:
            async with session.get(url, ssl=False) as answer:
                return await answer.text() if answer.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None  # a replica restarting: a gap, as Prometheus would record

    async def _nodes(self) -> list[dict[str, Any]]:
        kubectl = kubectl_binary()
        if kubectl is None:
            raise RuntimeError("kubectl is needed to read the sandbox's Nodes (hack/kube/build.sh, or the PATH's)")
        process = await asyncio.create_subprocess_exec(
            kubectl, "--kubeconfig", self.kubeconfig, "get", "nodes", "-o", "json",
            f"--request-timeout={SCRAPE_TIMEOUT:.0f}s", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        out, _ = await process.communicate()
        items: list[dict[str, Any]] = json.loads(out)["items"] if process.returncode == 0 else []
        return items

    def stop_leader(self) -> str | None:
        """SIGTERM the replica that leads now (by the last samples); its name, or None without a leader."""
        last = max((t for t, labels, _ in self.samples if labels["__name__"] == "colocation_leader"), default=None)
        leaders = [labels["instance"] for t, labels, value in self.samples
                   if labels["__name__"] == "colocation_leader" and t == last and value == 1.0]
        for replica in json.loads((self.state_dir / "operators.json").read_text()):
            if replica["identity"] in leaders:
                os.kill(replica["pid"], signal.SIGTERM)
                return str(replica["identity"])
        return None


async def record(nodes: int, duration: float, interval: float, keep: set[str]) -> list[Sample]:
    with tempfile.TemporaryDirectory(prefix="colocation-dashboard-") as tmp:
        state = Path(tmp) / "state"
        sandbox = await processes.start(["-m", "colocation", "sandbox", "--nodes", str(nodes), "--port", "0",
                                         "--state-dir", str(state)], Path(tmp) / "sandbox.log", timeout=180.0)
        try:
            recorder = Recorder(state, sandbox.ready["kubeconfig"], keep)
            timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT)
            stopped = False
            async with aiohttp.ClientSession(timeout=timeout) as session:
                while (elapsed := time.monotonic() - recorder.started) < duration:
                    await recorder.round(session)
                    if not stopped and elapsed >= duration / 2:
                        stopped = True
                        say(f"stopping the leader: {recorder.stop_leader()}")
                    say(f"{elapsed:5.0f} s: {len(recorder.samples)} samples")
                    await asyncio.sleep(max(0.0, interval - (time.monotonic() - recorder.started - elapsed)))
            return recorder.samples
        finally:
            await sandbox.stop(timeout=60.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of scraping")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between scrapes")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--from-samples", type=Path, default=None, help="render from this recording; no sandbox")
    args = parser.parse_args(argv)
    dashboard = json.loads(DASHBOARD.read_text())
    binaries = prometheus.locate(build=True)
    if args.from_samples is not None:
        samples = load_samples(args.from_samples)
    else:
        keep = dashboard_metric_names(binaries, dashboard)
        samples = asyncio.run(record(args.nodes, args.duration, args.interval, keep))
        dump_samples(samples, args.output / "samples.json")
    for path in render_all(binaries, dashboard, samples, args.output):
        say(f"wrote {path}")


if __name__ == "__main__":
    main()
