"""The heap trimmer: glibc's malloc_trim once a minute, and what it gave back as metrics."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from colocation.manager.heap_trim import HeapTrimmer, libc_malloc_trim, resident_bytes


def _value(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(name)
    assert value is not None
    return value


def test_a_trim_counts_the_rss_it_gave_back_and_its_time() -> None:
    rss = iter([250 << 20, 226 << 20, 226 << 20, 227 << 20])  # before, after; before, after (grew meanwhile)
    ticks = iter([10.0, 10.02, 70.0, 70.01])
    calls: list[int] = []
    registry = CollectorRegistry()

    def trim() -> int:
        calls.append(1)
        return 1

    trimmer = HeapTrimmer(trim, registry, rss=lambda: next(rss), clock=lambda: next(ticks))
    assert trimmer.trim_once() == 24 << 20
    assert trimmer.trim_once() == 0  # nothing given back is not counted as less
    assert len(calls) == 2
    assert _value(registry, "colocation_heap_trims_total") == 2
    assert _value(registry, "colocation_heap_trim_released_bytes_total") == 24 << 20
    assert abs(_value(registry, "colocation_heap_trim_seconds_total") - 0.03) < 1e-9


def test_the_trimmer_trims_each_interval_until_stopped() -> None:
    async def run() -> int:
        calls: list[int] = []
        stop, third = asyncio.Event(), asyncio.Event()

        def trim() -> int:
            calls.append(1)
            if len(calls) == 3:
                third.set()
            return 0

        trimmer = HeapTrimmer(trim, CollectorRegistry(), rss=lambda: 0, interval=0.01)
        task = asyncio.create_task(trimmer.run(stop))
        await asyncio.wait_for(third.wait(), 5.0)
        stop.set()
        await asyncio.wait_for(task, 5.0)
        return len(calls)

    assert asyncio.run(run()) in (3, 4)  # a fourth only if its interval ended before the stop was seen


def test_this_c_library_trims_and_the_rss_is_read() -> None:
    trim = libc_malloc_trim()
    assert trim is not None  # glibc, on the machines this project runs on
    assert trim() in (0, 1)
    assert resident_bytes() > 1 << 20
