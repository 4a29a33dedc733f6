"""JSON merge patch (RFC 7386): the one merge of JSON documents that every layer uses.

The API server applies `application/merge-patch+json` bodies with it; colocation-config merges a
node strategy over the cluster strategy with it, as Koordinator merges slo-controller-config.
"""

from __future__ import annotations

import copy
from typing import Any


def json_merge_patch(target: Any, patch: Any) -> Any:
    """Objects merge member by member, null removes a member, anything else replaces (copied)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result
