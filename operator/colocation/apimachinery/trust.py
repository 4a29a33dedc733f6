"""TLS client contexts that trust one CA bundle, without the cryptography package.

Kept apart from colocation.apimachinery.certificates, which issues certificates and so imports
cryptography (about 10 MiB of memory): a node agent only verifies servers, and must stay small.
"""

from __future__ import annotations

import ssl


def trusting(ca_pem: bytes) -> ssl.SSLContext:
    """A client context that trusts only `ca_pem` (hostname checked against the SANs), TLS 1.2 or later."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cadata=ca_pem.decode("ascii"))
    return context
