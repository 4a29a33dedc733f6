"""Aggregation as koordlet reports it, with every expected number worked by hand."""

from __future__ import annotations

import gc

import pytest

from colocation.agent.aggregate import AggregatedUsage, Aggregator, Usage, percentile, system_usage
from colocation.agent.collector import HostApplicationSample, PodSample, Sample

MI = 2**20


def node_sample(at: float, cpu: int, memory: int = 1000, *, pods: tuple[PodSample, ...] = (),
                apps: tuple[HostApplicationSample, ...] = (), measured: bool = True) -> Sample:
    return Sample(timestamp=at, node_cpu_millis=cpu, node_memory_bytes=memory, pods=pods,
                  host_applications=apps, node_cpu_measured=measured)


def pod(uid: str, cpu: int, memory: int, *, measured: bool = True) -> PodSample:
    return PodSample(uid=uid, cpu_millis=cpu, memory_bytes=memory, cgroup_path=f"kubepods/pod{uid}",
                     cpu_measured=measured)


@pytest.mark.parametrize(("values", "p", "expected"), [
    (list(range(1, 11)), 50, 5),  # rank ceil(5) = 5
    (list(range(1, 11)), 90, 9),  # rank 9
    (list(range(1, 11)), 95, 10),  # rank ceil(9.5) = 10 (koordlet's floor would give 9)
    (list(range(1, 11)), 99, 10),
    ([10, 20, 30, 40], 50, 20),  # rank 2: nearest-rank never averages two values
    ([10, 20, 30, 40], 90, 40),  # rank ceil(3.6) = 4
    ([7], 99, 7),
    (list(range(1, 21)), 95, 19),  # 0.95 * 20 is 19.000000000000004 in floats; the rank is 19
    (list(range(1, 101)), 99, 99),
])
def test_nearest_rank_percentile(values: list[int], p: int, expected: int) -> None:
    assert percentile(values, p) == expected


def test_percentile_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"1\.\.100"):
        percentile([1], 0)


def test_system_usage_is_floored_at_zero_per_resource() -> None:
    node = Usage(cpu_millis=4000, memory_bytes=8000)
    assert system_usage(node, [Usage(1000, 2000), Usage(500, 1000)], [Usage(250, 500)]) == Usage(2250, 4500)
    assert system_usage(node, [Usage(5000, 1000)]) == Usage(0, 7000)


def test_node_usage_is_the_average_over_the_window() -> None:
    aggregator = Aggregator(window_seconds=300)
    for at, cpu in ((0, 9999), (100, 1000), (200, 2000), (300, 3000), (400, 6000)):
        aggregator.add(node_sample(at, cpu, memory=cpu * 2))
    # Window (100, 400]: the samples at 200, 300 and 400 (the one at 100 is exactly 300 s old).
    assert aggregator.node_usage(400) == Usage(cpu_millis=3667, memory_bytes=7333)


def test_unmeasured_cpu_is_left_out_of_averages_but_memory_counts() -> None:
    aggregator = Aggregator()
    aggregator.add(node_sample(1, 0, memory=100, measured=False))
    assert aggregator.node_usage(1) is None  # no cpu value yet: nothing honest to report
    aggregator.add(node_sample(2, 1000, memory=300))
    assert aggregator.node_usage(2) == Usage(cpu_millis=1000, memory_bytes=200)


def test_aggregated_omits_durations_spanned_less_than_half() -> None:
    aggregator = Aggregator(durations=(300, 600, 1800), sample_interval_seconds=10)
    for at in range(0, 410, 10):  # 41 samples, cpu = at
        aggregator.add(node_sample(at, at, memory=at + 1))
    result = aggregator.aggregated(400)
    # 300 s: (100, 400] holds 110..400, spanning 290 >= 150. 600 s: 0..400, 400 >= 300.
    # 1800 s: 400 < 900, omitted.
    assert [entry.duration_seconds for entry in result] == [300, 600]
    five_minutes = result[0]
    # 30 values 110, 120, ..., 400: avg 255; p50 rank 15 → 250; p90 rank 27 → 370;
    # p95 rank ceil(28.5) = 29 → 390; p99 rank ceil(29.7) = 30 → 400.
    assert five_minutes == AggregatedUsage(
        duration_seconds=300, avg=Usage(255, 256), p50=Usage(250, 251), p90=Usage(370, 371),
        p95=Usage(390, 391), p99=Usage(400, 401))


