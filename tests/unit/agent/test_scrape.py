"""Scraping annotated pods: what the annotations mean, what the parser keeps, what a scrape counts.

Expositions are parsed by prometheus_client; the tests check what the agent makes of them
(labels, timestamps, non-finite values, histograms, limits). Real scrapes run against a small
aiohttp server on 127.0.0.1 that plays the pod.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from colocation.agent.agent_metrics import AgentMetrics
from colocation.agent.node_pods import NodePods
from colocation.agent.samples import SeriesKey
from colocation.agent.scrape import (
    PodScraper,
    ScrapeError,
    ScrapeOptions,
    ScrapeTarget,
    parse_exposition,
    scrape_target,
)

POD = ("shop", "web-1")
EXPOSITION = """\
# HELP http_requests_total Requests served.
# TYPE http_requests_total counter
http_requests_total{method="GET",code="200"} 1027 1763789000125
http_requests_total{method="POST",code="500"} 3
# TYPE queue_depth gauge
queue_depth 7
queue_lag_seconds NaN
temperature_celsius +Inf
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.1"} 4
latency_seconds_bucket{le="+Inf"} 5
latency_seconds_sum 0.75
latency_seconds_count 5
"""


def pod(annotations: dict[str, str] | None, *, ip: str = "10.1.2.3", phase: str = "Running",
        name: str = "web-1") -> dict[str, Any]:
    return {"metadata": {"namespace": "shop", "name": name, "uid": f"uid-{name}", "annotations": annotations or {}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "web"}]},
            "status": {"phase": phase, "podIP": ip}}


# ---- parsing ----------------------------------------------------------------------------------------------

def test_samples_keep_their_names_labels_and_timestamps() -> None:
    parsed = parse_exposition(EXPOSITION, POD, scraped_at=1763789005.0, max_series=100)
    samples = {(s.key.metric, s.key.labels): (s.timestamp, s.value) for s in parsed.samples}
    assert samples[("http_requests_total", (("code", "200"), ("method", "GET")))] == (1763789000.125, 1027)
    assert samples[("http_requests_total", (("code", "500"), ("method", "POST")))] == (1763789005.0, 3)
    assert samples[("queue_depth", ())] == (1763789005.0, 7)
    # A histogram is its series: buckets with `le`, the sum and the count.
    assert samples[("latency_seconds_bucket", (("le", "0.1"),))][1] == 4
    assert samples[("latency_seconds_bucket", (("le", "+Inf"),))][1] == 5
    assert samples[("latency_seconds_sum", ())][1] == 0.75 and samples[("latency_seconds_count", ())][1] == 5
    assert all(s.key.pod == POD for s in parsed.samples)
    assert len(parsed.samples) == 7
    assert parsed.dropped == {"non-finite": 2}  # NaN and +Inf


def test_a_pod_keeps_at_most_its_series_limit_in_exposition_order() -> None:
    text = "".join(f'requests_total{{path="/p{i}"}} {i}\n' for i in range(10))
    parsed = parse_exposition(text, POD, scraped_at=1.0, max_series=4)
    assert [s.key.labels for s in parsed.samples] == [(("path", f"/p{i}"),) for i in range(4)]
    assert parsed.dropped["series-limit"] == 6


def test_a_sample_whose_own_timestamp_did_not_move_is_taken_once() -> None:
    first = parse_exposition("a 1 1000\nb 2\n", POD, scraped_at=10.0, max_series=10)
    again = parse_exposition("a 1 1000\nb 2\n", POD, scraped_at=15.0, max_series=10, stamped_before=first.stamped)
    assert [(s.key.metric, s.timestamp) for s in again.samples] == [("b", 15.0)]
    assert again.dropped["repeated"] == 1
    moved = parse_exposition("a 5 2000\n", POD, scraped_at=20.0, max_series=10, stamped_before=again.stamped)
    assert [(s.key.metric, s.timestamp, s.value) for s in moved.samples] == [("a", 2.0, 5.0)]


@pytest.mark.parametrize("text", ["requests_total{method=\"GET\" 12\n", "requests_total twelve\n",
                                  "<html><body>Not found</body></html>\n"])
def test_text_that_is_not_an_exposition_is_a_clear_error(text: str) -> None:
    with pytest.raises(ScrapeError) as raised:
        parse_exposition(text, POD, scraped_at=1.0, max_series=10)
    assert raised.value.result == "bad-exposition" and "not Prometheus text format" in str(raised.value)


# ---- annotations ------------------------------------------------------------------------------------------

def test_the_annotations_say_where_to_scrape() -> None:
    target = scrape_target(pod({"colocation.dev/scrape": "true", "colocation.dev/port": "9102"}))
    assert target == ScrapeTarget(namespace="shop", name="web-1", pod_ip="10.1.2.3", port=9102, path="/metrics",
                                  scheme="http")
    assert target.url == "http://10.1.2.3:9102/metrics"
    custom = scrape_target(pod({"colocation.dev/scrape": "true", "colocation.dev/port": "8443",
                                "colocation.dev/path": "/custom/metrics", "colocation.dev/scheme": "https"},
                               ip="fd00::7"))
    assert custom is not None and custom.url == "https://[fd00::7]:8443/custom/metrics"
    assert scrape_target(pod(None)) is None
    assert scrape_target(pod({"colocation.dev/scrape": "false", "colocation.dev/port": "9102"})) is None


@pytest.mark.parametrize(("annotations", "problem"), [
    ({}, "colocation.dev/port is missing"),
    ({"colocation.dev/port": "http-metrics"}, "colocation.dev/port='http-metrics' is not a port number"),
    ({"colocation.dev/port": "0"}, "not a port number"),
    ({"colocation.dev/port": "70000"}, "not a port number"),
    ({"colocation.dev/port": "9102", "colocation.dev/scheme": "ftp"}, "neither http nor https"),
    ({"colocation.dev/port": "9102", "colocation.dev/path": "metrics"}, "does not start with /"),
])
def test_wrong_annotations_name_the_problem(annotations: dict[str, str], problem: str) -> None:
    target = scrape_target(pod({"colocation.dev/scrape": "true", **annotations}))
    assert target is not None and problem in target.problem


async def test_the_pod_directory_follows_annotated_running_pods() -> None:
    pods = NodePods()
    annotated = {"colocation.dev/scrape": "true", "colocation.dev/port": "9102"}
    await pods.on_sync([pod(annotated), pod(None, name="plain")])
    assert list(pods.scrape_targets) == [POD]
    await pods.on_event("MODIFIED", pod(annotated, phase="Succeeded"))
    assert pods.scrape_targets == {}
    await pods.on_event("MODIFIED", pod(annotated, ip="10.9.9.9"))
    assert pods.scrape_targets[POD].pod_ip == "10.9.9.9"
    await pods.on_event("DELETED", pod(annotated))
    assert pods.scrape_targets == {}


# ---- scraping a served endpoint ---------------------------------------------------------------------------

class Served:
    def __init__(self) -> None:
        self.body = EXPOSITION
        self.status = 200
        self.delay = 0.0
        self.accept = ""


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[Served, int]]:
    import asyncio

    served = Served()

    async def metrics(request: web.Request) -> web.Response:
        served.accept = request.headers.get("Accept", "")
        if served.delay:
            await asyncio.sleep(served.delay)  # a slow pod, longer than the scrape timeout
        return web.Response(status=served.status, text=served.body)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield served, port
    await runner.cleanup()


def result_count(metrics: AgentMetrics, result: str) -> float:
    return metrics.registry.get_sample_value("colocation_agent_scrapes_total", {"result": result}) or 0.0


def dropped(metrics: AgentMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("colocation_agent_custom_metric_samples_dropped_total",
                                             {"reason": reason}) or 0.0


async def test_scrapes_fetch_every_target_and_count_each_result(endpoint: tuple[Served, int],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    served, port = endpoint
    targets = [ScrapeTarget(namespace="shop", name="web-1", pod_ip="127.0.0.1", port=port),
               ScrapeTarget(namespace="shop", name="web-2", pod_ip="127.0.0.1", port=port, path="/missing"),
               ScrapeTarget(namespace="shop", name="web-3", problem="annotation colocation.dev/port is missing"),
               ScrapeTarget(namespace="shop", name="web-4", pod_ip="", port=port)]
    metrics = AgentMetrics()
    async with aiohttp.ClientSession() as session:
        scraper = PodScraper(session, lambda: targets, ScrapeOptions(timeout=1.0), metrics=metrics, node="node-a",
                             wall=lambda: 1763789005.0)
        with caplog.at_level(logging.WARNING, logger="colocation.agent.scrape"):
            samples = await scraper.scrape_all()
            await scraper.scrape_all()
    assert "text/plain" in served.accept
    assert {s.key.pod for s in samples} == {("shop", "web-1")}
    assert SeriesKey("queue_depth", (), ("shop", "web-1")) in {s.key for s in samples}
    assert result_count(metrics, "ok") == 2
    assert result_count(metrics, "http-error") == 2  # 404 from /missing
    assert result_count(metrics, "invalid-annotation") == 2
    assert result_count(metrics, "no-address") == 2
    assert dropped(metrics, "non-finite") == 4
    problems = [r for r in caplog.records if r.getMessage() == "cannot scrape pod"]
    assert len(problems) == 3  # once per pod and problem, not once per round
    assert {getattr(r, "pod", None) for r in problems} == {"shop/web-2", "shop/web-3", "shop/web-4"}


async def test_slow_large_and_garbled_answers_fail_one_scrape_only(endpoint: tuple[Served, int]) -> None:
    served, port = endpoint
    metrics = AgentMetrics()
    target = ScrapeTarget(namespace="shop", name="web-1", pod_ip="127.0.0.1", port=port)
    async with aiohttp.ClientSession() as session:
        scraper = PodScraper(session, lambda: [target], ScrapeOptions(timeout=0.2, max_body_bytes=4096),
                             metrics=metrics)
        served.delay = 1.0
        assert await scraper.scrape_all() == []
        served.delay, served.body = 0.0, "x 1\n" * 2000
        assert await scraper.scrape_all() == []
        served.body = "x{y 1\n"
        assert await scraper.scrape_all() == []
        served.body = "x 1\n"
        assert [s.value for s in await scraper.scrape_all()] == [1.0]
    assert [result_count(metrics, r) for r in ("timeout", "too-large", "bad-exposition", "ok")] == [1, 1, 1, 1]


async def test_an_unreachable_pod_is_counted() -> None:
    metrics = AgentMetrics()
    async with aiohttp.ClientSession() as session:
        # Port 1 on loopback: nothing listens there, the connection is refused at once.
        scraper = PodScraper(session, lambda: [ScrapeTarget(namespace="shop", name="web-1", pod_ip="127.0.0.1",
                                                            port=1)], ScrapeOptions(), metrics=metrics)
        assert await scraper.scrape_all() == []
    assert result_count(metrics, "unreachable") == 1
