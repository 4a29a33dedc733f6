"""The leader's pod and ServiceAccount caches (the controllers' informers) as the token authenticator reads them.

The API server may not import the controllers; the manager, which holds both, hands the
authenticator this view once the controllers run (the leader only).
"""

from __future__ import annotations

import datetime as dt

from colocation.apiserver.local_token_authentication import BoundPod
from colocation.controllers.cluster import ClusterState


class ClusterStatePods:
    """`PodLookup` over ClusterState: bound pods that have not finished, once listed, and the
    ServiceAccounts of the operator's namespace."""

    def __init__(self, state: ClusterState, namespace: str) -> None:
        self._state = state
        self._namespace = namespace

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


    def service_account_uid(self, namespace: str, name: str) -> str | None:
        if namespace != self._namespace or not self._state.service_accounts_synced:
            return None
        return self._state.service_accounts.get(name)


def _timestamp(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()
