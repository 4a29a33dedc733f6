"""The one name for a Kubernetes object as decoded JSON, and the forms its parts are kept in: its
encoded form deflated, its string mappings interned."""

from __future__ import annotations

import sys
import zlib
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]  # an object (or list, or Status) as the API's JSON decodes: mutable, untyped


# Raw deflate (no header or checksum) at the fastest level, with an 8 KiB window and a small hash
# table. zlib.compress's own state (a 32 KiB window, memLevel 8) is some 270 KiB that each call
# allocates and clears: for a 5 KB NodeMetric report that took ~54 µs, against ~17 µs for these
# (measured on this project's 2-core machines), and a report's repeats lie within its last few
# KiB, so it comes out the same size (~0.9 KB). Inflating takes any raw window, up to 32 KiB. The
# bytes are kept only in this process, so the format is ours.
_DEFLATE_LEVEL = 1
_DEFLATE_WINDOW_BITS = -13
_DEFLATE_MEMORY_LEVEL = 5
_RAW_INFLATE = -15


def deflated(body: bytes) -> bytes:
    """`body` compressed, for keeping many of it in memory.

    The result is allocated at its length. orjson's output is not: it keeps the capacity its
    buffer grew to (a 6.9 KB object it wrote held 10.9 KiB of RSS).
    """
    compressor = zlib.compressobj(_DEFLATE_LEVEL, zlib.DEFLATED, _DEFLATE_WINDOW_BITS, _DEFLATE_MEMORY_LEVEL)
    return compressor.compress(body) + compressor.flush()


def inflated(kept: bytes) -> bytes:
    """The bytes `deflated` was given."""
    return zlib.decompress(kept, _RAW_INFLATE)


def interned_strings(mapping: Mapping[str, Any], own: object = None) -> dict[str, Any]:
    """A copy of `mapping` whose string keys and values are one object each process-wide
    (`sys.intern`): the labels and resources of thousands of Nodes repeat the same few. A value
    equal to the string `own` (the object's name, as the hostname label is) is `own` itself."""
    own_name = own if type(own) is str else None
    return {_interned(key): own_name if own_name is not None and value == own_name else _interned(value)
            for key, value in mapping.items()}


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value
