"""The report path's stages timed in one process, and the before/after tables computed from kept figures."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from benchmarks import ingest_history, ingest_profile, ingest_stages
from benchmarks.ingest_figures import PhaseFigures, SizeReport
from benchmarks.stats import Latency


def test_every_stage_is_timed_each_repeat_and_kept_with_its_label(tmp_path: Path) -> None:
    results = tmp_path / "stages.json"
    results.write_text(json.dumps({"before": {"label": "before", "date": "2026-11-25 18:20 UTC", "commit": "440a805",
                                              "python": "3.11.7", "nodes": 4, "pods": 30, "repeats": 5,
                                              "load_average": "n/a", "stages": {}}}))
    record = ingest_stages.run(nodes=4, pods=30, repeats=5, label="after", results=results, commit="abc1234")

    stages = record.stages
    assert list(stages) == ["parse and validate", "authentication (cache hit)",
                            "authorization (cache hit) and node rule", "store: put and event, no watcher",
                            "store: put and event, 2 watchers", "request metrics",
                            "whole: middleware and report handler"]
    for figures in stages.values():
        samples = figures.samples_us
        assert len(samples) == 5 and all(sample > 0 for sample in samples)
        assert figures.min <= figures.median <= figures.p90 <= figures.max
    kept = json.loads(results.read_text())
    assert set(kept) == {"before", "after"} and kept["after"]["commit"] == "abc1234"


def _size(date: str, cpu_us: float, profile: list[tuple[str, float]]) -> SizeReport:
    phase = PhaseFigures("ingest", 1000, 1.0, 1000.0, Latency(1000, 0.01, 0.02, 0.03), 0, "", cpu_us / 1e6,
                         0.9, 0.5, server_system_cpu_per_report=math.nan)
    return SizeReport(1000, 30, 6000.0, "cmd", date, "machine", ingest=phase, profile=profile)


def test_before_and_after_tables_come_from_the_figures() -> None:
    before = {1000: _size("2026-11-22", 440.0, [("validation", 0.5), ("TLS", 0.2)])}
    after = {1000: _size("2026-11-25", 300.0, [("validation", 0.3), ("TLS", 0.3)])}

    [row] = ingest_history.cpu_rows(before, after)
    assert row[:4] == ["1,000", "440", "300", "-32%"]
    assert row[-2:] == ["met", "0"]  # 300 µs: 3,333/s on one core
    slower = {1000: dataclasses.replace(after[1000], ingest=dataclasses.replace(
        after[1000].ingest, server_cpu_per_report=400e-6))}  # type: ignore[type-var]
    assert ingest_history.cpu_rows(before, slower)[0][-2:] == ["**missed**", "67"]
    assert ingest_history.profile_rows(before[1000], after[1000]) == [
        ["validation", "50.0%", "220", "30.0%", "90"], ["TLS", "20.0%", "88", "30.0%", "90"]]
    # A size not run again since (the same run on both sides) is not compared.
    assert ingest_history.cpu_rows(before, before) == []


def test_the_common_shape_validator_counts_as_pydantic_core() -> None:
    raw = "main;_report;validate_report (colocation/nodemetrics/report_schema.py:250);" \
          "_parsed (colocation/nodemetrics/report_schema.py:205) 4\n"
    _, activities, _ = ingest_profile.summarize(raw)
    assert dict(activities) == {"validation: pydantic-core parse and checks": 1.0}
