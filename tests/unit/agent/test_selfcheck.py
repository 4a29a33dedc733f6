"""The self-check: what an agent process's metrics say about its nodes, and what fails a window."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from colocation.agent import selfcheck
from colocation.agent.agent_metrics import AgentMetrics


def test_the_self_check_passes_a_clean_window_and_names_every_problem() -> None:
    def exposition(renewals: int, late: int, overdue: int, synced: int, failures: int, errors: int) -> str:
        return "\n".join([
            "colocation_agent_nodes 3",
            f"colocation_agent_lease_renew_duration_seconds_count {renewals}",
            f'colocation_agent_reports_sent_total{{route="leader",trigger="heartbeat"}} {renewals * 10}',
            f"colocation_agent_heartbeats_late_total {late}",
            f"colocation_agent_heartbeats_overdue {overdue}",
            "colocation_agent_heartbeat_oldest_age_seconds 12.5",
            "colocation_agent_informers 3",
            f"colocation_agent_informers_synced {synced}",
            f'colocation_agent_informer_failures_total{{resource="pods",reason="timeout"}} {failures}',
            f'colocation_agent_errors_total{{logger="colocation.agent.heartbeat",level="warning"}} {errors}',
            "colocation_agent_event_loop_lag_seconds 0.01", ""])

    before = selfcheck.parse_health(exposition(3, 1, 0, 3, 2, 5))
    clean = selfcheck.parse_health(exposition(9, 1, 0, 3, 2, 5))
    assert selfcheck.problems(before, clean) == []
    bad = selfcheck.parse_health(exposition(5, 3, 1, 2, 4, 6))
    assert selfcheck.problems(before, bad) == [
        "2 heartbeats were late (an accepted report or Lease renewal more than the heartbeat interval plus a tenth "
        "after the one before)",
        "1 of 3 nodes' heartbeats are overdue at the end (the oldest is 12.5 s old)",
        "1 of 3 informers are not synced",
        "2 list or watch attempts failed",
        "the agents logged 1 warnings or errors (colocation.agent.heartbeat: 1)"]
    assert selfcheck.problems(clean, before) == [
        "the agent process was restarted during the window (its counters went back)"]
    # A window that kills leaders expects warnings about reports and late heartbeats meanwhile, but
    # every node must be heard again by its end.
    warned = selfcheck.parse_health(exposition(9, 4, 0, 3, 2, 50))
    assert selfcheck.problems(before, warned, warnings_expected=True) == []
    assert selfcheck.problems(before, bad, warnings_expected=True) == selfcheck.problems(before, bad)[1:-1]


def test_every_warning_an_agent_logs_is_counted() -> None:
    metrics = AgentMetrics()
    with metrics.counting_logged_errors():
        logging.getLogger("colocation.agent.report").warning("report failed, retrying")
        logging.getLogger("colocation.agent.report").info("fine")
        logging.getLogger("colocation.kube.informer").error("bad")
    logging.getLogger("colocation.agent.report").warning("after: not counted")
    health = selfcheck.parse_health(metrics.exposition().decode())
    assert health.errors == {"colocation.agent.report": 1, "colocation.kube.informer": 1}


def test_a_sandbox_state_names_every_agent_process(tmp_path: Path) -> None:
    (tmp_path / "agents.json").write_bytes(orjson.dumps([
        {"nodes": ["n0"], "simulated": False, "metricsPort": 1234, "pid": 10},
        {"nodes": ["n1", "n2"], "simulated": True, "metricsPort": 1235, "pid": 11},
        {"nodes": ["n3"], "simulated": False, "host": "10.244.1.3", "metricsPort": 9464, "pid": 12}]))
    assert selfcheck.sandbox_metrics_urls(tmp_path) == {
        "real agent (1 nodes, pid 10)": "http://127.0.0.1:1234/metrics",
        "simulated agent (2 nodes, pid 11)": "http://127.0.0.1:1235/metrics",
        "real agent (1 nodes, pid 12)": "http://10.244.1.3:9464/metrics"}


def test_a_window_is_judged_for_every_process_read_on_both_sides() -> None:
    def health(nodes: int, renewals: int) -> selfcheck.AgentHealth:
        return selfcheck.parse_health(f"colocation_agent_nodes {nodes}\n"
                                      f"colocation_agent_lease_renew_duration_seconds_count {renewals}\n"
                                      f"colocation_agent_reports_sent_total {renewals * 3}\n")

    summaries, found = selfcheck.sandbox_verdict({"sim": health(2, 4)}, {"sim": health(2, 9), "new": health(1, 0)})
    assert list(summaries) == ["sim"] and summaries["sim"].startswith("2 nodes: 15 reports accepted, 5 Lease renewals")
    assert found == ["new: not read before the window (restarted?)"]
