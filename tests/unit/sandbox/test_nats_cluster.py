"""The sandbox's NATS cluster with `secure`: TLS on clients and routes, with a CA made at start, and the
operator's user; a client without the password, or without the CA, is refused. Skipped, saying so, where
nats-server is not built (`make nats`)."""

from __future__ import annotations

import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import nats
import nats.errors
import pytest
from nats.js.api import StreamConfig

from colocation.jetstream.nats_connection import NatsOptions, connect
from colocation_sandbox.launcher.nats_cluster import (
    NatsCluster,
    load_cluster,
    start_cluster,
)
from tests.timing import TIME_FACTOR


@pytest.fixture
async def secure_cluster(nats_server: str, tmp_path: Path) -> AsyncIterator[NatsCluster]:
    cluster = await start_cluster(tmp_path / "nats", binary=nats_server, secure=True)
    yield cluster
    await cluster.stop()


def operator_options(cluster: NatsCluster) -> NatsOptions:
    """What `cluster.operator_args()` tells an operator replica, as the replica reads its flags."""
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in cluster.operator_args() if "=" in arg)
    assert flags["store"] == "nats"
    return NatsOptions(servers=tuple(cluster.urls), ca_file=flags["nats-ca-file"], user=flags["nats-user"],
                       password_file=flags["nats-password-file"], timeout=2.0 * TIME_FACTOR)


async def test_the_operators_user_writes_a_replicated_stream_over_tls(secure_cluster: NatsCluster) -> None:
    assert all(url.startswith("tls://127.0.0.1:") for url in secure_cluster.urls)
    client = await connect(operator_options(secure_cluster), name="operator")
    try:
        js = client.jetstream(timeout=5.0 * TIME_FACTOR)
        await js.add_stream(StreamConfig(name="CHECK", subjects=["check.>"], num_replicas=3))
        ack = await js.publish("check.one", b"x")  # acknowledged by a quorum: the routes work
        assert ack.seq == 1 and client.connected_url is not None and client.connected_url.scheme == "tls"
    finally:
        await client.close()
    async with aiohttp.ClientSession() as session:
        for server in secure_cluster.servers:  # routes are mutual TLS: a peer needs a certificate of the CA
            async with session.get(f"http://127.0.0.1:{server.monitor_port}/varz") as response:
                varz = await response.json()
            assert (varz["tls_required"], varz["cluster"]["tls_required"], varz["cluster"]["tls_verify"]) == \
                (True, True, True), varz


async def attempt(servers: list[str], *, ca_file: str | None, user: str | None,
                  password: str | None) -> Exception | None:
    """One connection attempt to each of `servers`, without the operator's endless retries; its error."""
    try:
        client = await nats.connect(servers=servers, tls=ssl.create_default_context(cafile=ca_file), user=user,
                                    password=password,
                                    connect_timeout=2.0 * TIME_FACTOR, allow_reconnect=False, max_reconnect_attempts=0)
    except (nats.errors.Error, ssl.SSLError, OSError) as error:
        return error
    await client.close()
    return None


async def test_a_client_without_the_password_or_without_the_ca_is_refused(secure_cluster: NatsCluster) -> None:
    options = operator_options(secure_cluster)
    assert secure_cluster.security is not None
    password = secure_cluster.security.password
    assert await attempt(secure_cluster.urls, ca_file=options.ca_file, user=options.user, password=password) is None
    for user, wrong in ((options.user, "not-the-password"), (None, None)):
        refused = await attempt(secure_cluster.urls, ca_file=options.ca_file, user=user, password=wrong)
        assert isinstance(refused, nats.errors.Error) and "Authorization Violation" in str(refused), (user, refused)
    # The system's CAs, not the cluster's: the servers' certificate is not trusted (so no password is sent).
    untrusted = await attempt(secure_cluster.urls, ca_file=None, user=options.user, password=password)
    assert isinstance(untrusted, ssl.SSLCertVerificationError), untrusted


async def test_the_password_and_the_configurations_holding_it_are_the_owners_only(
        secure_cluster: NatsCluster) -> None:
    security = secure_cluster.security
    assert security is not None
    secrets = [security.password_file, security.key_file, *(server.config for server in secure_cluster.servers)]
    for path in secrets:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert security.password in secure_cluster.servers[0].config.read_text()


async def test_a_server_killed_from_outside_is_gone_and_starts_again_on_its_ports(secure_cluster: NatsCluster,
                                                                                 tmp_path: Path) -> None:
    # What an e2e test does to a sandbox's servers: found through cluster.json, killed, started again.
    listed = load_cluster(tmp_path / "nats")
    assert listed.urls == secure_cluster.urls
    server = listed.servers[0]
    assert server.pid == secure_cluster.servers[0].pid and server.process is None
    await listed.kill_server(server)
    owned = secure_cluster.servers[0].process
    assert owned is not None and await owned.wait() == -9
    await listed.start_server(server)
    try:
        await listed.wait_ready(timeout=30.0 * TIME_FACTOR)
        options = operator_options(secure_cluster)
        assert secure_cluster.security is not None
        assert await attempt([server.url], ca_file=options.ca_file, user=options.user,
                             password=secure_cluster.security.password) is None
    finally:
        await listed.stop()
