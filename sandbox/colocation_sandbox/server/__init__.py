"""An in-memory Kubernetes API server, faithful enough for kubectl, Kopf and kubernetes-asyncio.

For trying the system, for tests and for capacity simulation; never for production. It imports
nothing from colocation but colocation.apimachinery: the launcher hands it what it needs.

Its layers: docs/architecture.md#the-sandbox
"""
