"""CPU burst: latency-sensitive pods with a CPU limit may go past it for a while (NodeSLO cpuBurstStrategy)."""
