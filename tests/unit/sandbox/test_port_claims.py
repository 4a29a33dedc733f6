"""Ports handed to children: outside the kernel's ephemeral range, never twice, never one in use."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

from colocation_sandbox.launcher.port_claims import (
    CLAIM_SECONDS,
    LOWEST_PORT,
    binds,
    claim,
    ephemeral_range,
    free_port,
    pickable_ports,
)

LINUX_DEFAULT = (32768, 60999)


def test_ports_are_picked_outside_the_ephemeral_range_and_bind(tmp_path: Path) -> None:
    picked = [free_port(claims_dir=tmp_path, ephemeral=LINUX_DEFAULT) for _ in range(50)]
    assert all(LOWEST_PORT <= port < LINUX_DEFAULT[0] or LINUX_DEFAULT[1] < port <= 65535 for port in picked)
    assert len(set(picked)) == len(picked)
    assert all(binds("127.0.0.1", port) for port in picked)


def test_two_pickers_with_the_same_luck_get_different_ports(tmp_path: Path) -> None:
    # Two processes whose random picks coincide: the claim file sends the second one on.
    first = free_port(claims_dir=tmp_path, ephemeral=LINUX_DEFAULT, rng=random.Random(7))
    second = free_port(claims_dir=tmp_path, ephemeral=LINUX_DEFAULT, rng=random.Random(7))
    assert first != second
    assert {first, second} <= {int(path.name) for path in tmp_path.iterdir()}


def test_when_few_ports_are_left_the_kernels_pick_is_claimed_too(tmp_path: Path) -> None:
    ephemeral = (LOWEST_PORT + 2, 65535)  # only two ports to pick from outside it
    picked = [free_port(claims_dir=tmp_path, ephemeral=ephemeral) for _ in range(6)]
    assert len(set(picked)) == 6
    assert sum(port < LOWEST_PORT + 2 for port in picked) <= 2
    assert {int(path.name) for path in tmp_path.iterdir()} == set(picked)


def test_a_claim_is_held_for_its_time_then_taken_over(tmp_path: Path) -> None:
    assert claim(tmp_path, 20000, now=1_000.0)
    os.utime(tmp_path / "20000", (1_000.0, 1_000.0))
    assert not claim(tmp_path, 20000, now=1_000.0 + CLAIM_SECONDS - 1)
    assert claim(tmp_path, 20000, now=1_000.0 + CLAIM_SECONDS + 1)
    assert not claim(tmp_path, 20000, now=1_000.0 + CLAIM_SECONDS + 1)  # the takeover is a fresh claim


def test_a_port_something_listens_on_does_not_bind() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert not binds("127.0.0.1", listener.getsockname()[1])


def test_the_ephemeral_range_is_read_from_the_kernel_or_assumed_to_be_linuxs_default(tmp_path: Path) -> None:
    given = tmp_path / "ip_local_port_range"
    given.write_text("40000\t50000\n")
    assert ephemeral_range(given) == (40000, 50000)
    given.write_text("garbage\n")
    assert ephemeral_range(given) == LINUX_DEFAULT
    assert ephemeral_range(tmp_path / "missing") == LINUX_DEFAULT


def test_pickable_ports_are_those_from_the_lowest_up_outside_the_ephemeral_range() -> None:
    assert pickable_ports(LINUX_DEFAULT) == [range(LOWEST_PORT, 32768), range(61000, 65536)]
    assert pickable_ports((1024, 65535)) == []
    assert pickable_ports((LOWEST_PORT, 60000)) == [range(60001, 65536)]
