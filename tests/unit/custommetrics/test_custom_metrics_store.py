"""The series store (retention, garbage collection, bounds, indexes) and the aggregations, by hand."""

from __future__ import annotations

import pytest

from colocation.apimachinery.selectors import LabelSelector
from colocation.custommetrics.sample_batches import IncomingSeries, ValidatedBatch
from colocation.custommetrics.series_store import NODES, PODS, SeriesKey, SeriesStore
from colocation.custommetrics.suffix_aggregations import nearest_rank, parse_metric_name, reduce
from tests.clock import FakeClock


def pod_series(pod: str, samples: list[tuple[float, float]], metric: str = "rps", namespace: str = "ns",
               **labels: str) -> IncomingSeries:
    return IncomingSeries(metric=metric, labels=tuple(sorted(labels.items())), namespace=namespace, pod=pod,
                          timestamps=tuple(t for t, _ in samples), values=tuple(v for _, v in samples))


def ingest(store: SeriesStore, *series: IncomingSeries, node: str = "node-1") -> dict[str, int]:
    result = store.ingest(ValidatedBatch(node, series))
    return {"accepted": result.accepted, "new": result.new_series, **result.dropped}


def values(store: SeriesStore, pod: str, metric: str = "rps") -> list[float]:
    """What a read sees: the samples within the retention."""
    return [v for series in store.series_of(metric, PODS, "ns",
                                            name=pod) for v in series.window(store.oldest_kept())[1]]


def test_samples_are_kept_for_the_retention_then_collected_with_their_series() -> None:
    clock = FakeClock(10_000.0)
    store = SeriesStore(clock, retention_seconds=60)
    assert ingest(store, pod_series("a", [(9_950.0, 1.0), (9_990.0, 2.0)]),
                  pod_series("b", [(9_945.0, 5.0)])) == {"accepted": 3, "new": 2}
    clock.now = 10_020.0  # a's first sample and b's only one are older than 60 s
    assert values(store, "a") == [2.0]  # reads cut at the retention even before a sweep
    assert store.series_of("rps", PODS, "ns", name="b") == []
    assert store.collect_garbage() == 1  # b is gone, with its index entries
    assert len(store) == 1 and list(store.object_names("rps", PODS, "ns")) == ["a"]
    assert list(next(iter(store)).timestamps) == [9_990.0]
    clock.now = 10_100.0
    assert store.collect_garbage() == 1 and len(store) == 0 and store.metrics() == set()


def test_old_future_and_out_of_order_samples_are_dropped_and_counted() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=60, future_tolerance_seconds=30)
    ingest(store, pod_series("a", [(9_990.0, 1.0)]))
    counts = ingest(store, pod_series("a", [(9_900.0, 9.0), (9_980.0, 9.0), (9_990.0, 1.5), (10_031.0, 9.0),
                                            (9_995.0, 2.0)]))
    assert counts == {"accepted": 2, "new": 0, "too-old": 1, "out-of-order": 1, "future": 1}
    assert values(store, "a") == [1.5, 2.0]  # the same timestamp replaced the value


def test_a_batch_sent_again_is_stored_once_and_kept_whole_for_the_other_replicas() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=60)
    batch = ValidatedBatch("node-1", (pod_series("a", [(9_980.0, 1.0), (9_985.0, 2.0), (9_990.0, 3.0)]),))
    store.ingest(batch)
    again = store.ingest(batch)  # its answer was lost, or the samples' stream refused it
    assert (again.accepted, dict(again.dropped)) == (3, {})
    assert [list(kept.timestamps) for kept in again.kept] == [[9_980.0, 9_985.0, 9_990.0]]
    assert values(store, "a") == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("skew", [-3600.0, 3600.0, 10 * 365 * 86400.0])
def test_an_agent_clock_off_by_any_amount_has_its_samples_moved_onto_ours(skew: float) -> None:
    """With sentTime, a batch's times are put on our clock by the difference: nothing is dropped
    as too old or in the future, and the next batch is not held back as out of order."""
    clock = FakeClock(10_000.0)
    store = SeriesStore(clock, retention_seconds=60, future_tolerance_seconds=30)
    for second in (0.0, 5.0):
        clock.now = 10_000.0 + second
        agent_now = clock.now + skew
        series = pod_series("a", [(agent_now - 5, second), (agent_now, second + 1)])
        result = store.ingest(ValidatedBatch("node-1", (series,), sent_at=agent_now + 0.2))  # sent 0.2 s later
        assert (result.accepted, dict(result.dropped)) == (2, {})  # 9_999.8 again replaces the value
    [kept] = store.series_of("rps", PODS, "ns", name="a")
    assert list(kept.timestamps) == pytest.approx([9_994.8, 9_999.8, 10_004.8])


