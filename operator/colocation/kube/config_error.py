"""The error of a Kubernetes client configuration that cannot be used, apart from the client itself.

colocation.kube.client raises it; a command catches it without importing that client (and
kubernetes-asyncio with it, about 40 MiB resident) when it may never need the client.
"""


class KubeConfigError(Exception):
    """No usable way to reach the Kubernetes API; the message is one line, fit for a CLI."""
