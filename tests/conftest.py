"""Settings shared by every test."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Our machines are shared and noisy: generation speed is not what these properties test.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# CI explores the same examples on every run, so a red run can be reproduced.
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
