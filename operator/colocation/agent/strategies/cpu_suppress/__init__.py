"""CPU suppress: best-effort pods held to what latency-sensitive ones leave (NodeSLO resourceUsedThresholdWithBE)."""
