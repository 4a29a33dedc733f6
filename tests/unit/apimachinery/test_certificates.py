"""Generated certificates work in real TLS handshakes over loopback, and only with the right CA."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from colocation.apimachinery.certificates import (
    BACKDATE,
    CertKey,
    issue_certificate,
    new_ca,
    peer_common_name_and_orgs,
    pem_certificates,
    ssl_client_context,
    ssl_server_context,
)

SERVING_CA = new_ca("sandbox-ca")
CLIENT_CA = new_ca("front-proxy-ca")
SERVING = issue_certificate(SERVING_CA, "sandbox", dns_names=["localhost"], ip_addresses=["127.0.0.1"])


class IdentityServer:
    """Answers each connection with the identity its client certificate proved ("-" for none)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[str, ...]] | None] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        identity = peer_common_name_and_orgs(writer.get_extra_info("ssl_object"))
        self.seen.append(identity)
        await reader.readline()
        answer = "-" if identity is None else f"{identity[0]}|{','.join(identity[1])}"
        writer.write(answer.encode() + b"\n")
        await writer.drain()
        writer.close()


@pytest.fixture
async def server() -> AsyncIterator[IdentityServer]:
    identity_server = IdentityServer()
    listener = await asyncio.start_server(identity_server.handle, "127.0.0.1", 0,
                                          ssl=ssl_server_context(SERVING, CLIENT_CA.cert_pem))
    identity_server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield identity_server


async def ask(port: int, context: ssl.SSLContext, hostname: str = "localhost") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=hostname)
    try:
        writer.write(b"who am i?\n")
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


async def test_handshake_without_a_client_certificate(server: IdentityServer) -> None:
    assert await ask(server.port, ssl_client_context(SERVING_CA.cert_pem)) == b"-\n"
    assert server.seen == [None]


async def test_handshake_with_a_client_certificate_proves_name_and_groups(server: IdentityServer) -> None:
    client = issue_certificate(CLIENT_CA, "front-proxy-client", server=False, client=True,
                               organizations=["system:masters", "proxies"])
    answer = await ask(server.port, ssl_client_context(SERVING_CA.cert_pem, client))
    assert answer == b"front-proxy-client|system:masters,proxies\n"
    assert server.seen == [("front-proxy-client", ("system:masters", "proxies"))]


async def test_server_signed_by_another_ca_is_refused(server: IdentityServer) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        await ask(server.port, ssl_client_context(new_ca("someone-else").cert_pem))


async def test_server_name_must_be_in_the_certificate(server: IdentityServer) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        await ask(server.port, ssl_client_context(SERVING_CA.cert_pem), hostname="api.example.com")


async def test_client_certificate_from_another_ca_gets_no_identity(server: IdentityServer) -> None:
    impostor = issue_certificate(new_ca("front-proxy-ca"), "front-proxy-client", server=False, client=True,
                                 organizations=["system:masters"])
    try:
        answer = await ask(server.port, ssl_client_context(SERVING_CA.cert_pem, impostor))
    except (ssl.SSLError, ConnectionError):
        answer = b""
    # Under TLS 1.3 the client may finish its half of the handshake before the server's alert
    # arrives; either way it must never hear an identity back.
    assert answer == b""
    assert server.seen == []


def test_certificates_carry_the_usages_clients_check() -> None:
    ca = x509.load_pem_x509_certificate(SERVING_CA.cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    leaf = x509.load_pem_x509_certificate(SERVING.cert_pem)
    assert leaf.issuer == ca.subject
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.SERVER_AUTH]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    both = issue_certificate(SERVING_CA, "peer", dns_names=["peer"], server=True, client=True)
    usages = x509.load_pem_x509_certificate(both.cert_pem).extensions.get_extension_for_class(
        x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_write_keeps_the_key_private(tmp_path: Path) -> None:
    cert_path, key_path = SERVING.write(tmp_path / "pki", "apiserver")
    assert (cert_path.name, key_path.name) == ("apiserver.crt", "apiserver.key")
    assert CertKey(cert_path.read_bytes(), key_path.read_bytes()) == SERVING
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600


def test_validity_is_given_by_an_injected_time_and_backdated() -> None:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ca = new_ca("short-ca", now=start, not_after=start + dt.timedelta(seconds=60))
    leaf = issue_certificate(ca, "leaf", now=start, not_after=start + dt.timedelta(seconds=20)).certificate
    assert (leaf.not_valid_before_utc, leaf.not_valid_after_utc) == (start - BACKDATE, start + dt.timedelta(seconds=20))
    assert pem_certificates(ca.cert_pem + SERVING_CA.cert_pem) == [ca.certificate, SERVING_CA.certificate]
    assert pem_certificates(b"") == []
    with pytest.raises(ValueError, match="must end after it starts"):
        new_ca("backwards", now=start, not_after=start)
