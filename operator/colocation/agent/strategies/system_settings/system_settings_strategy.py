"""System settings as a strategy: its flags and its setup (its loop: system_settings_reconciler, beside it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from colocation.agent.strategies.strategy import AgentStrategy, NodeStrategy, flag

if TYPE_CHECKING:
    from colocation.agent.strategies.strategy_host import StrategyHost


@dataclass(frozen=True)
class SystemSettingsOptions:
    enabled: bool = flag(
        False, "--system-settings", is_flag=True, envvar="COLOCATION_SYSTEM_SETTINGS", show_envvar=True,
        help="Write the NodeSLO's systemStrategy to the node's kernel: vm.min_free_kbytes (minFreeKbytesFactor "
             "per 10000 of MemTotal) and vm.watermark_scale_factor under --proc-root/sys, the values found "
             "written back when the NodeSLO no longer gives them (Koordinator's SystemConfig feature gate). "
             "Off by default; needs a writable /proc/sys.")
    interval: float = flag(
        10.0, "--system-settings-interval", type=click.FloatRange(min=0.05), show_default=True,
        help="With --system-settings: seconds between two rounds (a value someone else wrote is put back).")


def _setup(host: StrategyHost, options: SystemSettingsOptions) -> NodeStrategy:
    from colocation.agent.strategies.system_settings.system_settings_reconciler import (
        SystemSettingsEnforcer,
        node_system_settings,
    )

    return SystemSettingsEnforcer(node_system_settings(host.node, host.proc_root, host.kube, metrics=host.metrics,
                                                       dry_run=host.dry_run, interval=options.interval,
                                                       timeout=host.timeout))


SYSTEM_SETTINGS = AgentStrategy(name="system-settings", options=SystemSettingsOptions,
                                enabled=lambda options: options.enabled, setup=_setup)
