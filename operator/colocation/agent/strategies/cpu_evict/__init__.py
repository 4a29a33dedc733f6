"""CPU eviction: best-effort pods the leader is asked to evict when they get too little of the cpu they request."""
