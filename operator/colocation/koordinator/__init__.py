"""Koordinator's model: priority and QoS classes, NodeSLO strategies, the batch formula. Pure, no I/O."""
