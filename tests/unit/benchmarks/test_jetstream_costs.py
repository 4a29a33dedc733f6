"""The JetStream cost benchmark: its verdict comes from the run's own figures, and a tiny run on a real
cluster fills every row (skipped, saying so, where nats-server is not built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import jetstream_costs
from benchmarks.markdown import markers
from colocation_sandbox.launcher.nats_cluster import NatsServerMissing, locate_nats_server


def figures(nats_ingest: float) -> dict[str, list[float]]:
    return {"memory": [30.0], "nats ingest": [nats_ingest], "nats apply": [20.0], "nats-server": [50.0],
            "whole, in-memory store": [300.0], "store stage of the whole": [40.0]}


@pytest.mark.parametrize(("nats_ingest", "ratio"), [(40.0, 1.0), (130.0, 1.3), (160.0, 1.4)])
def test_the_whole_path_on_nats_is_projected_from_the_measured_whole(nats_ingest: float, ratio: float) -> None:
    assert jetstream_costs.projected_ratio(figures(nats_ingest)) == pytest.approx(ratio)


@pytest.mark.timed_pipeline
def test_a_tiny_run_fills_every_row_and_states_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        locate_nats_server(build=False)
    except NatsServerMissing as missing:
        pytest.skip(f"nats-server is not built (make nats): {missing}")
    monkeypatch.setattr(jetstream_costs, "RAW", tmp_path / "plots" / "jetstream_costs.json")
    monkeypatch.setattr(jetstream_costs, "ROOT", tmp_path)
    output = tmp_path / "BENCHMARKS.md"
    result = jetstream_costs.run(20, 5, 2, 8, output, "python -m benchmarks.jetstream_costs --nodes 20")
    assert set(result.samples_us) == {"memory", "nats ingest", "nats apply", "nats-server",
                                      "whole, in-memory store", "store stage of the whole"}
    # The servers' CPU is read in 10 ms ticks: 20 reports may cost them less than one.
    assert all(len(values) == 2 and all(v >= 0 for v in values) for values in result.samples_us.values())
    assert all(v > 0 for name, values in result.samples_us.items() if name != "nats-server" for v in values)
    expected = "met" if jetstream_costs.projected_ratio(result.samples_us) <= 1.3 else "missed"
    assert result.verdict == expected
    section = output.read_text()
    begin, end = markers(jetstream_costs.SECTION)
    assert begin in section and end in section and f"Verdict: **{expected}**" in section
    assert jetstream_costs.JetStreamCosts.from_file(jetstream_costs.RAW) == result
