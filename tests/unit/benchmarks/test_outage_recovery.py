"""The outage-recovery suite's figures, verdicts and section, from made-up observations (no sandbox)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmarks import machine, outage_recovery, run
from benchmarks.outage_recovery_report import (
    INCONCLUSIVE,
    MET,
    MISSED,
    Freeze,
    OutageConfig,
    OutageReport,
    batch_restored,
    freeze_problems,
    fresh_after,
    removals,
    render,
    save_raw,
)
from colocation.agent.selfcheck import AgentHealth
from tests.timing import eventually

THAWED, THAW_SECOND = 100.0, 1_700_000_000  # the loop's clock at the thaw, and the whole second before it
WHERE = machine.Machine("Test CPU", 2, 8 << 30, "3.11.7", "6.1", "3.13.0", "abc1234", "2026-01-01 00:00 UTC")


def freeze(component: str = "kube-apiserver", fresh: float = 2.0, batch: float = 0.0, nodes: int = 3,
           **kwargs: object) -> Freeze:
    """A freeze of `nodes` nodes whose last node was fresh `fresh` s after the thaw."""
    return Freeze(component, nodes, seconds=45.2, fresh={f"n{i}": fresh * (i + 1) / nodes for i in range(nodes)},
                  batch={f"n{i}": batch for i in range(nodes)}, leader_before="op-a", leader_after="op-b",
                  resource_version_before=10, resource_version_after=20, **kwargs)  # type: ignore[arg-type]


def test_a_node_is_fresh_at_its_first_report_from_after_the_thaw() -> None:
    reports = [(90.0, THAW_SECOND - 50), (99.0, THAW_SECOND - 40), (103.5, THAW_SECOND - 5), (104.25, THAW_SECOND + 4)]
    # The one sampled during the outage and delivered after it does not count.
    assert fresh_after(reports, THAWED, THAW_SECOND) == pytest.approx(4.25)
    # updateTime has whole seconds: one of the thaw's own second counts (the thaw is just after it).
    assert fresh_after([(100.5, THAW_SECOND)], THAWED, THAW_SECOND) == pytest.approx(0.5)
    assert fresh_after([(99.99, THAW_SECOND)], THAWED, THAW_SECOND) == 0.0
    assert math.isnan(fresh_after(reports[:3], THAWED, THAW_SECOND))
    assert math.isnan(fresh_after([], THAWED, THAW_SECOND))


def test_batch_resources_back_for_good_and_every_removal_counted() -> None:
    never_lost = [(10.0, True)]
    assert batch_restored(never_lost, THAWED, 200.0) == 0.0
    flapping = [(10.0, True), (101.0, False), (103.0, True), (104.0, False), (107.5, True)]
    assert batch_restored(flapping, THAWED, 200.0) == pytest.approx(7.5)
    assert removals(flapping, 50.0, 200.0) == [101.0, 104.0]
    assert removals(flapping, 102.0, 200.0) == [104.0]
    assert math.isnan(batch_restored(flapping[:4], THAWED, 200.0))  # without them at the end
    assert math.isnan(batch_restored([], THAWED, 200.0))
    # Observed after the end: not counted.
    assert batch_restored(flapping, THAWED, 103.5) == pytest.approx(3.0)
    # Back before the thaw (a Node added with none, then given them): from the thaw on, it offers them.
    assert batch_restored([(10.0, False), (20.0, True)], THAWED, 200.0) == 0.0


def test_a_freeze_is_met_within_five_seconds_with_nothing_removed_or_evicted() -> None:
    met = freeze(fresh=4.9, batch=1.0)
    assert met.all_fresh == pytest.approx(4.9)
    assert (met.all_batch, met.verdict, met.misses()) == (1.0, MET, [])
    slow = freeze(fresh=26.0)
    assert slow.verdict == MISSED
    assert slow.misses() == ["every NodeMetric fresh 26.0 s after the thaw"]
    assert freeze(batch=5.5).misses() == ["batch resources on every Node 5.5 s after the thaw"]
    assert freeze(removed=[("n1", 3.0)]).misses() == ["batch resources removed 1 times"]
    assert freeze(evictions=["ColocationEvicting: default/p"], pods_deleted=["default/p"]).misses() == [
        "1 eviction Events", "1 pods deleted"]


def test_a_node_never_fresh_or_missing_misses_the_target() -> None:
    never = freeze()
    never.fresh["n1"] = math.nan
    assert math.isnan(never.all_fresh)
    assert never.misses() == ["every NodeMetric fresh never after the thaw (1 nodes never)"]
    missing = freeze(nodes=3)
    missing.nodes = 4  # a node whose NodeMetric the watch never delivered
    assert math.isnan(missing.all_fresh) and missing.stale == 1 and missing.verdict == MISSED


def test_problems_the_freeze_does_not_explain_make_it_inconclusive() -> None:
    assert freeze(fresh=30.0, agent_problems=["simulated agent: restarted"]).verdict == INCONCLUSIVE
    assert freeze(failure="TimeoutError()").verdict == INCONCLUSIVE
    both = OutageReport(config=OutageConfig(), freezes=[freeze(), freeze("etcd")])
    assert both.verdict == MET
    assert OutageReport(config=OutageConfig(), freezes=[freeze(), freeze("etcd", fresh=9.0)]).verdict == MISSED
    assert OutageReport(config=OutageConfig(),
                        freezes=[freeze(), freeze("etcd", agent_problems=["x"])]).verdict == INCONCLUSIVE
    assert OutageReport(config=OutageConfig(), freezes=[freeze()]).verdict == INCONCLUSIVE  # etcd not measured
    assert OutageReport(config=OutageConfig(), freezes=[]).verdict == INCONCLUSIVE


def health(**kwargs: object) -> AgentHealth:
    defaults: dict[str, object] = {"nodes": 99, "renewals": 100.0, "reports": 1000.0, "informers": 2,
                                   "informers_synced": 2}
    return AgentHealth(**{**defaults, **kwargs})  # type: ignore[arg-type]


def test_what_the_freeze_causes_is_no_problem_but_a_restart_or_a_lagging_loop_is() -> None:
    before = {"simulated": health()}
    # Late heartbeats, their warnings and the informers' failed watches: the outage's own doing.
    caused = {"simulated": health(reports=1500.0, renewals=180.0, late_heartbeats=99.0, informer_failures=4.0,
                                  errors={"colocation.agent.report": 120.0})}
    assert freeze_problems(before, caused, {"simulated": 0.2}) == []
    restarted = {"simulated": health(reports=10.0)}
    assert freeze_problems(before, restarted, {}) == [
        "simulated: the agent process was restarted during the window (its counters went back)"]
    overdue = {"simulated": health(reports=1500.0, heartbeats_overdue=3, oldest_heartbeat_age=31.0)}
    assert freeze_problems(before, overdue, {}) == [
        "simulated: 3 of 99 nodes' heartbeats are overdue at the end (the oldest is 31.0 s old)"]
    unsynced = {"simulated": health(reports=1500.0, informers_synced=1)}
    assert freeze_problems(before, unsynced, {}) == ["simulated: 1 of 2 informers are not synced"]
    assert freeze_problems(before, caused, {"simulated": 1.4}) == [
        "simulated: its event loop lagged 1.4 s (short of CPU: the load client fell behind)"]
    assert freeze_problems(before, {**caused, "new": health()}, {}) == [
        "new: not read before the window (restarted?)"]


def test_the_section_shows_each_freeze_and_the_verdict(tmp_path: Path) -> None:
    removed = freeze("etcd", fresh=12.0, batch=3.0, removed=[("n2", 2.5)])
    report = OutageReport(config=OutageConfig(nodes=100), freezes=[freeze(fresh=4.0, setup_seconds=95.0), removed],
                          seconds=480.0)
    text = render(report, WHERE, "python -m benchmarks.run --suite outage-recovery")
    assert text.startswith("## Control-plane outages: recovery after kube-apiserver or etcd is frozen\n")
    assert "Command: `python -m benchmarks.run --suite outage-recovery`" in text
    assert "Test CPU, 2 cores" in text
    assert "| kube-apiserver | 45 | 4.0 s | 2.7 / 4.0 | 0.0 s | 0 | 0 | 0 | moved | met |" in text
    assert "| etcd | 45 | 12.0 s | 8.0 / 12.0 | 3.0 s | 1 | 0 | 0 | moved | **missed** |" in text
    assert "Verdict: **≤ 5 s after the thaw: missed**." in text
    assert "etcd: every NodeMetric fresh 12.0 s after the thaw; batch resources removed 1 times." in text
    assert "etcd: batch resources removed (Node, seconds from the thaw): n2 +2.5." in text
    assert "- no problems." in text
    assert "`benchmarks/plots/outage_recovery.json`" in text
    assert "every simulated Node with batch resources): kube-apiserver 95.0 s." in text

    report.freezes.append(Freeze("etcd", 100, failure="TimeoutError('the steady state')",
                                 agent_problems=["simulated: restarted"]))
    text = render(report, WHERE, "cmd")
    assert "etcd: not measured: TimeoutError('the steady state')." in text
    assert "- etcd: simulated: restarted" in text

    raw = tmp_path / "outage_recovery.json"
    never = freeze()
    never.fresh["n0"] = math.nan
    save_raw(OutageReport(config=OutageConfig(), freezes=[never]), raw, WHERE)
    saved = orjson.loads(raw.read_bytes())
    assert saved["verdict"] == MISSED and saved["machine"].startswith("Test CPU")
    assert saved["freezes"][0]["fresh"]["n0"] is None and saved["freezes"][0]["allFresh"] is None
    assert saved["freezes"][0]["fresh"]["n2"] == 2.0 and saved["config"]["state_dir"] == ".bench"


def test_the_suite_is_run_when_named_with_its_flags() -> None:
    assert outage_recovery.SUITE in run.SUITES and outage_recovery.SUITE not in run.DEFAULT_SUITES
    args = run.parser().parse_args(["--suite", "outage-recovery", "--outage-nodes", "1000",
                                    "--outage-component", "etcd", "--outage-freeze-seconds", "60",
                                    "--outage-agent-arg=--heartbeat-interval=5"])
    config = outage_recovery.config_from(args, Path("/tmp/state"))
    assert (config.nodes, config.components, config.freeze_seconds, config.agent_args) == (
        1000, ("etcd",), 60.0, ("--heartbeat-interval=5",))
    defaults = outage_recovery.config_from(run.parser().parse_args([]), Path("/tmp/state"))
    assert (defaults.nodes, defaults.components, defaults.freeze_seconds) == (100, ("kube-apiserver", "etcd"), 45.0)
    assert defaults.agent_args == ("--collect-interval=10",)  # replaced, not extended, by --outage-agent-arg


def test_the_components_are_found_among_the_sandboxs_descendants_by_program_and_state_dir(tmp_path: Path) -> None:
    bin_dir, state, other = tmp_path / "bin", tmp_path / "state", tmp_path / "state-other"
    bin_dir.mkdir()
    sleeper = Path(sys.executable)
    for name in ("etcd", "kube-apiserver"):
        (bin_dir / name).symlink_to(sleeper)
    sleep = ["-c", "import time; time.sleep(60)"]
    children = [subprocess.Popen([str(bin_dir / "etcd"), *sleep, "--data-dir", f"{state}/etcd"]),
                subprocess.Popen([str(bin_dir / "etcd"), *sleep, "--data-dir", f"{other}/etcd"]),
                subprocess.Popen([str(bin_dir / "kube-apiserver"), *sleep, "--tls-cert-file", f"{state}/pki/a.crt"])]
    def found(program: str) -> int | None:
        try:
            return outage_recovery.component_pid(os.getpid(), state, program)
        except RuntimeError:
            return None

    try:
        # A child's command line is its program's once it has exec'd it.
        eventually(lambda: found("etcd") is not None and found("kube-apiserver") is not None, 10,
                   message="the children running their programs")
        assert found("etcd") == children[0].pid
        assert found("kube-apiserver") == children[2].pid
        with pytest.raises(RuntimeError, match="kwok of the sandbox"):
            outage_recovery.component_pid(os.getpid(), state, "kwok")
    finally:
        for child in children:
            child.kill()
            child.wait()


@pytest.mark.parametrize(("args", "component"), [
    (["/cache/kubernetes-v1.36.3/bin/kube-apiserver", "--etcd-servers=x"], "kube-apiserver"),
    (["/cache/bin/kwok", "--kubeconfig", "k"], "kwok"),
    (["/venv/bin/python3", "-m", "colocation", "operator", "--kubeconfig", "k"], "operator replicas"),
    (["/venv/bin/python3", "-m", "colocation", "agent", "--simulated-nodes", "n.json"], "simulated agents"),
    (["/venv/bin/python3", "-m", "colocation", "agent", "--kubeconfig", "k"], "node agent"),
    (["/venv/bin/python3", "-m", "colocation", "sandbox", "--apiserver", "kube"], "sandbox"),
])
def test_each_process_of_the_sandbox_is_counted_as_what_it_stands_for(args: list[str], component: str) -> None:
    assert outage_recovery.component_of(args) == component


def test_cpu_use_counts_from_the_first_read_and_keeps_a_process_that_exited() -> None:
    # Each child burns 0.4 s of CPU, says so, and waits for its stdin to close.
    burn = ("import sys, time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
            "print('burnt', flush=True)\nsys.stdin.read()\n")

    def burning() -> subprocess.Popen[str]:
        child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        return child

    before = burning()
    try:
        cpu = outage_recovery.CpuUse(os.getpid())
        cpu.read()
        assert cpu.used()["sandbox"] < 0.1  # burnt before the first read: not counted
        later = burning()
        cpu.read()
        assert later.stdin is not None
        later.stdin.close()
        later.wait()
        cpu.read()  # the child is gone: what was read of it stays (/proc counts ticks: a margin)
        assert 0.35 <= cpu.used()["sandbox"] < 0.8 and cpu.used()["benchmark client"] >= 0.0
    finally:
        before.kill()
        before.wait()


def test_the_section_says_where_the_cpu_went_during_the_recovery() -> None:
    measured = freeze(fresh=12.0, lease_taken=3.5, cpu={"kube-apiserver": 12.0, "operator replicas": 6.0},
                      cpu_window=12.0)
    text = render(OutageReport(config=OutageConfig(), freezes=[measured, freeze("etcd")]), WHERE, "cmd")
    assert "The Lease was written by a leader after the thaw 3.5 s after it (kube-apiserver)." in text
    assert "| Process | kube-apiserver (12.0 s) |" in text
    assert "| kube-apiserver | 12.0 (1.00) |" in text and "| operator replicas | 6.0 (0.50) |" in text
    assert "| all | 18.0 (1.50) |" in text
    assert "etcd (" not in text  # not measured: no column
