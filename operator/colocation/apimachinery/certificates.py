"""Certificates for HTTPS between the sandbox, the operator and their clients.

Everything is generated at start: a CA per trust domain (serving, clients, front proxy), leaf
certificates with the key usages kube-apiserver and Go clients insist on, and ssl contexts built
from them in memory. EC P-256 keys: generating one takes microseconds, an RSA key hundreds of ms.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from colocation.apimachinery.trust import trusting

# Tolerate clocks of peers that run slightly behind ours.
BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def write(self, directory: str | os.PathLike[str], stem: str) -> tuple[Path, Path]:
        """Write STEM.crt and STEM.key (readable by the owner only) into `directory`."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as stream:
            stream.write(self.key_pem)
        os.chmod(key_path, 0o600)  # in case the file existed with wider permissions
        return cert_path, key_path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _key_usage(*, certificate_authority: bool) -> x509.KeyUsage:
    # ECDSA keys sign (TLS 1.2 ECDHE and 1.3 alike); they never encipher keys.
    return x509.KeyUsage(digital_signature=True, key_cert_sign=certificate_authority,
                         crl_sign=certificate_authority, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False)


def _validity(builder: x509.CertificateBuilder, days: int, now: dt.datetime | None,
              *, not_after: dt.datetime | None) -> x509.CertificateBuilder:
    start = now if now is not None else dt.datetime.now(dt.UTC)
    end = not_after if not_after is not None else start + dt.timedelta(days=days)
    if end <= start:
        raise ValueError(f"a certificate must end after it starts ({start.isoformat()}), not at {end.isoformat()}")
    return builder.not_valid_before(start - BACKDATE).not_valid_after(end)


def new_ca(common_name: str, *, days: int = 365, now: dt.datetime | None = None,
           not_after: dt.datetime | None = None) -> CertKey:
    """A self-signed CA that may sign leaf certificates only (path length 0).

    Valid from `now` (default: the current time, backdated a little) until `not_after`
    (default: `days` later).
    """
    key = _new_key()
    name = _name(common_name)
    public = key.public_key()
    builder = (
        _validity(x509.CertificateBuilder(), days, now, not_after=not_after)
        .subject_name(name).issuer_name(name).public_key(public)
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(certificate_authority=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    )
    cert = builder.sign(key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_certificate(
    ca: CertKey, common_name: str, *, dns_names: Iterable[str] = (), ip_addresses: Iterable[str] = (),
    server: bool = True, client: bool = False, organizations: Iterable[str] = (), days: int = 365,
    now: dt.datetime | None = None, not_after: dt.datetime | None = None,
) -> CertKey:
    """A leaf certificate signed by `ca`, for serving (SANs matter) and/or client authentication.

    A client certificate's CN is the username and its O entries the groups, as Kubernetes reads them.
    """
    if not (server or client):
        raise ValueError("a certificate must be usable for serving, client authentication, or both")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key made by new_ca()")
    key = _new_key()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
        ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (
        _validity(x509.CertificateBuilder(), days, now, not_after=not_after)
        .subject_name(_name(common_name, organizations)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(certificate_authority=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    alternative_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    alternative_names += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    if alternative_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _load_chain(context: ssl.SSLContext, cert: CertKey) -> None:
    # The ssl module reads certificate chains from files only; keep them on disk for no longer
    # than the call, in a private directory.
    with tempfile.TemporaryDirectory(prefix="colocation-tls-") as folder:
        cert_path, key_path = cert.write(folder, "chain")
        context.load_cert_chain(cert_path, key_path)


def ssl_server_context(cert: CertKey, client_ca_pem: bytes | None = None) -> ssl.SSLContext:
    """Serve with `cert`; with `client_ca_pem`, accept (not require) client certificates it signed.

    A client that presents a certificate the CA did not sign fails the handshake; one that
    presents none is let through, to authenticate some other way (bearer token).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert)
    if client_ca_pem is not None:
        context.load_verify_locations(cadata=client_ca_pem.decode("ascii"))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def reload_server_chain(context: ssl.SSLContext, cert: CertKey) -> None:
    """Serve `cert` from now on: handshakes after the call present it, open connections keep theirs.

    OpenSSL replaces a context's certificate and key in place, so a listening server picks up a
    renewed certificate without a restart.
    """
    _load_chain(context, cert)


def pem_certificates(bundle: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, in order (none for an empty one)."""
    return x509.load_pem_x509_certificates(bundle) if bundle.strip() else []


def ssl_client_context(ca_pem: bytes, client: CertKey | None = None) -> ssl.SSLContext:
    """Trust only `ca_pem` (hostname checked against the SANs); present `client` when given."""
    context = trusting(ca_pem)
    if client is not None:
        _load_chain(context, client)
    return context


def peer_common_name_and_orgs(
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None,
) -> tuple[str, tuple[str, ...]] | None:
    """(CN, O entries) of the peer's verified certificate, or None when it presented none.

    Only meaningful on a context that verifies peers (CERT_OPTIONAL or CERT_REQUIRED): the ssl
    module reports subjects of verified certificates only.
    """
    if ssl_object is None:
        return None
    peer = ssl_object.getpeercert()
    if not peer:
        return None
    common_name = ""
    organizations: list[str] = []
    subject: Any = peer.get("subject", ())
    for relative_name in subject:
        for key, value in relative_name:
            if key == "commonName":
                common_name = value
            elif key == "organizationName":
                organizations.append(value)
    return common_name, tuple(organizations)
