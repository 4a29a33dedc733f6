"""The batch formula under its public name: `from colocation.noderesource import calculate_batch_resources`.

Users import it from here, so the name stays; the formula itself is Koordinator's model and
lives in colocation.koordinator.batch_formula, which code inside the package imports directly.
"""

from __future__ import annotations

from colocation.koordinator.batch_formula import (
    BATCH_CPU,
    BATCH_MEMORY,
    RESERVATION_ANNOTATION,
    calculate_batch_resources,
    count_cpus,
    reservation,
)

__all__ = ["BATCH_CPU", "BATCH_MEMORY", "RESERVATION_ANNOTATION", "calculate_batch_resources", "count_cpus",
           "reservation"]
