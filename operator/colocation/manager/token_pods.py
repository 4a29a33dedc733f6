"""The leader's pod cache (the controllers' Pod informer) as the token authenticator reads it.

The API server may not import the controllers; the manager, which holds both, hands the
authenticator this view once the controllers run (the leader only).
"""

from __future__ import annotations

import datetime as dt

from colocation.apiserver.local_token_authentication import BoundPod
from colocation.controllers.cluster import ClusterState


class ClusterStatePods:
    """`PodLookup` over ClusterState: bound pods that have not finished, once listed."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    @property
    def synced(self) -> bool:
        return self._state.pods_synced.is_set()

    def pod(self, namespace: str, name: str) -> BoundPod | None:
        pod = self._state.pod((namespace, name))
        if pod is None:
            return None
        metadata = pod.get("metadata") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        return BoundPod(uid=str(metadata.get("uid") or ""), node_name=node,
                        deletion_timestamp=_timestamp(metadata.get("deletionTimestamp")))


def _timestamp(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()