def test_a_duration_spanned_exactly_half_is_reported() -> None:
    aggregator = Aggregator(durations=(600,), sample_interval_seconds=10)
    for at in range(1000, 1310, 10):  # span 300 = 600 / 2
        aggregator.add(node_sample(at, 1))
    assert [entry.duration_seconds for entry in aggregator.aggregated(1300)] == [600]
    # At 1600 the window is (1000, 1600]: the sample at 1000 falls out, 1010..1300 spans 290 < 300.
    assert aggregator.aggregated(1600) == ()


def test_pod_averages_skip_new_pods_until_their_cpu_is_measured() -> None:
    aggregator = Aggregator(window_seconds=60)
    aggregator.add(node_sample(1, 500, pods=(pod("a", 0, 100, measured=False),)))
    assert aggregator.pod_usages(1) == {}
    aggregator.add(node_sample(2, 500, pods=(pod("a", 200, 300), pod("b", 0, 10, measured=False))))
    aggregator.add(node_sample(3, 500, pods=(pod("a", 400, 500), pod("b", 100, 30))))
    assert aggregator.pod_usages(3) == {"a": Usage(300, 300), "b": Usage(100, 20)}


def test_pods_gone_for_a_window_are_forgotten() -> None:
    aggregator = Aggregator(window_seconds=60)
    aggregator.add(node_sample(0, 500, pods=(pod("a", 100, 100),)))
    aggregator.add(node_sample(30, 500, pods=(pod("b", 100, 100),)))
    assert set(aggregator.pod_usages(30)) == {"a", "b"}
    aggregator.add(node_sample(60, 500))
    assert set(aggregator.pod_usages(60)) == {"b"}
    assert set(aggregator._pods) == {"b"}  # and its memory is released


def test_system_usage_averages_each_samples_remainder() -> None:
    aggregator = Aggregator()
    aggregator.add(node_sample(1, 1000, memory=10 * MI, pods=(pod("a", 300, 4 * MI),),
                               apps=(HostApplicationSample(name="nginx", cpu_millis=100, memory_bytes=1 * MI,
                                                           cgroup_path="system.slice/nginx.service"),)))
    aggregator.add(node_sample(2, 500, memory=2 * MI, pods=(pod("a", 900, 1 * MI),)))
    # Sample 1: cpu 1000-300-100 = 600, memory 10-4-1 = 5Mi. Sample 2: cpu max(500-900, 0) = 0,
    # memory 2-1 = 1Mi. Averages: 300m, 3Mi.
    assert aggregator.system_usage(2) == Usage(300, 3 * MI)
    assert aggregator.host_application_usages(2) == {"nginx": Usage(100, 1 * MI)}


def test_system_cpu_of_a_sample_with_an_unmeasured_pod_is_left_out() -> None:
    aggregator = Aggregator()
    aggregator.add(node_sample(1, 1000, memory=100, pods=(pod("a", 0, 10, measured=False),)))
    aggregator.add(node_sample(2, 1000, memory=100, pods=(pod("a", 400, 10),)))
    # Sample 1 would claim the new pod's cpu as system's: only sample 2 counts for cpu.
    assert aggregator.system_usage(2) == Usage(600, 90)


def test_memory_is_bounded_by_the_longest_duration_and_the_cap() -> None:
    aggregator = Aggregator(window_seconds=300, durations=(300, 600), sample_interval_seconds=1)
    for at in range(5000):
        aggregator.add(node_sample(at, 1, pods=(pod("a", 1, 1),)))
    assert len(aggregator) <= 602
    assert len(aggregator._pods["a"]) <= 302
    capped = Aggregator(durations=(3600,), sample_interval_seconds=1, max_samples=100)
    for at in range(500):
        capped.add(node_sample(at, 1))
    assert len(capped) == 100


def test_a_clock_stepping_back_starts_over() -> None:
    aggregator = Aggregator()
    aggregator.add(node_sample(1000, 5000))
    aggregator.add(node_sample(10, 1000))
    assert aggregator.node_usage(10) == Usage(1000, 1000)
    assert len(aggregator) == 1


