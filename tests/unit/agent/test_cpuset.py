"""cpuset lists and koordlet's choice of cpus: spread over sockets, sibling threads in pairs."""

from __future__ import annotations

import pytest

from colocation.agent.cpuset import Processor, choose_cpus, format_cpuset, parse_cpuinfo, parse_cpuset


@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("", set()), ("5", {5}),
])
def test_cpuset_lists_parse_and_format_as_the_kernel_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpuset(text) == frozenset(cpus)
    assert format_cpuset(cpus) == text.strip()


@pytest.mark.parametrize("text", ["a-b", "3-1", "1-", "1,x"])
def test_garbled_cpuset_lists_are_refused(text: str) -> None:
    assert parse_cpuset(text) is None


def two_sockets_with_hyperthreads() -> list[Processor]:
    """cpus 0-3 on socket 0, 4-7 on socket 1; cpu n and n+8 are siblings (16 cpus)."""
    return [Processor(cpu=cpu, core=cpu % 8, socket=(cpu % 8) // 4, node=(cpu % 8) // 4) for cpu in range(16)]


def test_siblings_are_taken_in_pairs_alternating_sockets() -> None:
    processors = two_sockets_with_hyperthreads()
    assert choose_cpus(2, processors) == (0, 8)
    assert choose_cpus(4, processors) == (0, 4, 8, 12)
    assert choose_cpus(5, processors) == (0, 1, 4, 8, 12)  # the odd one from the next socket's turn


def test_without_siblings_cpus_are_taken_one_per_socket_in_turn() -> None:
    processors = [Processor(cpu=cpu, core=cpu, socket=cpu // 4) for cpu in range(8)]
    assert choose_cpus(3, processors) == (0, 1, 4)


def test_asking_for_more_cpus_than_there_are_chooses_none() -> None:
    assert choose_cpus(3, [Processor(cpu=0, core=0, socket=0), Processor(cpu=1, core=1, socket=0)]) == ()
    assert choose_cpus(0, [Processor(cpu=0, core=0, socket=0)]) == ()


def test_the_same_count_always_gives_the_same_cpus() -> None:
    processors = two_sockets_with_hyperthreads()
    assert choose_cpus(6, processors) == choose_cpus(6, list(reversed(processors)))


def test_cpuinfo_gives_sockets_and_cores() -> None:
    text = "".join(f"processor\t: {cpu}\nphysical id\t: {cpu // 2}\ncore id\t\t: 0\n\n" for cpu in range(4))
    processors = parse_cpuinfo(text)
    assert [p.socket for p in processors] == [0, 0, 1, 1]
    assert processors[0].core == processors[1].core != processors[2].core
    # Without topology lines (some VMs, arm64): each processor its own core on socket 0.
    assert parse_cpuinfo("processor : 0\n\nprocessor : 1\n") == (Processor(cpu=0, core=0, socket=0),
                                                                 Processor(cpu=1, core=1, socket=0))
