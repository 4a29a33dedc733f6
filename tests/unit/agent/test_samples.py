"""Custom metric samples on their way to the leader: bounds, batches, retries, simulated series.

The leader and kube-apiserver are fakes (as in test_agent_report); the clock is the tests' fake
clock, moved by the test. Expectations: one MetricSampleBatch per round with every sample not yet accepted; a failed
batch keeps its samples, bounded, and is retried with backoff; a refused one is dropped; a new
leader gets what is held at once.
"""

from __future__ import annotations

import math
import random
from typing import Any

import orjson
import pytest

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.delivery import Delivery
from colocation.agent.leader_locator import Leader, LeaderLocator
from colocation.agent.node_pods import NodePods
from colocation.agent.samples import (
    CustomMetrics,
    MetricSample,
    SampleBuffer,
    SampleSender,
    SendOptions,
    SeriesKey,
    batch_bodies,
)
from colocation.agent.simulated import synthetic_source
from colocation.agent.synthetic import SyntheticCollector
from colocation.kube.backoff import Backoff
from tests.clock import FakeClock
from tests.unit.agent.test_report import FakeKube, lease

SAMPLES_PATH = "/apis/metrics.colocation.dev/v1alpha1/nodemetrics/node-a/samples"
GET = SeriesKey("http_requests_per_second", (("method", "GET"),), ("shop", "web-1"))
NODE_SERIES = SeriesKey("node_temperature_celsius")


