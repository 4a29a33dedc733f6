"""The HTTP shell: authentication, impersonation, RBAC, routing to verbs and special endpoints."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from aiohttp import web

from colocation import __version__
from colocation.apimachinery.clock import WallClock, now
from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.userinfo import UserInfo
from colocation.apimachinery.watch_params import query_flag
from colocation_sandbox.server import api_discovery, openapi_documents, request_bodies
from colocation_sandbox.server.access_reviews import Impersonation
from colocation_sandbox.server.api_aggregator import Aggregator
from colocation_sandbox.server.fault_injection import FaultRule, Faults
from colocation_sandbox.server.object_store import Change, Store
from colocation_sandbox.server.rbac_authorizer import RbacAuthorizer, RequestAttributes, forbidden_error
from colocation_sandbox.server.request_paths import Target, parse_target, resolve, verb_for
from colocation_sandbox.server.request_stats import USER_KEY, RequestStats
from colocation_sandbox.server.resource_types import Registry, ResourceType
from colocation_sandbox.server.special_endpoints import SpecialEndpoints
from colocation_sandbox.server.token_authority import DISCOVERY_PATH, JWKS_MEDIA_TYPE, JWKS_PATH, TokenAuthority
from colocation_sandbox.server.verbs import Verbs, json_response

log = logging.getLogger(__name__)

ANONYMOUS = UserInfo(username="system:anonymous", groups=("system:unauthenticated",))
_RBAC_RESOURCES = frozenset({"roles", "rolebindings", "clusterroles", "clusterrolebindings"})
_HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
_DISCOVERY_DEPTH = {"api": 2, "apis": 3}  # /api/{version}, /apis/{group}/{version}


class ApiServer:
    """Everything behind the sandbox's HTTPS port, independent of how it is served."""

    def __init__(self, *, clock: WallClock = now, window: int = 5000, bookmark_interval: float = 60.0) -> None:
        self.clock = clock
        self.registry = Registry()
        self.store = Store(self.registry, clock=clock, window=window)
        self.tokens = TokenAuthority(clock)
        self._rbac_version = 0
        self.rbac = RbacAuthorizer(self._rbac_objects, version=lambda: self._rbac_version)
        self.impersonation = Impersonation(self.rbac.authorize)
        self.store.subscribe(self._on_change)
        self.verbs = Verbs(self.store, bookmark_interval=bookmark_interval, clock=clock)
        self.special = SpecialEndpoints(self)
        self.faults = Faults()
        self.stats = RequestStats()  # requests and bytes per client and resource: /sandbox/stats
        self.aggregator: Aggregator | None = None  # set when the sandbox serves aggregated APIs
        self.requests_total = 0

    # ---- wiring ------------------------------------------------------------------------------

    def _rbac_objects(self, resource: str) -> list[dict[str, Any]]:
        rt = self.registry.get("rbac.authorization.k8s.io", "v1", resource)
        return list(self.store.objects(rt)) if rt is not None else []

    def _on_change(self, change: Change) -> None:
        if change.rt.group == "rbac.authorization.k8s.io" and change.rt.resource in _RBAC_RESOURCES:
            self._rbac_version += 1
        elif change.type == "DELETED" and change.rt.group == "":
            # kube-apiserver refuses a bound token once its pod, or any token once its
            # ServiceAccount, is gone (it looks both up at each authentication).
            uid = str((change.new.get("metadata") or {}).get("uid") or "")
            if change.rt.resource == "pods":
                self.tokens.revoke_bound_to(uid)
            elif change.rt.resource == "serviceaccounts":
                self.tokens.revoke_service_account(uid)

    def rt(self, group: str, resource: str, version: str = "v1") -> ResourceType:
        rt = self.registry.get(group, version, resource)
        if rt is None:
            raise KeyError(f"{resource}.{group}/{version} is not registered")
        return rt

    def application(self) -> web.Application:
        app = web.Application(client_max_size=request_bodies.MAX_BODY_BYTES, middlewares=[self.stats.middleware])
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    # ---- the request path --------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests_total += 1
        try:
            fault = await self.faults.before(request)
            if fault is not None:
                return fault
            user = self.authenticate(request)
            target = parse_target(request.path)
            if any(name.lower().startswith("impersonate-") for name in request.headers):
                user = self.impersonation(user, request.headers, self._attributes(request, user, target))
            request[USER_KEY] = user.username
            if target is None:
                return await self._non_resource(request, user)
            return await self._resource(request, user, target)
        except ApiError as error:
            if error.code >= 500:
                log.warning("request failed", extra={"path": request.path, "error": str(error)})
            return json_response(error.status(), error.code)
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # the sandbox must answer, never hang: report and carry on
            log.exception("unexpected error", extra={"path": request.path, "method": request.method})
            return json_response(ApiError.internal(f"{type(exc).__name__}: {exc}").status(), 500)

    @staticmethod
    def _attributes(request: web.Request, user: UserInfo, target: Target | None) -> RequestAttributes:
        """What the request does, as the authorizer sees it (before impersonation: as `user`)."""
        if target is None:
            return RequestAttributes(user=user, verb=request.method.lower() if request.method != "HEAD" else "get",
                                     resource_request=False, path=request.path.rstrip("/") or "/")
        verb = verb_for(request.method, target, query_flag(request.query, "watch"))
        # RequestInfo: /api/v1/namespaces/NAME (and its status, finalize) is in namespace NAME, so a
        # RoleBinding there can grant access to the namespace itself.
        namespace = target.name if (target.group, target.resource) == ("", "namespaces") else target.namespace
        return RequestAttributes(user=user, verb=verb, resource_request=True, api_group=target.group,
                                 resource=target.resource, subresource=target.subresource, name=target.name,
                                 namespace=namespace)

    def authenticate(self, request: web.Request) -> UserInfo:
        header = request.headers.get("Authorization", "")
        if not header:
            return ANONYMOUS
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError.unauthorized()
        user = self.tokens.authenticate(token.strip())
        if user is None:
            raise ApiError.unauthorized()
        return user

    def authorize(self, attrs: RequestAttributes) -> None:
        decision = self.rbac.authorize(attrs)
        if decision.allowed:
            return
        if attrs.user.username == ANONYMOUS.username and attrs.resource_request:
            raise ApiError.unauthorized()
        raise forbidden_error(attrs, decision.reason)

    async def _non_resource(self, request: web.Request, user: UserInfo) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path.startswith("/sandbox/"):
            return await self._sandbox_admin(request, user, path)
        self.authorize(self._attributes(request, user, None))
        if path in _HEALTH_PATHS or path.startswith(("/livez/", "/readyz/", "/healthz/")):
            return web.Response(text="ok")
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "apis" and self.aggregator is not None \
                and self.aggregator.serves(parts[1], parts[2]):
            return await self.aggregator.proxy(request, user, None)
        if path == DISCOVERY_PATH:
            return json_response(self.tokens.openid_configuration())
        if path == JWKS_PATH:
            # As kube-apiserver: the key set's own media type, and 406 for a client that takes neither it nor any.
            accept = request.headers.get("Accept", "*/*")
            if not any(kind in accept for kind in (JWKS_MEDIA_TYPE, "application/*", "*/*")):
                raise ApiError(406, "NotAcceptable", f"only {JWKS_MEDIA_TYPE} is served for {JWKS_PATH}")
            return web.Response(body=orjson.dumps(self.tokens.jwks()), content_type=JWKS_MEDIA_TYPE)
        if path == "/openapi/v2" and "json" not in request.headers.get("Accept", "json"):
            raise ApiError(406, "NotAcceptable", "only application/json is served for /openapi/v2")
        document = self._discovery_document(request, path, parts)
        if document is not None:
            return document
        body = self._discovery(path)
        if body is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(body)

    async def _sandbox_admin(self, request: web.Request, user: UserInfo, path: str) -> web.StreamResponse:
        """Test controls (fault injection, dropping watches): for cluster admins only."""
        if "system:masters" not in user.groups:
            raise ApiError(403, "Forbidden", f'forbidden: User "{user.username}" cannot use the sandbox controls')
        if path == "/sandbox/faults" and request.method == "POST":
            raw = await request.read()
            self.faults.add(FaultRule.from_json(request_bodies.decode_object(raw, "application/json")))
            return json_response({"rules": len(self.faults.rules)}, 201)
        if path == "/sandbox/faults" and request.method == "DELETE":
            self.faults.clear()
            return json_response({"rules": 0})
        if path == "/sandbox/stats":
            return await self.stats.handle(request)
        if path == "/sandbox/watches" and request.method == "DELETE":
            return json_response({"dropped": self.verbs.drop_watches()})
        raise ApiError(404, "NotFound", f"no sandbox control at {request.method} {path}")

    def _served(self, *, documents: bool = False) -> list[api_discovery.Served]:
        """The group versions /apis lists: built-in types, CRDs and service-backed APIServices."""
        served = api_discovery.registry_served(self.registry, documents=documents)
        return served + self.aggregator.served() if self.aggregator is not None else served

    def _discovery_document(self, request: web.Request, path: str, parts: list[str]) -> web.Response | None:
        """/api, /apis (legacy or aggregated, as the Accept header asks), /api/v1, /apis/{group} and
        /apis/{group}/{version}; None for other paths."""
        if len(parts) > _DISCOVERY_DEPTH.get(parts[0], 0):
            return None
        if api_discovery.wants_aggregated(request.headers.get("Accept", ""), aggregated_served=len(parts) == 1):
            body = api_discovery.aggregated_core(self.registry) if path == "/api" else \
                api_discovery.aggregated_groups(self._served(documents=True))
            return api_discovery.aggregated_response(request, body)
        legacy: Any
        if path == "/api":
            legacy = api_discovery.api_versions()
        elif path == "/apis":
            legacy = api_discovery.api_group_list(self._served())
        elif len(parts) == 2 and parts[0] == "apis":
            legacy = api_discovery.api_group(self._served(), parts[1])
        else:
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            legacy = api_discovery.api_resource_list(self.registry, group, version)
        if legacy is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(legacy)

    def _discovery(self, path: str) -> Any:
        parts = path.strip("/").split("/")
        if path == "/version":
            return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-colocation-sandbox",
                    "gitCommit": __version__, "gitTreeState": "clean", "buildDate": "2026-11-22T00:00:00Z",
                    "goVersion": "go1.23", "compiler": "gc", "platform": "linux/amd64"}
        if path == "/openapi/v2":
            return openapi_documents.openapi_v2(self.registry)  # JSON only: protobuf asks are answered 406 earlier
        if path == "/openapi/v3":
            return openapi_documents.openapi_v3_root(self.registry)
        if parts[:2] == ["openapi", "v3"] and len(parts) >= 4:
            if parts[2] == "api":
                return openapi_documents.openapi_v3_group_version(self.registry, "", parts[3])
            if parts[2] == "apis" and len(parts) == 5:
                return openapi_documents.openapi_v3_group_version(self.registry, parts[3], parts[4])
        return None

    async def _resource(self, request: web.Request, user: UserInfo, target: Target) -> web.StreamResponse:
        attrs = self._attributes(request, user, target)
        verb = attrs.verb
        if self.aggregator is not None and self.aggregator.serves(target.group, target.version):
            # kube-apiserver authorizes aggregated requests itself before proxying them.
            self.authorize(attrs)
            return await self.aggregator.proxy(request, user, target)
        if target.group == "" and not target.name and target.resource == "namespaces" and target.namespace:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rt = resolve(self.registry, target)
        if verb not in rt.verbs and not target.subresource:
            raise ApiError.method_not_allowed(f"{verb} is not supported on {rt.group_resource}")
        self.authorize(attrs)
        return await self._dispatch(request, user, rt, target=target, verb=verb)

    async def _dispatch(self, request: web.Request, user: UserInfo, rt: ResourceType, *, target: Target,
                        verb: str) -> web.StreamResponse:
        ns, name, sub = target.namespace, target.name, target.subresource
        if verb == "watch":
            return await self.verbs.watch(request, rt, ns, name=name)
        special = self.special.handler(rt, sub, verb)
        if special is not None:
            return await special(request, user, rt, target=target)
        if sub == "finalize" and verb == "update":
            pass  # namespaces/finalize: PUT only, spec.finalizers and everything but the status
        elif sub and sub != "status":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rt.virtual:
            raise ApiError.method_not_allowed(f"{verb} is not supported on {rt.group_resource}")
        if verb == "get":
            return self.verbs.get(request, rt, ns, name=name)
        if verb == "list":
            return self.verbs.list_collection(request, rt, ns)
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "application/json")
        if verb == "create":
            if name or sub:
                raise ApiError.method_not_allowed("POST is only allowed on a collection")
            return self.verbs.create(request, rt, ns, body=request_bodies.decode_object(raw, content_type))
        if verb == "update":
            return self.verbs.update(request, rt, ns, name=name, subresource=sub,
                                     body=request_bodies.decode_object(raw, content_type))
        if verb == "patch":
            return self.verbs.patch(request, rt, ns, name=name, subresource=sub, raw=raw)
        options = request_bodies.decode_object(raw, content_type) if raw.strip() else {}
        if verb == "delete":
            return self.verbs.delete(request, rt, ns, name=name, body=options)
        return self.verbs.delete_collection(request, rt, ns)
