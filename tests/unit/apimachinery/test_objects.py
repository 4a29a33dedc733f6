"""The forms an object's parts are kept in: deflated bytes, interned string mappings."""

from __future__ import annotations

import orjson

from colocation.apimachinery.objects import deflated, inflated, interned_strings


def test_deflated_bytes_come_back_whole_and_smaller() -> None:
    body = orjson.dumps({"items": [{"name": f"pod-{index}", "cpu": f"{index}m"} for index in range(200)]})
    kept = deflated(body)
    assert inflated(kept) == body and len(kept) < len(body) / 3
    assert inflated(deflated(b"")) == b""


def test_bodies_longer_than_the_deflate_window_come_back_whole() -> None:
    """The window is 8 KiB: a list of 10,000 nodes' objects repeats itself from much further back."""
    item = orjson.dumps({"name": "node", "pods": [f"pod-{index}" for index in range(1_000)]})
    body = b"[" + b",".join(item.replace(b"node", f"node-{index}".encode()) for index in range(50)) + b"]"
    assert len(body) > 400_000 and inflated(deflated(body)) == body


def test_interned_mappings_share_their_strings_and_the_objects_own_name() -> None:
    name_one, name_two = (orjson.loads(orjson.dumps(name)) for name in ("node-1", "node-2"))
    one = interned_strings(orjson.loads(b'{"zone": "a", "hostname": "node-1", "count": 3}'), name_one)
    two = interned_strings(orjson.loads(b'{"zone": "a", "hostname": "node-2", "count": 3}'), name_two)
    assert one == {"zone": "a", "hostname": "node-1", "count": 3}
    (key_one, zone_one), (key_two, zone_two) = next(iter(one.items())), next(iter(two.items()))
    assert key_one is key_two and zone_one is zone_two
    assert one["hostname"] is name_one and two["hostname"] is name_two