def dropped(metrics: AgentMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("colocation_agent_custom_metric_samples_dropped_total",
                                             {"reason": reason}) or 0.0


# ---- the buffer -------------------------------------------------------------------------------------------

def test_the_buffer_keeps_the_newest_samples_of_each_series_and_counts_the_rest() -> None:
    drops: dict[str, int] = {}
    buffer = SampleBuffer(max_samples_per_series=3, max_series=2,
                          dropped=lambda reason, count: drops.__setitem__(reason, drops.get(reason, 0) + count))
    for second in range(5):
        assert buffer.add(MetricSample(GET, 1000.0 + second, float(second)))
    assert not buffer.add(MetricSample(GET, 1006.0, math.nan))
    assert not buffer.add(MetricSample(SeriesKey("bad-name"), 1006.0, 1.0))
    assert not buffer.add(MetricSample(SeriesKey("m", (("1x", "v"),)), 1006.0, 1.0))
    assert buffer.add(MetricSample(NODE_SERIES, 1006.0, 41.5))
    assert not buffer.add(MetricSample(SeriesKey("third_series"), 1006.0, 1.0))
    held = buffer.take()
    assert list(held[GET]) == [(1002.0, 2.0), (1003.0, 3.0), (1004.0, 4.0)]
    assert drops == {"buffer-full": 2, "non-finite": 1, "invalid": 2, "node-series-limit": 1}
    assert len(buffer) == 0


def test_samples_given_back_go_ahead_of_newer_ones_within_the_bounds() -> None:
    buffer = SampleBuffer(max_samples_per_series=4)
    for second in range(3):
        buffer.add(MetricSample(GET, 1000.0 + second, float(second)))
    unsent = buffer.take()
    buffer.add(MetricSample(GET, 1003.0, 3.0))
    buffer.add(MetricSample(GET, 1004.0, 4.0))
    buffer.put_back(unsent)
    assert [timestamp for timestamp, _ in buffer.take()[GET]] == [1001.0, 1002.0, 1003.0, 1004.0]


# ---- batch bodies -----------------------------------------------------------------------------------------

def test_a_batch_is_the_contract_s_metric_sample_batch() -> None:
    [(body, keys)] = batch_bodies("node-a", {GET: [(1000.5, 12.5), (1005.5, 13.0)], NODE_SERIES: [(1005.5, 41.5)]},
                                   sent_at=1006.0)
    assert keys == [GET, NODE_SERIES]
    assert orjson.loads(body) == {
        "apiVersion": "metrics.colocation.dev/v1alpha1", "kind": "MetricSampleBatch", "node": "node-a",
        "sentTime": 1006.0, "series": [
            {"metric": "http_requests_per_second", "labels": {"method": "GET"},
             "pod": {"namespace": "shop", "name": "web-1"},
             "samples": [{"timestamp": 1000.5, "value": 12.5}, {"timestamp": 1005.5, "value": 13.0}]},
            {"metric": "node_temperature_celsius", "labels": {}, "samples": [{"timestamp": 1005.5, "value": 41.5}]},
        ]}


def test_batches_are_split_below_the_size_and_series_limits() -> None:
    held = {SeriesKey("requests_total", (("path", f"/{i:04}" + "x" * 200),), ("shop", "web-1")): [(1000.0, 1.0)]
            for i in range(100)}
    bodies = batch_bodies("node-a", held, sent_at=1006.0, max_bytes=4096, max_series=1000)
    assert len(bodies) > 1 and all(len(body) <= 4096 for body, _ in bodies)
    assert [key for _, keys in bodies for key in keys] == list(held)  # every series once, in order
    assert sum(len(orjson.loads(body)["series"]) for body, _ in bodies) == 100
    assert [len(keys) for _, keys in batch_bodies("node-a", held, sent_at=1006.0, max_series=30)] == [30, 30, 30, 10]


# ---- the sender -------------------------------------------------------------------------------------------

class FakeLeaders:
    """The replicas' endpoints: status per endpoint (0: refuses connections)."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def put(self, leader: Leader, path: str, body: bytes, timeout: float) -> tuple[int, Any]:
        assert path == SAMPLES_PATH and timeout == 5.0
        status = self.status.get(leader.endpoint, 200)
        if status == 0:
            raise ConnectionRefusedError("refused")
        if 200 <= status < 300:
            self.sent.append((leader.identity, orjson.loads(body)))
        return status, {"kind": "Status", "code": status}


class Setup:
    def __init__(self) -> None:
        self.clock = FakeClock(1000.0)
        self.kube = FakeKube(SAMPLES_PATH)
        self.leaders = FakeLeaders()
        self.metrics = AgentMetrics()
        self.locator = LeaderLocator(self.kube, poll_interval=10.0, min_refresh_gap=0.0, clock=self.clock)
        self.buffer = SampleBuffer(max_samples_per_series=6, dropped=lambda reason, count: self.metrics
                                   .custom_samples_dropped.labels(reason).inc(count))
        delivery = Delivery(self.kube, self.locator, self.leaders.put, timeout=5.0, clock=self.clock,
                            apiserver_backoff=Backoff(1.0, 30.0, jitter=0.5, rng=random.Random(3)))
        self.sender = SampleSender("node-a", delivery, self.buffer, options=SendOptions(interval=5.0),
                                   metrics=self.metrics, clock=self.clock, rng=random.Random(3))

    def scrape(self, value: float) -> None:
        """One round: a sample of GET at the current time, then the nudge a round ends with."""
        self.buffer.add(MetricSample(GET, self.clock.now, value))
        self.sender.nudge()

    def values_sent(self) -> list[float]:
        return [sample["value"] for _, batch in self.leaders.sent for series in batch["series"]
                for sample in series["samples"]]

    def counter(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def setup() -> Setup:
    return Setup()


async def test_each_round_s_samples_go_to_the_leader_once(setup: Setup) -> None:
    setup.scrape(10.0)
    await setup.sender.check()
    setup.clock.advance(5)
    setup.scrape(11.0)
    await setup.sender.check()
    assert [identity for identity, _ in setup.leaders.sent] == ["op-0_a", "op-0_a"]
    assert setup.values_sent() == [10.0, 11.0]
    await setup.sender.check()  # nothing new held: nothing sent
    assert len(setup.leaders.sent) == 2
    assert setup.counter("colocation_agent_custom_metric_samples_sent_total") == 2
    assert setup.counter("colocation_agent_sample_batches_sent_total", route="leader") == 2
    assert setup.counter("colocation_agent_sample_batch_duration_seconds_count") == 2


async def test_failed_batches_are_retried_with_backoff_and_keep_a_bounded_backlog(setup: Setup) -> None:
    setup.leaders.status["https://10.0.0.1:8443"] = 0
    setup.kube.report_status = 503  # no ready replica behind the aggregation layer either
    delays = []
    for round_ in range(8):
        setup.scrape(float(round_))
        delays.append(await setup.sender.check())
        setup.clock.advance(5)
    # Nominal 1, 2, 4, 8, 16, 30, 30, 30 s with up to 50 % jitter taken off.
    for delay, nominal in zip(delays, (1, 2, 4, 8, 16, 30, 30, 30), strict=True):
        assert nominal / 2 <= delay <= nominal
    assert setup.counter("colocation_agent_sample_batches_failed_total", reason="replica-unreachable") == 8
    # kube-apiserver is asked once per backoff of its own (1, 2, 4, ... s): not every round.
    assert 3 <= setup.counter("colocation_agent_sample_batches_failed_total", reason="unavailable") \
        == setup.kube.calls.count(("PUT", SAMPLES_PATH)) < 8
    # Within the backoff a round's nudge does not trigger a send; when it ran out, one does.
    setup.sender._wake.clear()
    setup.scrape(8.0)
    assert not setup.sender._wake.is_set()
    setup.clock.advance(30)
    setup.scrape(9.0)
    assert setup.sender._wake.is_set()
    setup.leaders.status.clear()
    await setup.sender.check()
    # Ten rounds taken, six held at most: the oldest four dropped, the rest sent in order.
    assert setup.values_sent() == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert dropped(setup.metrics, "buffer-full") == 4
    setup.leaders.status["https://10.0.0.1:8443"] = 0
    setup.scrape(10.0)
    assert await setup.sender.check() <= 1.0  # the backoff started over after the success


async def test_a_batch_the_leader_refuses_is_dropped_not_retried(setup: Setup) -> None:
    setup.leaders.status["https://10.0.0.1:8443"] = 422
    setup.scrape(1.0)
    assert await setup.sender.check() == 10.0  # no backoff: nothing is left to retry
    assert len(setup.buffer) == 0 and dropped(setup.metrics, "refused") == 1
    setup.leaders.status.clear()
    setup.scrape(2.0)
    await setup.sender.check()
    assert setup.values_sent() == [2.0]


async def test_a_new_leader_gets_the_samples_held_at_once(setup: Setup) -> None:
    setup.leaders.status["https://10.0.0.1:8443"] = 0
    setup.kube.report_status = 503
    setup.scrape(1.0)
    await setup.sender.check()  # fails: backoff
    setup.sender._wake.clear()
    setup.kube.lease = lease("op-1_b", 2)
    assert await setup.locator.refresh()
    assert setup.sender._wake.is_set()  # backoff or not, the loop sends now
    setup.scrape(2.0)
    await setup.sender.check()
    assert setup.leaders.sent[-1][0] == "op-1_b" and setup.values_sent() == [1.0, 2.0]


async def test_without_a_reachable_leader_batches_go_through_kube_apiserver(setup: Setup) -> None:
    setup.kube.lease = lease("op-0_a", None)  # no published address
    setup.scrape(3.0)
    await setup.sender.check()
    [body] = setup.kube.bodies
    assert orjson.loads(body)["series"][0]["samples"][0]["value"] == 3.0
    assert setup.counter("colocation_agent_sample_batches_sent_total", route="apiserver") == 1


# ---- simulated pods ---------------------------------------------------------------------------------------

def test_simulated_pods_carry_the_scrape_annotations_and_expose_moving_series() -> None:
    collector = SyntheticCollector("sim-node-1", pods_per_node=8, profile="diurnal", seed=1, period_seconds=600)
    pods = collector.pods()
    assert all(p["metadata"]["annotations"]["colocation.dev/scrape"] == "true" for p in pods)
    samples = collector.custom_samples(1000.0)
    assert {s.key.pod for s in samples} == {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
    assert {s.key.metric for s in samples} <= {"http_requests_per_second", "work_queue_depth"}
    assert all(s.timestamp == 1000.0 and s.value >= 0 for s in samples)
    again = SyntheticCollector("sim-node-1", pods_per_node=8, profile="diurnal", seed=1, period_seconds=600)
    assert again.custom_samples(1000.0) == samples  # deterministic
    later = {s.key: s.value for s in collector.custom_samples(1150.0)}
    assert any(later[s.key] != s.value for s in samples)  # a quarter of the period later, they moved


async def test_a_simulated_node_sends_the_series_of_the_annotated_pods_its_watch_shows(setup: Setup) -> None:
    collector = SyntheticCollector("node-a", pods_per_node=6, seed=2)
    pods = NodePods()
    listed = collector.pods()
    listed[0]["metadata"]["annotations"] = {}  # someone removed the annotation from this one
    await pods.on_sync(listed[:5])  # and the sixth pod is not on the node (its name was taken elsewhere)
    custom = CustomMetrics(synthetic_source(collector)(pods), setup.sender, setup.metrics)
    kept = await custom.take_once()
    assert setup.sender._wake.is_set()
    await setup.sender.check()
    [(_, batch)] = setup.leaders.sent
    shown = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in listed[1:5]}
    assert {(s["pod"]["namespace"], s["pod"]["name"]) for s in batch["series"]} == shown
    assert kept == len(batch["series"]) == setup.counter("colocation_agent_custom_metric_samples_scraped_total")
