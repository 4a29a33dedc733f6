"""JSON Web Signatures as Kubernetes uses them for ServiceAccount tokens: ES256 and RS256 only.

Decoding a compact JWS, verifying it against a JSON Web Key Set, and (for the sandbox, which issues
tokens as kube-apiserver does) signing with ES256 and publishing the key. Written on `cryptography`
(already a dependency) rather than with PyJWT or python-jose: a new dependency for two signature
checks, whose generality (many algorithms, `alg` taken from the token) is what must not be trusted
here. Only RS256 with an RSA key and ES256 with a P-256 key are accepted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
_ES256_SIGNATURE_BYTES = 64


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(key: PublicKey) -> str:
    """kube-apiserver's key id: base64url of the SHA-256 of the public key's DER (PKIX) form."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return b64url_encode(hashlib.sha256(der).digest())


def _integer(text: Any) -> int:
    if not isinstance(text, str) or not text:
        raise ValueError("not a base64url integer")
    return int.from_bytes(b64url_decode(text), "big")


def public_keys(jwks: Any) -> dict[str, PublicKey]:
    """The RSA and P-256 signing keys of a JSON Web Key Set, by kid; other keys are left out."""
    keys: dict[str, PublicKey] = {}
    entries = jwks.get("keys") if isinstance(jwks, Mapping) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or entry.get("use", "sig") != "sig":
            continue
        try:
            key: PublicKey
            if entry.get("kty") == "RSA":
                key = rsa.RSAPublicNumbers(_integer(entry.get("e")), _integer(entry.get("n"))).public_key()
            elif entry.get("kty") == "EC" and entry.get("crv") == "P-256":
                key = ec.EllipticCurvePublicNumbers(_integer(entry.get("x")), _integer(entry.get("y")),
                                                    ec.SECP256R1()).public_key()
            else:
                continue
        except (ValueError, TypeError, binascii.Error):
            continue
        keys[str(entry.get("kid") or key_id(key))] = key
    return keys


@dataclass(frozen=True, kw_only=True)
class Jws:
    """A compact JWS split and decoded, its signature not yet checked."""

    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    signing_input: bytes
    signature: bytes


def parse_jws(token: str) -> Jws | None:
    """The parts of a compact JWS with JSON header and claims, else None (not a JWT)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except (ValueError, UnicodeError, binascii.Error):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return Jws(header=header, claims=claims, signing_input=f"{parts[0]}.{parts[1]}".encode("ascii"),
               signature=signature)


def signature_valid(jws: Jws, key: PublicKey) -> bool:
    """Whether `key` signed `jws`, with the header's algorithm if it is the one for the key's type."""
    algorithm = jws.header.get("alg")
    try:
        if algorithm == "RS256" and isinstance(key, rsa.RSAPublicKey):
            key.verify(jws.signature, jws.signing_input, padding.PKCS1v15(), hashes.SHA256())
            return True
        if algorithm == "ES256" and isinstance(key, ec.EllipticCurvePublicKey) \
                and isinstance(key.curve, ec.SECP256R1) and len(jws.signature) == _ES256_SIGNATURE_BYTES:
            half = _ES256_SIGNATURE_BYTES // 2
            der = encode_dss_signature(int.from_bytes(jws.signature[:half], "big"),
                                       int.from_bytes(jws.signature[half:], "big"))
            key.verify(der, jws.signing_input, ec.ECDSA(hashes.SHA256()))
            return True
    except InvalidSignature:
        return False
    return False


def _integer_text(value: int) -> str:
    return b64url_encode(value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def jwk(key: PublicKey) -> dict[str, str]:
    """The public key as a JSON Web Key, as kube-apiserver publishes it at /openid/v1/jwks."""
    common = {"use": "sig", "kid": key_id(key)}
    if isinstance(key, rsa.RSAPublicKey):
        numbers = key.public_numbers()
        return {**common, "kty": "RSA", "alg": "RS256", "n": _integer_text(numbers.n), "e": _integer_text(numbers.e)}
    point = key.public_numbers()
    return {**common, "kty": "EC", "alg": "ES256", "crv": "P-256",
            "x": b64url_encode(point.x.to_bytes(32, "big")), "y": b64url_encode(point.y.to_bytes(32, "big"))}


def sign_es256(claims: Mapping[str, Any], key: ec.EllipticCurvePrivateKey, *, kid: str = "") -> str:
    """A compact JWS of `claims` signed with the P-256 `key` (kid: by default its key_id)."""
    header = {"alg": "ES256", "kid": kid or key_id(key.public_key())}
    signing_input = ".".join(b64url_encode(json.dumps(part, separators=(",", ":")).encode())
                             for part in (header, claims))
    r, s = decode_dss_signature(key.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256())))
    half = _ES256_SIGNATURE_BYTES // 2
    return f"{signing_input}.{b64url_encode(r.to_bytes(half, 'big') + s.to_bytes(half, 'big'))}"
