"""The agent's NodeSLO strategies: the one place that lists them.

Their flags appear in `colocation agent --help` in this order; on a node they are set up, run and
restored in it. Adding one: a folder beside the others (colocation.agent.strategies.strategy) and
a line here.
"""

from __future__ import annotations

from typing import Any

from colocation.agent.strategies.batch_cgroups.batch_cgroups_strategy import BATCH_CGROUPS
from colocation.agent.strategies.cpu_burst.cpu_burst_strategy import CPU_BURST
from colocation.agent.strategies.cpu_evict.cpu_evict_strategy import CPU_EVICT
from colocation.agent.strategies.cpu_suppress.cpu_suppress_strategy import CPU_SUPPRESS
from colocation.agent.strategies.memory_evict.memory_evict_strategy import MEMORY_EVICT
from colocation.agent.strategies.strategy import AgentStrategy
from colocation.agent.strategies.system_settings.system_settings_strategy import SYSTEM_SETTINGS

STRATEGIES: tuple[AgentStrategy[Any], ...] = (
    CPU_SUPPRESS,
    BATCH_CGROUPS,
    MEMORY_EVICT,
    CPU_EVICT,
    CPU_BURST,
    SYSTEM_SETTINGS,
)
