"""Reaching the operator's leader directly over HTTPS, as a standby does to keep its copies.

The leader publishes its address and the CA bundle of its serving certificate on the leader Lease
(`kube.leaderelection`); `LeaderAddress` reads them back. A standby dials that address with its
own ServiceAccount token, like any other client of the API, trusting that CA only. Each of its
followers (the NodeMetric copy, the custom metric samples) runs under `follow_leader`, which
restarts it whenever another replica takes the Lease, and never follows while nobody leads.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ssl
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from colocation.apimachinery import certificates
from colocation.kube.informer import Transport
from colocation.kube.leaderelection import LEADER_CA_ANNOTATION, LEADER_ENDPOINT_ANNOTATION, LeaderElectionRecord
from colocation.kube.transport import https_transport


@dataclass(frozen=True)
class LeaderAddress:
    identity: str
    endpoint: str  # https://HOST:PORT
    ca_pem: bytes

    @classmethod
    def from_record(cls, record: LeaderElectionRecord) -> LeaderAddress | None:
        """Where the record's holder serves, as it published it; None if nobody holds it or it did not."""
        identity, annotations = record.holder_identity, record.annotations
        endpoint = annotations.get(LEADER_ENDPOINT_ANNOTATION, "")
        ca = annotations.get(LEADER_CA_ANNOTATION, "")
        if not identity or not endpoint.startswith("https://") or not ca:
            return None
        try:
            return cls(identity, endpoint.rstrip("/"), base64.b64decode(ca, validate=True))
        except ValueError:
            return None

    @functools.cached_property
    def ssl_context(self) -> ssl.SSLContext:
        context = certificates.ssl_client_context(self.ca_pem)
        context.check_hostname = False  # the certificate names the Service, we dial the pod address
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def transport(self, session: aiohttp.ClientSession, token: Callable[[], str], *,
                  stream_silence: float | None = None, headers: Mapping[str, str] | None = None) -> Transport:
        """GETs to this leader with our bearer token (read at every request: it is rotated);
        `stream_silence` and `headers` as `https_transport`'s."""
        return https_transport(session, lambda: self.endpoint, lambda: self.ssl_context, token=token,
                               stream_silence=stream_silence, headers=headers)


async def follow_leader(leader: Callable[[], LeaderAddress | None],
                        follow: Callable[[aiohttp.ClientSession, LeaderAddress], Coroutine[Any, Any, None]],
                        poll_interval: float, *, on_stop: Callable[[], None] = lambda: None) -> None:
    """Run `follow` against whoever leads, until cancelled; a new leader gets a new `follow`.

    `leader()` is polled every `poll_interval` (it reads the elector's last observation, no
    request). `on_stop` runs whenever a `follow` ends, so a follower can say it is not following.
    """
    async with aiohttp.ClientSession() as session:
        while True:
            address = leader()
            if address is None:
                await asyncio.sleep(poll_interval)  # the poll period while no leader is known
                continue
            task = asyncio.create_task(follow(session, address))
            try:
                while leader() == address and not task.done():
                    await asyncio.wait({task}, timeout=poll_interval)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                on_stop()
