"""Certificates and keys of the control plane, as kubeadm lays them out (in spirit).

One cluster CA signs kube-apiserver's serving certificate and every client certificate (the
admin, each component, the node); a separate front-proxy CA signs the certificate kube-apiserver
presents to aggregated API servers, which they verify against `extension-apiserver-authentication`.
Service-account tokens are signed with an EC key. Everything is generated fresh per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from colocation.apimachinery import certificates

ADMIN_USER = "colocation-admin"
FRONT_PROXY_CLIENT = "front-proxy-client"
# Names every in-cluster client may use for kube-apiserver (and the Service IP it gets).
APISERVER_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                       "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: certificates.CertKey
    front_proxy_ca: certificates.CertKey

    def file(self, name: str) -> str:
        return str(self.directory / name)

    def client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> tuple[str, str]:
        """Issue (once) a client certificate for `user` in `groups`: (cert path, key path)."""
        cert = self.directory / f"{stem}.crt"
        if not cert.exists():
            issued = certificates.issue_certificate(self.ca, user, server=False, client=True, organizations=groups)
            issued.write(self.directory, stem)
        return str(cert), str(self.directory / f"{stem}.key")


def create(directory: Path, *, apiserver_ips: tuple[str, ...]) -> Pki:
    """Write every certificate and key kube-apiserver, etcd's clients and the components need."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = certificates.new_ca("colocation-kube-ca")
    ca.write(directory, "ca")
    certificates.issue_certificate(ca, "kube-apiserver", dns_names=APISERVER_DNS_NAMES,
                              ip_addresses=apiserver_ips).write(directory, "apiserver")
    front_proxy_ca = certificates.new_ca("colocation-front-proxy-ca")
    front_proxy_ca.write(directory, "front-proxy-ca")
    certificates.issue_certificate(front_proxy_ca, FRONT_PROXY_CLIENT, server=False,
                              client=True).write(directory, "front-proxy-client")
    key = ec.generate_private_key(ec.SECP256R1())
    (directory / "sa.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (directory / "sa.key").chmod(0o600)
    (directory / "sa.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return Pki(directory, ca, front_proxy_ca)
