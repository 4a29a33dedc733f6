"""A small Kopf operator for Widgets (e2e.colocation.dev/v1), run by the e2e tests with `kopf run`.

Every kind of handler leaves a trace the test can read back through the API: handler results
in the status, a timer counter in the status, and events.
"""

from __future__ import annotations

from typing import Any

import kopf

WIDGETS = ("e2e.colocation.dev", "v1", "widgets")


@kopf.on.create(*WIDGETS)
async def create_widget(spec: kopf.Spec, name: str, body: kopf.Body, patch: kopf.Patch,
                        **_: Any) -> dict[str, Any]:
    size = int(spec["size"])
    patch.status["phase"] = "Ready"
    kopf.info(body, reason="Created", message=f"widget {name} has size {size}")
    return {"size": size, "area": size * size}  # Kopf stores this as status.create_widget


@kopf.on.update(*WIDGETS, field="spec.size")
async def resize_widget(old: Any, new: Any, body: kopf.Body, patch: kopf.Patch, **_: Any) -> dict[str, Any]:
    patch.status["phase"] = "Resized"
    kopf.info(body, reason="Resized", message=f"from {old} to {new}")
    return {"size": new, "previous": old}


@kopf.timer(*WIDGETS, interval=0.5)
async def tick(status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    patch.status["ticks"] = int(status.get("ticks", 0)) + 1


@kopf.on.delete(*WIDGETS)
async def delete_widget(name: str, body: kopf.Body, **_: Any) -> None:
    kopf.info(body, reason="Deleting", message=f"widget {name} is going away")
