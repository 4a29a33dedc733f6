"""The one factor every test deadline and tight interval is scaled by.

COLOCATION_E2E_TIME_FACTOR (default 3): a loaded 2-core machine must not fail a test that waits
on a condition, and speed targets are the benchmarks' business.
"""

from __future__ import annotations

import os

TIME_FACTOR = float(os.environ.get("COLOCATION_E2E_TIME_FACTOR", "3"))
