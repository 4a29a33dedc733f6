"""Memory eviction: best-effort pods the leader is asked to evict when the node runs short of memory."""
