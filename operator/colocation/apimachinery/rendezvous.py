"""Rendezvous (highest random weight) hashing: which member a key goes to, the same everywhere.

Every process that knows the same members ranks them the same way for a key, and a member that
comes or goes moves only the keys it ranks first. Agents spread their nodes' reports over the
replicas with it (`agent.leader_locator`); replicas share the evaluation shards with it
(`controllers.evaluation_shards`).
"""

from __future__ import annotations

import hashlib


def rendezvous_rank(key: str, member: str) -> int:
    """`member`'s weight for `key`: the highest weight wins the key."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{member}".encode(), digest_size=8).digest(), "big")
