"""An in-memory Kubernetes API server, faithful enough for kubectl, Kopf and kubernetes-asyncio.

For trying the system, for tests and for capacity simulation; never for production.
Layers, each depending only on those above it:
  errors, resources        - Status errors; the description of a resource type
  selectors, schema, patch - pure functions over JSON objects
  store, watch             - objects, the global resourceVersion, the event window
  auth, rbac               - who is calling and what they may do
  server, discovery, ...   - the HTTP shell (aiohttp)
"""
