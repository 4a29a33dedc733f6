"""The agent's NodeSLO strategies: one folder each, listed in colocation.agent.strategies.registry.

Beside the folders: the interface (strategy), what setup gets on a node (strategy_host) and what
several strategies share (node_reservation; pressure_evictor and eviction_followup, memory and cpu
eviction's). Nothing is imported here, so that importing a pure policy loads nothing else.
"""
