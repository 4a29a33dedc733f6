"""Fixtures shared by the sandbox's unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from colocation.apimachinery import certificates
from colocation_sandbox.server.api_aggregator import Aggregator
from colocation_sandbox.server.api_core import ApiCore
from colocation_sandbox.server.api_server import ApiServer


@pytest.fixture
async def aggregator() -> AsyncIterator[Aggregator]:
    """An API server's aggregator (namespace default exists), stopped after the test."""
    api = ApiServer()
    api.store.create(api.rt("", "namespaces"), {"metadata": {"name": "default"}})
    api.aggregator = Aggregator(api, certificates.new_ca("front-proxy-ca"))
    yield api.aggregator
    await api.aggregator.stop()


def register_things(api: ApiCore, port: int | None, tls: dict[str, Any] | None = None) -> None:
    """Service default/things (with a ready endpoint on loopback when `port` is given) and APIService
    v1.things.example.com for it, with the given TLS fields (default: insecureSkipTLSVerify)."""
    api.store.create(api.rt("", "services"), {"metadata": {"name": "things", "namespace": "default"},
                                               "spec": {"ports": [{"name": "https", "port": 443}]}})
    if port is not None:
        api.store.create(api.rt("", "endpoints"), {
            "metadata": {"name": "things", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]})
    api.store.create(api.rt("apiregistration.k8s.io", "apiservices"), {
        "metadata": {"name": "v1.things.example.com"},
        "spec": {"group": "things.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 100,
                 "service": {"namespace": "default", "name": "things", "port": 443},
                 **(tls if tls is not None else {"insecureSkipTLSVerify": True})}})
