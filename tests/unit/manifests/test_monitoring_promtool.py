"""The PrometheusRule's alerts, run by promtool (hack/prometheus/build.sh builds it).

Its rule groups pass `promtool check rules`, and the unit tests under promtool/ pass `promtool test
rules`: each alert fires on the series that should fire it, stays silent on healthy ones, and
waits its `for:`. The tests here also hold those files to that: every alert has such cases, and
their series are metrics the code exports.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks import prometheus
from colocation.kube import permissions
from tests.unit.manifests.test_monitoring import COMPONENT, EXTERNAL_METRICS, exported_samples

CASES = Path(__file__).parent / "promtool"
RULE_FILE = "colocation-rules.yaml"  # the name the cases' rule_files give
PROMTOOL_TIMEOUT_SECONDS = 60
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())["spec"]["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def write_rule_file(directory: Path) -> Path:
    """The PrometheusRule's spec.groups as a Prometheus rule file, as the Prometheus Operator hands it over."""
    path = directory / RULE_FILE
    path.write_text(yaml.safe_dump({"groups": rule_groups()}))
    return path


def cases() -> dict[str, dict[str, Any]]:
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted(CASES.glob("*.yaml"))}


def promtool(binary: str, directory: Path, *args: str) -> str:
    result = subprocess.run([binary, *args], cwd=directory, capture_output=True, text=True,
                            timeout=PROMTOOL_TIMEOUT_SECONDS, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)} failed ({result.returncode}):\n" \
                                   f"{result.stdout}\n{result.stderr}"
    return result.stdout


def seconds(duration: str) -> int:
    """A promtool test file's duration (30s, 12m, 1h) in seconds."""
    return int(duration[:-1]) * _SECONDS[duration[-1]]


def test_promtool_accepts_the_rule_groups(prometheus_binaries: prometheus.Binaries, tmp_path: Path) -> None:
    write_rule_file(tmp_path)
    out = promtool(prometheus_binaries.promtool, tmp_path, "check", "rules", "--lint=all", "--lint-fatal", RULE_FILE)
    assert f"SUCCESS: {len(rules())} rules found" in out


@pytest.mark.parametrize("case", sorted(cases()))
def test_the_alerts_pass_their_promtool_unit_tests(prometheus_binaries: prometheus.Binaries, tmp_path: Path,
                                                    case: str) -> None:
    write_rule_file(tmp_path)
    shutil.copy(CASES / case, tmp_path / case)
    assert "SUCCESS" in promtool(prometheus_binaries.promtool, tmp_path, "test", "rules", case)


def test_every_alert_is_tested_firing_silent_and_waiting_its_for() -> None:
    """For each alert, a test where it never fires (healthy series), and one where it is expected
    silent one evaluation before it fires: promtool then pins its `for:` from both sides."""
    fires_after_waiting: set[str] = set()
    stays_silent: set[str] = set()
    for name, case in cases().items():
        assert case["rule_files"] == [RULE_FILE], name
        step = seconds(case.get("evaluation_interval", "1m"))
        for test in case["tests"]:
            evals: dict[str, dict[int, bool]] = {}  # alert -> {eval time: fires}
            for expectation in test["alert_rule_test"]:
                evals.setdefault(expectation["alertname"], {})[seconds(expectation["eval_time"])] = \
                    bool(expectation["exp_alerts"])
            for alert, fires in evals.items():
                if not any(fires.values()):
                    stays_silent.add(alert)
                if any(fired and fires.get(t - step) is False for t, fired in fires.items()):
                    fires_after_waiting.add(alert)
    alerts = {rule["alert"] for rule in rules()}
    assert alerts - fires_after_waiting == set(), "alerts with no test of their `for:`"
    assert alerts - stays_silent == set(), "alerts with no test on healthy series"


def test_the_tests_feed_only_metrics_the_code_exports() -> None:
    """An alert whose expression names a metric nobody exports could not fire in its test: the series
    the tests feed are the code's (or kube-apiserver's)."""
    known = exported_samples() | EXTERNAL_METRICS.keys()
    for name, case in cases().items():
        for test in case["tests"]:
            for series in test["input_series"]:
                metric = series["series"].split("{", 1)[0]
                assert metric in known, f"{name}: {metric}"


def test_the_apiservice_alert_fires_for_every_apiservice_we_serve() -> None:
    fired = {alert["exp_labels"]["name"] for case in cases().values() for test in case["tests"]
             for expectation in test["alert_rule_test"] if expectation["alertname"] == "ColocationAPIServiceUnavailable"
             for alert in expectation["exp_alerts"]}
    assert fired == set(permissions.OPERATOR_APISERVICES)
