"""The operator ingest benchmark: its report bodies, its profile summary, and a tiny smoke run's shape."""

from __future__ import annotations

import base64
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from benchmarks import ingest_baseline, ingest_figures, ingest_profile, ingest_report, machine, operator_ingest
from benchmarks.ingest_reports import Reports, ReportTemplate
from benchmarks.markdown import markers
from colocation.apimachinery.tables import metadata_only_accept
from colocation.nodemetrics.report_schema import validate_report


def test_reports_are_valid_distinct_and_about_six_kilobytes_with_30_pods() -> None:
    reports = Reports(["node-a", "node-b"], pods=30)
    first, second = reports.next_body(1), reports.next_body(1)
    stored = validate_report(first, "node-b")
    assert stored.figures.pod_count == 30
    # Every report of a node differs from its previous one: the cpu figure moves by one millicore.
    assert validate_report(second, "node-b").figures.cpu_millis == stored.figures.cpu_millis + 1
    assert 5_000 < len(first) < 8_000
    assert json.loads(reports.next_body(0))["metadata"]["name"] == "node-a"


def test_a_template_puts_the_name_time_and_cpu_where_they_belong() -> None:
    body = ReportTemplate.of(3, pods=2).body(b'"node-x"', 998, b'"2026-11-22T10:00:00Z"')
    obj = json.loads(body)
    assert obj["metadata"]["name"] == "node-x"
    assert obj["status"]["updateTime"] == "2026-11-22T10:00:00Z"
    assert len(obj["status"]["podsMetric"]) == 2
    base = ReportTemplate.of(3, pods=2).cpu_millis
    assert obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == f"{base + 998}m"


def test_profile_samples_count_for_the_first_activity_they_match() -> None:
    raw = ("main;handle;NodeMetricApi._report;validate_report;TypeAdapter.validate_json 6\n"
           "main;handle;DelegatingAuthenticator._review;kube_token_reviewer.<locals>.review;x 3\n"
           "Thread.run;_worker;_WorkItem.run;get_env_proxy_for_url;netrc_from_env 1\n")
    samples, activities, hottest = ingest_profile.summarize(raw)
    assert samples == 10
    assert dict(activities) == {"validation: pydantic-core parse and checks": 0.6,
                                "TokenReview (kubernetes-asyncio call)": 0.3,
                                "proxy and .netrc lookups in threads (aiohttp trust_env)": 0.1}
    assert hottest[0] == ("TypeAdapter.validate_json", 0.6)


def test_the_section_is_replaced_and_other_sections_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    begin, end = markers(ingest_report.SECTION)
    path.write_text(f"# Benchmarks\n\n<!-- other:begin -->\nx\n<!-- other:end -->\n\n{begin}\nold\n"
                    f"{end}\n")
    ingest_report.write(path, "new")
    assert path.read_text() == (f"# Benchmarks\n\n<!-- other:begin -->\nx\n<!-- other:end -->\n\n"
                                f"{begin}\nnew\n{end}\n")


@pytest.mark.timeout(300)
@pytest.mark.timed_pipeline
async def test_a_tiny_run_reports_every_phase(tmp_path: Path) -> None:
    config = operator_ingest.IngestConfig(sizes=(12,), pods_per_node=30, concurrency=4, ingest_seconds=1.0,
                                          read_seconds=1.0, watchers=2, profile="never", state_dir=tmp_path)
    [report] = await operator_ingest.run(config, "python -m benchmarks.operator_ingest --nodes 12",
                                         machine.describe())

    assert report.nodes == 12
    for phase in (report.load, report.ingest, report.baseline, report.read_ingest):
        assert phase is not None and phase.count > 0 and phase.errors == 0, phase
    assert report.load is not None and report.load.count == 12 - 1  # the warm-up's node already reported
    assert report.ingest is not None and report.ingest.server_cpu_per_report > 0
    assert report.memory is not None and report.memory.loaded >= report.memory.empty
    assert [r.name for r in report.reads] == ["list, JSON", "list, Table", "get one"]
    assert [r.name for r in report.baseline_reads] == ["list, JSON", "get one"]
    assert all(r.errors == 0 for r in report.reads + report.baseline_reads)
    assert report.watch is not None and report.watch.watchers == 2
    assert report.watch.received_share == 1.0 and report.watch.complete_watchers == 2
    assert set(report.targets_met()) == {"rate", "share", "memory"}

    # Kept per size between runs, and read back the same.
    results = tmp_path / "results.json"
    ingest_figures.save_all(results, {12: report})
    again = ingest_figures.load_all(results)[12]
    assert again.ingest == report.ingest and again.memory == report.memory and again.watch == report.watch

    plots = ingest_report.plot({12: again}, tmp_path / "plots")
    if importlib.util.find_spec("matplotlib") is not None:  # the `bench` extra
        assert [p.name for p in plots] == ["ingest_throughput.png", "ingest_latency.png", "ingest_memory.png"]
        assert all(p.read_bytes().startswith(b"\x89PNG") for p in plots)
    section = ingest_report.render({12: again}, plots, tmp_path)
    assert section.startswith("## Operator ingest")
    assert "| 12 | `python -m benchmarks.operator_ingest --nodes 12` |" in section
    assert all(f"![{p.stem}](plots/{p.name})" in section for p in plots)
    assert not math.isnan(report.ingest.latency.p99)


def _token(node: str) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return ".".join((part({"alg": "ES256"}), part({"kubernetes.io": {"node": {"name": node, "uid": "u"}}}), "sig"))


async def test_the_bare_server_holds_a_token_to_its_node_and_answers_as_the_operator(tmp_path: Path) -> None:
    kept = ingest_baseline.KeptReports()
    app = web.Application()
    app.router.add_put(ingest_baseline.COLLECTION + "/{name}/status", kept.put)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        body = Reports(["node-a"], pods=2).next_body(0)
        url = ingest_baseline.COLLECTION + "/{}/status"
        headers = {"Authorization": f"Bearer {_token('node-a')}", "Accept": metadata_only_accept()}
        async with client.put(url.format("node-a"), data=body, headers=headers) as answer:
            assert answer.status == 200
            assert (await answer.json())["metadata"]["name"] == "node-a"
        async with client.put(url.format("node-b"), data=body, headers=headers) as answer:
            assert answer.status == 403
        async with client.put(url.format("node-a"), data=body, headers={"Authorization": "Bearer x"}) as answer:
            assert answer.status == 403
        assert list(kept.bodies) == ["node-a"] and len(kept.callers) == 2
    finally:
        await client.close()