def test_an_agent_clock_within_the_tolerance_keeps_its_sample_times() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=60)
    store.ingest(ValidatedBatch("node-1", (pod_series("a", [(9_999.0, 1.0)]),), sent_at=9_999.5))
    [kept] = store.series_of("rps", PODS, "ns", name="a")
    assert list(kept.timestamps) == [9_999.0]


def test_a_series_with_nothing_kept_is_not_created() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=60)
    assert ingest(store, pod_series("a", [(1.0, 1.0)])) == {"accepted": 0, "new": 0, "too-old": 1}
    assert len(store) == 0 and store.metrics() == set()


def test_bounds_on_series_and_samples_per_series() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=600, max_series=2, max_samples_per_series=3)
    counts = ingest(store, pod_series("a", [(9_990.0 + i, float(i)) for i in range(5)]),
                    pod_series("b", [(9_990.0, 1.0)]), pod_series("c", [(9_990.0, 1.0), (9_991.0, 2.0)]))
    assert counts == {"accepted": 6, "new": 2, "series-limit": 2}
    assert values(store, "a") == [2.0, 3.0, 4.0]  # the oldest made room
    assert ingest(store, pod_series("b", [(9_995.0, 3.0)])) == {"accepted": 1, "new": 0}  # existing ones go on


def test_node_series_and_the_metric_label_index() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=600)
    ingest(store, pod_series("a", [(9_990.0, 1.0)], method="GET", code="200"),
           pod_series("a", [(9_990.0, 2.0)], method="POST", code="200"),
           pod_series("b", [(9_990.0, 3.0)], method="GET", code="500"),
           pod_series("c", [(9_990.0, 4.0)], namespace="other", method="GET"),
           IncomingSeries(metric="temp", labels=(), namespace="", pod="", timestamps=(9_990.0,), values=(60.0,)))
    assert store.metrics() == {(PODS, "rps"), (NODES, "temp")}
    assert [s.key for s in store.series_of("temp", NODES, "", name="node-1")] == [
        SeriesKey(metric="temp", resource=NODES, namespace="", name="node-1", labels=())]

    def selected(text: str) -> list[tuple[str, float]]:
        series = store.series_in("rps", PODS, "ns", metric_selector=LabelSelector.parse(text) if text else None)
        return sorted((s.key.name, s.values[-1]) for s in series)

    assert selected("") == [("a", 1.0), ("a", 2.0), ("b", 3.0)]
    assert selected("method=GET") == [("a", 1.0), ("b", 3.0)]  # not the other namespace's
    assert selected("method in (GET,POST),code=200") == [("a", 1.0), ("a", 2.0)]
    assert selected("method=GET,code!=200") == [("b", 3.0)]
    assert selected("!method") == []
    assert selected("method=PUT") == []


def test_the_record_of_builtin_history_respects_retention_and_bounds() -> None:
    store = SeriesStore(FakeClock(10_000.0), retention_seconds=60, max_series=1)
    key = SeriesKey(metric="cpu_usage", resource=PODS, namespace="ns", name="a", labels=())
    assert store.record(key, 9_990.0, 0.5) and store.record(key, 9_990.0, 0.6)  # a repeat replaces
    assert not store.record(key, 9_000.0, 1.0)  # too old
    assert not store.record(SeriesKey(metric="cpu_usage", resource=PODS, namespace="ns", name="b", labels=()), 9_990.0,
                            1.0)  # over the bound
    assert [list(s.values) for s in store] == [[0.6]]


# ---- aggregations ------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "base", "aggregation"), [
    ("rps", "rps", ""), ("rps_agg_avg", "rps", "avg"), ("rps_agg_p95", "rps", "p95"),
    ("rps_agg_latest", "rps", "latest"), ("rps_agg_p50", "rps_agg_p50", ""), ("_agg_max", "_agg_max", ""),
])
def test_suffixes_name_the_stored_metric_and_the_aggregation(name: str, base: str, aggregation: str) -> None:
    parsed = parse_metric_name(name)
    assert (parsed.name, parsed.base, parsed.aggregation) == (name, base, aggregation)


def test_aggregations_by_hand() -> None:
    samples = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0]  # oldest first
    assert reduce(samples, "") == 10.0 and reduce(samples, "latest") == 10.0
    assert reduce(samples, "avg") == 5.5
    assert (reduce(samples, "min"), reduce(samples, "max")) == (1.0, 10.0)
    # Nearest rank: p90 of 10 values is the 9th smallest, p95 and p99 the 10th.
    assert (reduce(samples, "p90"), reduce(samples, "p95"), reduce(samples, "p99")) == (9.0, 10.0, 10.0)
    assert nearest_rank([3.0], 99) == 3.0
    assert nearest_rank([float(i) for i in range(1, 101)], 90) == 90.0
    with pytest.raises(ValueError):
        reduce([], "avg")
