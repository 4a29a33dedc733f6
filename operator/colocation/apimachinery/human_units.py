"""Figures in units a person reads at a glance, for table columns (not for machines: they round).

CPU in cores with two decimals ("1.50", as `kubectl top` would if it showed cores), memory in the
largest binary unit that keeps it at least 1: Mi as a whole number below 1Gi ("512Mi"), else Gi or
Ti with two decimals ("1.50Gi"). Kubernetes Quantities ("1500m", "1536Mi") stay what the API
objects carry; these are only what tables show.
"""

from __future__ import annotations

_MI, _GI, _TI = 1 << 20, 1 << 30, 1 << 40


def cores(millis: int) -> str:
    return f"{millis / 1000:.2f}"


def memory(value: int) -> str:
    size = abs(value)
    if size >= _TI:
        return f"{value / _TI:.2f}Ti"
    if size >= _GI:
        return f"{value / _GI:.2f}Gi"
    return f"{round(value / _MI)}Mi"
