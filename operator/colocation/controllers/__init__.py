"""The leader's controllers: NodeSLO from the cluster configuration, NodeResource and node health.

The decisions are pure functions (`config` for the ConfigMap, `colocation.koordinator` for the
strategies, the batch formula and pod classes); the Kopf handlers around them only read and write.
"""