def test_configure_applies_a_new_policy_and_keeps_samples() -> None:
    aggregator = Aggregator(window_seconds=300, durations=(300,), sample_interval_seconds=10)
    for at in range(0, 310, 10):
        aggregator.add(node_sample(at, at))
    aggregator.configure(window_seconds=60, durations=(120, 600))
    # Window (240, 300]: 250..300, average 275.
    assert aggregator.node_usage(300) == Usage(cpu_millis=275, memory_bytes=1000)
    # 120 s: 190..300 spans 110 >= 60. 600 s: the old policy only needed 300 s, so the sample at
    # 0 was already let go; 10..300 spans 290 < 300 and the duration waits for more data.
    assert [entry.duration_seconds for entry in aggregator.aggregated(300)] == [120]
    aggregator.add(node_sample(310, 310))
    assert [entry.duration_seconds for entry in aggregator.aggregated(310)] == [120, 600]
    with pytest.raises(ValueError, match="positive"):
        aggregator.configure(durations=(0,))


def test_kept_points_are_not_tracked_by_the_garbage_collector() -> None:
    # A simulated-agents process keeps ~1,800 node points and ~300 points per pod for every node; full
    # collections walking them all stalled its event loop for seconds. Tuples of numbers are untracked.
    aggregator = Aggregator(window_seconds=10, durations=(10,))
    for second in range(20):
        aggregator.add(node_sample(float(second), 100 + second, pods=(pod("a", 10, MI, measured=second > 0),)))
    gc.collect()
    kept = [*aggregator._node, *aggregator._pods["a"]]
    assert len(kept) > 20 and not any(gc.is_tracked(point) for point in kept)
    assert aggregator.node_usage(19.0) == Usage(cpu_millis=114, memory_bytes=1000)  # seconds 10..19


# ---- the short window metrics.k8s.io serves ---------------------------------------------------------

def test_recent_usage_averages_the_last_seconds_and_follows_a_load_step_the_long_window_hides() -> None:
    aggregator = Aggregator(window_seconds=300, recent_seconds=10)
    for at in range(1, 291):  # 290 s at 1 core, then a step to 3 cores for 10 s
        aggregator.add(node_sample(at, 1000, pods=(pod("a", 1000, 5 * MI),)))
    for at in range(291, 301):
        aggregator.add(node_sample(at, 3000, pods=(pod("a", 3000, 5 * MI),)))
    recent = aggregator.recent(300)
    assert recent is not None
    assert (recent.node, recent.window_seconds) == (Usage(3000, 1000), 10)
    assert recent.pods == {"a": Usage(3000, 5 * MI)}
    # Koordinator's average over 300 s has moved by a fifteenth of the step: 290 x 1000 + 10 x 3000.
    assert aggregator.node_usage(300) == Usage(1067, 1000)
    # Half-way into the window: (5 x 1000 + 5 x 3000) / 10.
    partial = aggregator.recent(295)
    assert partial is not None and partial.node == Usage(2000, 1000)


def test_recent_window_is_what_the_samples_span_while_the_agent_is_young() -> None:
    aggregator = Aggregator(recent_seconds=10)
    assert aggregator.recent(100) is None
    for at in (98, 99, 100):
        aggregator.add(node_sample(at, 600))
    recent = aggregator.recent(100)
    assert recent is not None and (recent.node.cpu_millis, recent.window_seconds) == (600, 3)


def test_recent_usage_leaves_out_unmeasured_cpu_and_pods_without_samples_in_the_window() -> None:
    aggregator = Aggregator(recent_seconds=10)
    aggregator.add(node_sample(80, 500, pods=(pod("old", 100, MI),)))  # 20 s ago: outside the window
    aggregator.add(node_sample(99, 0, measured=False, pods=(pod("new", 0, MI, measured=False),)))
    aggregator.add(node_sample(100, 800, pods=(pod("new", 200, MI), pod("idle", 0, MI, measured=False))))
    recent = aggregator.recent(100)
    assert recent is not None
    assert recent.node == Usage(800, 1000)
    assert recent.pods == {"new": Usage(200, MI)}  # "idle" has no measured cpu, "old" no sample


@pytest.mark.parametrize("seconds", [0, 16])
def test_recent_window_is_short(seconds: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.15"):
        Aggregator(recent_seconds=seconds)


def test_a_short_koordinator_window_does_not_shorten_the_recent_one() -> None:
    # aggregateDurationSeconds may be configured below 10 s; the pods' rings keep 10 s anyway.
    aggregator = Aggregator(window_seconds=5, durations=(), recent_seconds=10)
    for at in range(91, 101):
        aggregator.add(node_sample(at, at * 10, pods=(pod("a", at, MI),)))
    recent = aggregator.recent(100)
    assert recent is not None and recent.window_seconds == 10
    assert recent.pods["a"].cpu_millis == round(sum(range(91, 101)) / 10)
