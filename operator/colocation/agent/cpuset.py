"""cpuset lists ("0-3,8") and koordlet's choice of the cpus best-effort pods keep. Pure.

When CPU suppress shrinks the best-effort pods to N cpus, which N matters: koordlet spreads
them over the NUMA nodes / sockets (largest first) and takes hyper-thread siblings in pairs, so
that best-effort work shares as few physical cores with latency-sensitive work as it can. The
choice is a function of the cpu topology only, so the same N always gives the same cpus (no
jitter from one second to the next).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True, kw_only=True)
class Processor:
    """One logical cpu and where it sits."""

    cpu: int
    core: int  # the physical core (hyper-thread siblings share it)
    socket: int
    node: int = 0  # the NUMA node; the socket where the kernel does not say


def parse_cpuset(text: str) -> frozenset[int] | None:
    """The cpus of a cpuset list ("0-3,8,10-11"); empty text is the empty set; None when garbled."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            return None
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            return None
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpuset(cpus: Iterable[int]) -> str:
    """The kernel's own spelling of a cpu set: sorted ranges ("0-3,8"), so a read-back compares equal."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    start = previous = None
    for cpu in [*ordered, None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)


def choose_cpus(count: int, processors: Sequence[Processor]) -> tuple[int, ...]:
    """`count` cpus of `processors` as koordlet picks them (empty if there are fewer).

    The processors are grouped by (NUMA node, socket); groups are visited round-robin, largest
    first. The first rounds take a pair of siblings (two cpus of one core) from each group while
    two or more are still wanted; the remaining ones are taken one per group.
    """
    if count <= 0 or len(processors) < count:
        return ()
    groups: dict[tuple[int, int], list[Processor]] = {}
    for processor in processors:
        groups.setdefault((processor.node, processor.socket), []).append(processor)
    buckets = [sorted(group, key=lambda p: (p.core, p.cpu)) for group in groups.values()]
    buckets.sort(key=lambda bucket: (-len(bucket), bucket[0].cpu))
    chosen: list[int] = []
    used: set[int] = set()
    need = count

    def take(*picked: Processor) -> None:
        nonlocal need
        for processor in picked:
            chosen.append(processor.cpu)
            used.add(processor.cpu)
        need -= len(picked)

    index, progress_mark = 0, -1
    while need > 1:
        if index == 0:  # a whole round without a pair found: no sibling pairs left
            if progress_mark == need:
                break
            progress_mark = need
        bucket = buckets[index]
        for first, second in itertools.pairwise(bucket):
            if first.cpu not in used and second.cpu not in used and first.core == second.core:
                take(first, second)
                break
        index = (index + 1) % len(buckets)
    start, progress_mark = index, -1
    while need > 0:
        if index == start:
            if progress_mark == need:
                break
            progress_mark = need
        free = next((processor for processor in buckets[index] if processor.cpu not in used), None)
        if free is not None:
            take(free)
        index = (index + 1) % len(buckets)
    return tuple(sorted(chosen))


def parse_cpuinfo(text: str) -> tuple[Processor, ...]:
    """The processors of /proc/cpuinfo (`processor`, `physical id`, `core id`); a processor
    without topology lines (some VMs, arm64) is its own core on socket 0."""
    processors: list[Processor] = []
    fields: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if line.strip():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
            continue
        cpu = fields.get("processor", "")
        if cpu.isdigit():
            socket = fields.get("physical id", "0")
            core = fields.get("core id", cpu)
            socket_id = int(socket) if socket.isdigit() else 0
            core_id = int(core) if core.isdigit() else int(cpu)
            # Core ids repeat across sockets: make them unique per socket.
            processors.append(Processor(cpu=int(cpu), core=socket_id * 100_000 + core_id, socket=socket_id,
                                        node=socket_id))
        fields = {}
    return tuple(sorted(processors))
