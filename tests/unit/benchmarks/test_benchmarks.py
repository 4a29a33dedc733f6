"""The sandbox capacity benchmark end to end at a tiny size: real subprocesses, real HTTPS.

Timing is never asserted (it depends on the machine); what is asserted is that every phase ran,
every request succeeded, counts match the workload worked out by hand, and the report has every
section, so `make bench` cannot silently lose a measurement.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import machine, report, sandbox_capacity, workload
from benchmarks.markdown import markers, replace_section
from benchmarks.stats import percentile

pytestmark = pytest.mark.timeout(120)


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]  # 1 … 100
    assert percentile(samples, 0.50) == 50.0
    assert percentile(samples, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
    assert math.isnan(percentile([], 0.5))


def test_pods_fill_every_node_evenly_and_names_are_unique() -> None:
    sizes = workload.Sizes(nodes=5, pods_per_node=3, namespaces=2)
    refs = [workload.pod_ref(i, sizes) for i in range(sizes.pods)]
    assert len({(r.namespace, r.name) for r in refs}) == 15
    assert sorted({r.node for r in refs}) == [f"node-0000{i}" for i in range(5)]
    assert all(sum(r.node == node for r in refs) == 3 for node in {r.node for r in refs})
    assert {r.namespace for r in refs} == {"team-00", "team-01"}
    pod = workload.pod(0, sizes)
    assert pod["spec"]["nodeName"] == "node-00000"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}


def test_pod_names_stay_unique_at_the_default_size() -> None:
    # A duplicate would be a 409 AlreadyExists in the sandbox and a silent overwrite in the baseline.
    sizes = workload.Sizes(nodes=5000, pods_per_node=30, namespaces=50)
    keys = {(ref.namespace, ref.name) for ref in (workload.pod_ref(i, sizes) for i in range(sizes.pods))}
    assert len(keys) == 150_000


def test_replace_section_keeps_other_benchmarks() -> None:
    other = "<!-- ingest:begin -->\n## Ingest\nold\n<!-- ingest:end -->\n"
    first = replace_section(f"# Benchmarks\n\n{other}", report.SECTION, "## Sandbox capacity\nrun 1")
    second = replace_section(first, report.SECTION, "## Sandbox capacity\nrun 2")
    assert other in second
    assert "run 2" in second and "run 1" not in second
    begin, end = markers(report.SECTION)
    assert second.count(begin) == 1 and second.count(end) == 1


@pytest.mark.timed_pipeline
async def test_tiny_run_measures_every_phase(tmp_path: Path) -> None:
    config = sandbox_capacity.CapacityConfig(
        nodes=5, pods_per_node=3, namespaces=2, concurrency=4, watchers=2, watch_updates=10, list_repeats=1,
        selector_repeats=2, page_size=4, state_dir=tmp_path, progress_every=60)
    result = await sandbox_capacity.run(config)

    assert [w.name for w in result.baseline_writes] == ["namespaces", "nodes", "pods"]
    assert [(w.name, w.count) for w in result.writes] == [
        ("namespaces", 2), ("nodes", 5), ("pods", 15), ("pod status (strategic merge patch)", 15)]
    for phase in [*result.baseline_writes, *result.writes]:
        assert phase.errors == 0, phase.first_error
        assert phase.per_second > 0 and 0 < phase.latency.p50 <= phase.latency.p99 <= phase.latency.max

    items = {r.name: r.items for r in result.reads}
    assert items["pods, all namespaces (JSON)"] == 15
    assert items["pods, pages of 4"] == 15  # 4 pages: 4 + 4 + 4 + 3
    assert items["pods on one node (fieldSelector)"] == 3
    assert items["pods by label, all namespaces"] == 3  # app=web: pods 0, 6 and 12
    assert items["pods of one namespace as Table"] == 8  # team-00: the even pods 0 … 14
    assert items["nodes, all (JSON)"] == 5
    paginated = next(r for r in result.reads if r.name == "pods, pages of 4")
    assert paginated.latency.count == 4

    assert result.watch is not None
    assert result.watch.updates == 10 and result.watch.complete_watchers == 2
    assert result.watch.fewest_received == 10

    assert result.memory is not None and result.baseline_memory is not None
    assert result.memory.loaded > result.memory.empty > 10 << 20  # a Python process holds megabytes
    assert result.memory.peak >= result.memory.loaded

    text = report.render(result, machine.describe(), "python -m benchmarks.run --nodes 5")
    for heading in ("## Sandbox capacity: 5 nodes, 15 pods", "### Creates and status writes", "### Lists",
                    "### Watch fan-out", "### Memory", "### What this means"):
        assert heading in text
    assert "`python -m benchmarks.run --nodes 5`" in text
    assert "nan" not in text.lower()
