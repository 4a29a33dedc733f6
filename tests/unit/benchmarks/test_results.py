"""Every committed benchmark file loads with its pydantic model and saves again field for field."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator
from pathlib import Path

import orjson
import pytest

from benchmarks.agent_cost import CostReport
from benchmarks.connection_memory import ConnectionReport
from benchmarks.cp_kube import KubeCostReport
from benchmarks.ingest_figures import SizeReports, StageRuns
from benchmarks.jetstream_costs import JetStreamCosts
from benchmarks.leader_scale import ScaleReport
from benchmarks.metrics_server import RawSamples
from benchmarks.nats_ingest import NatsIngestReport
from benchmarks.operator_failover import FailoverReport
from benchmarks.outage_recovery_report import OutageReport
from benchmarks.results import SavedFile
from benchmarks.scheduler_extender import SchedulerExtenderSamples

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
MODELS: dict[str, type[SavedFile]] = {
    "plots/agent_cost.json": CostReport,
    "plots/connection_memory.json": ConnectionReport,
    "plots/control_plane_kube.json": KubeCostReport,
    "plots/control_plane_kube_500.json": KubeCostReport,
    "plots/failover_kills.json": FailoverReport,
    "plots/leader_scale.json": ScaleReport,
    "plots/metrics_server.json": RawSamples,
    "plots/outage_recovery.json": OutageReport,
    "plots/outage_recovery_500.json": OutageReport,
    "plots/scheduler_extender.json": SchedulerExtenderSamples,
    "plots/jetstream_costs.json": JetStreamCosts,
    "plots/nats_ingest.json": NatsIngestReport,
    "ingest_before.json": SizeReports,
    "ingest_results.json": SizeReports,
    "ingest_stages.json": StageRuns,
}
# Fields added since a file was written: it loads with their defaults, so they are only in the model.
ADDED_SINCE = {"ingest_before.json": {"load_average", "server_system_cpu_per_report"}}


def saved_files() -> set[str]:
    files = (*BENCHMARKS.glob("*.json"), *BENCHMARKS.glob("plots/*.json"))
    return {str(path.relative_to(BENCHMARKS)) for path in files}


def _not_measured(value: object) -> bool:
    """NaN, written as NaN by json.dumps in older files and as null since."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def differences(saved: object, again: object, where: str = "", *, added: Collection[str] = ()) -> Iterator[str]:
    """Where two JSON documents differ, field by field (an int and the equal float do not, nor a NaN and
    a null); a key in `added` may be in the model alone."""
    if isinstance(saved, dict) and isinstance(again, dict):
        for key in saved.keys() | again.keys():
            if key not in saved and key in added:
                continue
            if key not in again or key not in saved:
                yield f"{where}/{key}: only in the {'saved file' if key in saved else 'model'}"
            else:
                yield from differences(saved[key], again[key], f"{where}/{key}", added=added)
    elif isinstance(saved, list) and isinstance(again, list):
        if len(saved) != len(again):
            yield f"{where}: {len(saved)} items saved, {len(again)} from the model"
        for index, (one, other) in enumerate(zip(saved, again, strict=False)):
            yield from differences(one, other, f"{where}/{index}", added=added)
    elif saved != again and not (_not_measured(saved) and _not_measured(again)):
        yield f"{where}: {saved!r} saved, {again!r} from the model"


def test_every_saved_file_has_a_model() -> None:
    assert saved_files() == MODELS.keys()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_saved_file_loads_and_saves_again_field_for_field(name: str, tmp_path: Path) -> None:
    model = MODELS[name]
    loaded = model.from_file(BENCHMARKS / name)
    saved = json.loads((BENCHMARKS / name).read_text())  # the standard library's parser takes NaN too
    assert list(differences(saved, loaded.document(), added=ADDED_SINCE.get(name, ()))) == []
    loaded.to_file(tmp_path / "again.json")
    assert model.from_file(tmp_path / "again.json") == loaded


def test_a_key_no_model_field_holds_fails_the_load(tmp_path: Path) -> None:
    saved = orjson.loads((BENCHMARKS / "plots/connection_memory.json").read_bytes())
    (tmp_path / "unknown.json").write_bytes(orjson.dumps({**saved, "unknownFigure": 1}))
    with pytest.raises(ValueError, match="unknownFigure"):
        ConnectionReport.from_file(tmp_path / "unknown.json")
