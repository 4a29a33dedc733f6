"""How operator code reaches the Kubernetes API: a kubernetes-asyncio ApiClient and bounded calls.

Every call goes through `call()` or `call_json()`, which bound it with a timeout the caller
chooses (shorter than whatever deadline the caller itself has: a leader's renew deadline, a
request being served). kubernetes-asyncio has no timeout by default, so a call left to it
could hang on a half-open connection for as long as the kernel keeps the socket.
"""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

from colocation.kube.config_error import KubeConfigError as KubeConfigError

T = TypeVar("T")


async def api_client(kubeconfig: Path | None = None) -> ApiClient:
    """An ApiClient for `kubeconfig`, else the pod's service account, else the default kubeconfig.

    The default kubeconfig is `$KUBECONFIG` or `~/.kube/config`, as kubectl finds it. The
    kubeconfig is never written back (kubernetes-asyncio would, on token refresh, by default).
    The caller closes the client (`async with` or `await client.close()`).
    """
    configuration = client.Configuration()
    if kubeconfig is not None:
        await _load_kubeconfig(configuration, str(kubeconfig))
        return _without_per_request_environment_lookups(ApiClient(configuration))
    try:
        # Refreshes the bound service-account token as the kubelet rotates it.
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration, try_refresh_token=True)
    except config.ConfigException as in_cluster_error:
        default = KUBE_CONFIG_DEFAULT_LOCATION
        try:
            await _load_kubeconfig(configuration, default)
        except KubeConfigError as error:
            raise KubeConfigError(f"not running in a cluster ({_one_line(in_cluster_error)}) and {error}; "
                                  f"pass --kubeconfig") from None
    return _without_per_request_environment_lookups(ApiClient(configuration))


def _without_per_request_environment_lookups(api: ApiClient) -> ApiClient:
    """Read the proxy environment once, as client-go does, instead of on every request.

    kubernetes-asyncio's session trusts the environment, so aiohttp looks up the proxy variables
    and reads ~/.netrc in a worker thread for every request: on the leader that was most of the
    CPU a TokenReview or SubjectAccessReview costs (see BENCHMARKS.md). client-go takes
    HTTPS_PROXY/NO_PROXY from the environment and never reads .netrc; so do we, once, here.
    """
    configuration = api.configuration
    if not configuration.proxy:
        server = urllib.parse.urlsplit(str(configuration.host))
        host, scheme = server.hostname or "", server.scheme or "https"
        proxy = urllib.request.getproxies().get(scheme)
        if proxy and not urllib.request.proxy_bypass(host):
            configuration.proxy = api.rest_client.proxy = proxy
    # The session is built inside kubernetes-asyncio with trust_env=True and no option to change it.
    api.rest_client.pool_manager._trust_env = False
    return api


def bound_unacknowledged_sends(api: ApiClient, seconds: float) -> None:
    """Make the kernel give up a request's bytes `seconds` after it sent them unacknowledged.

    A call's timeout ends the call, not the bytes it wrote: the kernel keeps retransmitting them
    (on a closed or orphaned socket too) for many minutes, so a request written into a cut
    connection reaches the API server once the network heals, long after the caller gave up.
    With TCP_USER_TIMEOUT on every connection of `api`, nothing sent at time t is retransmitted
    after t + `seconds` (Linux; elsewhere the option is absent and this does nothing).
    """
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is None:
        return
    milliseconds = max(1, int(seconds * 1000))

    def bounded_socket(addr_info: tuple[Any, ...]) -> socket.socket:
        family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
        sock = socket.socket(family=family, type=type_, proto=proto)
        if family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, option, milliseconds)
        return sock

    # The connector is built inside kubernetes-asyncio; aiohttp reads its socket factory per connection.
    connector = api.rest_client.pool_manager.connector
    if isinstance(connector, aiohttp.TCPConnector):
        connector._socket_factory = bounded_socket


async def _load_kubeconfig(configuration: client.Configuration, path: str) -> None:
    if not _is_file(path):
        # Checked here: kubernetes-asyncio would log a warning and then fail with a vaguer error.
        raise KubeConfigError(f"cannot use kubeconfig {path}: no such file")
    try:
        await config.load_kube_config(config_file=path, client_configuration=configuration, persist_config=False)
    except Exception as error:  # YAML, base64, exec plugins, files: any of them makes the kubeconfig unusable
        raise KubeConfigError(f"cannot use kubeconfig {path}: {_one_line(error)}") from None


def _is_file(path: str) -> bool:
    """A stat at start-up, before any event loop work depends on it."""
    return os.path.isfile(os.path.expanduser(path))


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


async def call(fn: Callable[..., Awaitable[T]], *args: Any, timeout: float, **kwargs: Any) -> T:
    """`await fn(*args, **kwargs)`, a kubernetes-asyncio API method, within `timeout` seconds.

    The timeout is passed down as `_request_timeout` (so the connection is torn down properly)
    and enforced around the whole call as well (so time spent waiting for a pooled connection
    or refreshing a token counts too). Raises TimeoutError when it runs out.
    """
    if timeout <= 0:
        raise TimeoutError("no time left for the call")
    async with asyncio.timeout(timeout):
        return await fn(*args, _request_timeout=timeout, **kwargs)


async def call_json(fn: Callable[..., Awaitable[Any]], *args: Any, timeout: float, **kwargs: Any) -> tuple[int, Any]:
    """Like `call()`, but return `(status, decoded JSON body)` for every status, errors included.

    For callers that want the object exactly as the API server sent it (field formats untouched
    by the generated models) and decide on 404/409 themselves instead of catching ApiException.
    A body that is not JSON is returned as text.
    """
    if timeout <= 0:
        raise TimeoutError("no time left for the call")
    async with asyncio.timeout(timeout):
        response = await fn(*args, _request_timeout=timeout, _preload_content=False, **kwargs)
        try:
            raw = await response.read()
        finally:
            response.release()
    status = int(response.status)
    if not raw:
        return status, None
    try:
        return status, orjson.loads(raw)
    except orjson.JSONDecodeError:
        return status, raw.decode(errors="replace")
