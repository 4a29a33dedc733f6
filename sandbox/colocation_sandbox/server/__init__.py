"""An in-memory Kubernetes API server, faithful enough for kubectl, Kopf and kubernetes-asyncio.

For trying the system, for tests and for capacity simulation; never for production. It imports
nothing from colocation but colocation.apimachinery: whatever runs processes around it (the
launcher) hands it what it needs. Layers, each depending only on those above it:
  resource_types, request_paths         - the description of a resource type; what a path asks for
  crd_schema, patches, strategic_merge, - pure functions over JSON objects
    managedfields, jsonpath, printers
  admission, request_bodies, ...        - what happens to a body between the request and the store
  object_watch_window, object_store     - objects, the global resourceVersion, the event window
  token_authority, rbac_authorizer, ... - who is calling and what they may do
  api_core                              - what the endpoints beside the verbs use of the server
  verbs, special_endpoints, api_discovery, api_aggregator, builtin_controllers, ...
                                        - the resource verbs, the endpoints beside them, the controllers
  api_server                            - the HTTP shell (aiohttp)
"""
