"""Every committed benchmark file loads with its pydantic model and saves again field for field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from benchmarks.agent_cost import CostReport
from benchmarks.connection_memory import ConnectionReport
from benchmarks.cp_kube import KubeCostReport
from benchmarks.operator_failover import FailoverReport
from benchmarks.results import Record

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
MODELS: dict[str, type[Record]] = {
    "plots/agent_cost.json": CostReport,
    "plots/connection_memory.json": ConnectionReport,
    "plots/control_plane_kube.json": KubeCostReport,
    "plots/control_plane_kube_500.json": KubeCostReport,
    "plots/failover_kills.json": FailoverReport,
}
# Still read and written by hand (their suites' own to_json/from_json or json.dumps): no model yet.
WITHOUT_A_MODEL = {
    "plots/leader_scale.json", "plots/outage_recovery.json",
    "ingest_before.json", "ingest_results.json", "ingest_stages.json",
}


def saved_files() -> set[str]:
    files = (*BENCHMARKS.glob("*.json"), *BENCHMARKS.glob("plots/*.json"))
    return {str(path.relative_to(BENCHMARKS)) for path in files}


def differences(saved: object, again: object, where: str = "") -> Iterator[str]:
    """Where two JSON documents differ, field by field (an int and the equal float do not)."""
    if isinstance(saved, dict) and isinstance(again, dict):
        for key in saved.keys() | again.keys():
            if key not in again or key not in saved:
                yield f"{where}/{key}: only in the {'saved file' if key in saved else 'model'}"
            else:
                yield from differences(saved[key], again[key], f"{where}/{key}")
    elif isinstance(saved, list) and isinstance(again, list):
        if len(saved) != len(again):
            yield f"{where}: {len(saved)} items saved, {len(again)} from the model"
        for index, (one, other) in enumerate(zip(saved, again, strict=False)):
            yield from differences(one, other, f"{where}/{index}")
    elif saved != again:
        yield f"{where}: {saved!r} saved, {again!r} from the model"


def test_every_saved_file_has_a_model_or_is_listed_without_one() -> None:
    assert saved_files() - MODELS.keys() - WITHOUT_A_MODEL == set()
    assert MODELS.keys() <= saved_files()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_saved_file_loads_and_saves_again_field_for_field(name: str, tmp_path: Path) -> None:
    model = MODELS[name]
    loaded = model.from_file(BENCHMARKS / name)
    assert list(differences(orjson.loads((BENCHMARKS / name).read_bytes()), loaded.document())) == []
    loaded.to_file(tmp_path / "again.json")
    assert model.from_file(tmp_path / "again.json") == loaded


def test_a_key_no_model_field_holds_fails_the_load(tmp_path: Path) -> None:
    saved = orjson.loads((BENCHMARKS / "plots/connection_memory.json").read_bytes())
    (tmp_path / "unknown.json").write_bytes(orjson.dumps({**saved, "unknownFigure": 1}))
    with pytest.raises(ValueError, match="unknownFigure"):
        ConnectionReport.from_file(tmp_path / "unknown.json")
