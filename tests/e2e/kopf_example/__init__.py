"""A small Kopf operator for Widgets, run by the e2e tests with `kopf run handlers.py` (by path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HANDLERS = Path(__file__).parent / "handlers.py"
CRD = Path(__file__).parent / "widget-crd.yaml"


def widget_crd() -> dict[str, Any]:
    """The Widget CRD (widgets.e2e.colocation.dev, namespaced, with a status subresource)."""
    return yaml.safe_load(CRD.read_text())  # type: ignore[no-any-return]
