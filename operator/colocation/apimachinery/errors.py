"""API errors carried as Kubernetes `Status` objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One reason an object is invalid: a field path and what is wrong with it."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"


@dataclass
class ApiError(Exception):
    """An error the API answers with: HTTP code, machine-readable reason, human message."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    # Constructors for the errors Kubernetes uses, with its wording, so clients that parse
    # messages (kubectl does) behave as they would against a real cluster.

    @classmethod
    def not_found(cls, group: str, resource: str, name: str) -> ApiError:
        qualified = f"{resource}.{group}" if group else resource
        return cls(404, "NotFound", f'{qualified} "{name}" not found',
                   _details(group, resource, name))

    @classmethod
    def already_exists(cls, group: str, resource: str, name: str) -> ApiError:
        qualified = f"{resource}.{group}" if group else resource
        return cls(409, "AlreadyExists", f'{qualified} "{name}" already exists',
                   _details(group, resource, name))

    @classmethod
    def conflict(cls, group: str, resource: str, name: str, *, why: str) -> ApiError:
        qualified = f"{resource}.{group}" if group else resource
        return cls(409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
                   _details(group, resource, name))

    @classmethod
    def invalid(cls, group: str, kind: str, name: str, *, causes: list[Cause]) -> ApiError:
        """422 Invalid as apimachinery's NewInvalid words it: one cause plainly, several (told once
        each) in brackets; an empty name or group is left out of the details."""
        qualified = f"{kind}.{group}" if group else kind
        told = list(dict.fromkeys(f"{c.field}: {c.message}" for c in causes))
        summary = "" if not told else f": {told[0]}" if len(told) == 1 else f": [{', '.join(told)}]"
        details = {**_details(group, kind, name),
                   "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes]}
        return cls(422, "Invalid", f'{qualified} "{name}" is invalid{summary}', details)

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def unauthorized(cls, message: str = "Unauthorized") -> ApiError:
        return cls(401, "Unauthorized", message)

    @classmethod
    def forbidden(cls, user: str, verb: str, resource: str = "", *, group: str = "", name: str = "",
                  namespace: str = "", why: str = "", subresource: str = "", path: str = "") -> ApiError:
        """A denied request, worded as kube-apiserver words it (`path` for non-resource requests)."""
        if path:
            message, details = f'forbidden: User "{user}" cannot {verb} path "{path}"', {}
        else:
            what = f"{resource}.{group}" if group else resource
            target = f' "{name}"' if name else ""
            full = f"{resource}/{subresource}" if subresource else resource
            scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            message = f'{what}{target} is forbidden: User "{user}" cannot {verb} resource "{full}" ' \
                      f'in API group "{group}"{scope}'
            details = _details(group, resource, name)
        if why:
            message += f": {why}"
        return cls(403, "Forbidden", message, details)

    @classmethod
    def gone(cls, message: str) -> ApiError:
        return cls(410, "Expired", message)

    @classmethod
    def method_not_allowed(cls, message: str) -> ApiError:
        return cls(405, "MethodNotAllowed", message)

    @classmethod
    def unsupported_media_type(cls, content_type: str) -> ApiError:
        return cls(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                   f"accepted media types include: application/json, application/merge-patch+json, "
                   f"application/json-patch+json, application/strategic-merge-patch+json, "
                   f"application/apply-patch+yaml (got {content_type!r})")

    @classmethod
    def too_large(cls, limit: int) -> ApiError:
        return cls(413, "RequestEntityTooLarge", f"the request body exceeds the limit of {limit} bytes")

    @classmethod
    def too_many_requests(cls, message: str, retry_after: int = 1) -> ApiError:
        return cls(429, "TooManyRequests", message, {"retryAfterSeconds": retry_after})

    @classmethod
    def service_unavailable(cls, message: str, retry_after: int | None = None) -> ApiError:
        """503; with `retry_after`, the server's answer carries a Retry-After header, on which
        client-go retries any request (up to 10 times), writes included."""
        return cls(503, "ServiceUnavailable", message,
                   {"retryAfterSeconds": retry_after} if retry_after is not None else {})

    @classmethod
    def internal(cls, message: str) -> ApiError:
        return cls(500, "InternalError", message)


def success_status(code: int = 0, message: str = "", details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Status that reports success (an eviction, a binding, a stored batch), in the order of the
    Go type's fields; what is zero is left out, as upstream leaves it out."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if message:
        body["message"] = message
    if details:
        body["details"] = details
    if code:
        body["code"] = code
    return body


def _details(group: str, resource: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": resource}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details
