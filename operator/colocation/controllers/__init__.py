"""The leader's controllers: NodeSLO from the cluster configuration, NodeResource and node health.

The decisions are pure functions (`config` for the ConfigMap, `colocation.noderesource` for the
batch formula, `resources` for pod arithmetic); the Kopf handlers around them only read and write.
"""
