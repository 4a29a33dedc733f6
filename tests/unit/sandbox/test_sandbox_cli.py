"""`colocation sandbox`'s flags: what reaches the sandbox it starts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from colocation.agent.simulated import SimulatedNode
from colocation.cli import main
from colocation_sandbox.launcher.controlplane import kube_sandbox
from colocation_sandbox.launcher.controlplane.kube_sandbox import KubeSandboxConfig


def test_the_real_control_plane_runs_the_nats_store_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[KubeSandboxConfig] = []

    async def serve(config: KubeSandboxConfig, stop: asyncio.Event) -> None:
        started.append(config)

    monkeypatch.setattr(kube_sandbox, "serve_kube_sandbox", serve)
    result = CliRunner().invoke(main, ["sandbox", "--apiserver", "kube", "--store", "nats",
                                       "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert [config.store for config in started] == ["nats"]


def test_metrics_server_takes_metrics_k8s_io_from_the_operators(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One APIService serves a group version: with metrics-server, the operators' resource-metrics
    component (its APIService and --serve-resource-metrics) is left out; kwok's metrics come with it."""
    started: list[KubeSandboxConfig] = []

    async def serve(config: KubeSandboxConfig, stop: asyncio.Event) -> None:
        started.append(config)

    monkeypatch.setattr(kube_sandbox, "serve_kube_sandbox", serve)
    for extra in (["--metrics-server", "2"], ["--kwok-resource-metrics"], []):
        result = CliRunner().invoke(main, ["sandbox", "--apiserver", "kube", "--state-dir", str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
    with_server, kwok_only, neither = started
    assert with_server.metrics_servers == 2 and "resource-metrics" not in with_server.components
    assert kwok_only.kwok_resource_metrics and kwok_only.metrics_servers == 0
    assert "resource-metrics" in kwok_only.components and "resource-metrics" in neither.components
    assert not neither.kwok_resource_metrics and neither.metrics_servers == 0
    refused = CliRunner().invoke(main, ["sandbox", "--metrics-server", "1", "--state-dir", str(tmp_path)])
    assert refused.exit_code != 0 and "use --apiserver kube" in refused.output


def test_cert_manager_installs_its_component_last_on_the_real_control_plane_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[KubeSandboxConfig] = []

    async def serve(config: KubeSandboxConfig, stop: asyncio.Event) -> None:
        started.append(config)

    monkeypatch.setattr(kube_sandbox, "serve_kube_sandbox", serve)
    result = CliRunner().invoke(main, ["sandbox", "--apiserver", "kube", "--cert-manager",
                                       "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    # Last: the component annotates the APIServices of the components before it.
    assert [config.components for config in started] == [("resource-metrics", "custom-metrics", "cert-manager")]
    refused = CliRunner().invoke(main, ["sandbox", "--cert-manager", "--state-dir", str(tmp_path)])
    assert refused.exit_code != 0 and "--apiserver kube" in refused.output


def test_the_scheduler_runs_without_the_extender_on_request_on_the_real_control_plane_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[KubeSandboxConfig] = []

    async def serve(config: KubeSandboxConfig, stop: asyncio.Event) -> None:
        started.append(config)

    monkeypatch.setattr(kube_sandbox, "serve_kube_sandbox", serve)
    for extra in ([], ["--no-scheduler-extender"]):
        result = CliRunner().invoke(main, ["sandbox", "--apiserver", "kube", "--state-dir", str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
    assert [config.scheduler_extender for config in started] == [True, False]
    refused = CliRunner().invoke(main, ["sandbox", "--no-scheduler-extender", "--state-dir", str(tmp_path)])
    assert refused.exit_code != 0 and "use --apiserver kube" in refused.output


def test_the_scraped_pod_share_reaches_every_simulated_node_on_both_api_servers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from colocation_sandbox.launcher import project_install, sandbox_runner
    from colocation_sandbox.launcher.controlplane import fakenodes
    from colocation_sandbox.launcher.sandbox_nodes import SandboxNodes

    started: list[KubeSandboxConfig] = []

    async def serve(config: KubeSandboxConfig, stop: asyncio.Event) -> None:
        started.append(config)

    builtin: list[SandboxNodes] = []

    async def serve_builtin(sandbox: Any, stop: asyncio.Event, operators: int = 0, **options: Any) -> None:
        builtin.append(SandboxNodes(sandbox, options["nodes"], pods_per_node=options["pods_per_node"],
                                    scraped_share=options["scraped_share"]))

    monkeypatch.setattr(kube_sandbox, "serve_kube_sandbox", serve)
    monkeypatch.setattr(sandbox_runner, "serve_forever", serve_builtin)
    monkeypatch.setattr(project_install, "install_project", lambda *args, **kwargs: None)
    share = ["--nodes", "3", "--pods-per-node", "30", "--scraped-pod-share", "0.2"]
    for apiserver in ("kube", "builtin"):
        result = CliRunner().invoke(main, ["sandbox", "--apiserver", apiserver, "--state-dir", str(tmp_path), *share])
        assert result.exit_code == 0, result.output
    (config,) = started
    assert config.scraped_share == 0.2
    specs = fakenodes.simulated_specs(config.nodes, config.pods_per_node, scraped_share=config.scraped_share)
    (nodes,) = builtin
    for spec in (*specs, *(nodes._simulated(index, "") for index in (1, 2))):
        assert spec.scraped_share == 0.2 and spec.pods == 30
        assert SimulatedNode.from_json(spec.to_json()).scraped_share == 0.2  # as the agent process reads it
    result = CliRunner().invoke(main, ["sandbox", "--apiserver", "kube", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert started[-1].scraped_share == 1.0  # the default: every pod scraped
    refused = CliRunner().invoke(main, ["sandbox", "--scraped-pod-share", "1.5", "--state-dir", str(tmp_path)])
    assert refused.exit_code != 0 and "--scraped-pod-share" in refused.output
