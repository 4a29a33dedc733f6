"""The one name for a Kubernetes object as decoded JSON, shared by every layer."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]  # an object (or list, or Status) as the API's JSON decodes: mutable, untyped
