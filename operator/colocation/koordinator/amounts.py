"""Cpu and memory amounts, the two resources the batch formula works on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colocation.apimachinery.quantity import byte_value, cpu_millis


@dataclass(frozen=True, slots=True)
class Amount:
    """Cpu in milli-cores and memory in bytes."""

    cpu: int = 0
    memory: int = 0

    @classmethod
    def of(cls, resources: Mapping[str, Any] | None) -> Amount:
        """The cpu and memory of a ResourceList ({"cpu": "2", "memory": "1Gi", ...}); others ignored."""
        return cls(*cpu_and_memory(resources))

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Amount) -> Amount:
        return Amount(self.cpu - other.cpu, self.memory - other.memory)

    def max(self, other: Amount) -> Amount:
        return Amount(max(self.cpu, other.cpu), max(self.memory, other.memory))

    def floored(self) -> Amount:
        """Negative components become 0."""
        return self.max(Amount())


def total(amounts: Iterable[Amount]) -> Amount:
    return sum(amounts, Amount())


def cpu_and_memory(resources: Mapping[str, Any] | None) -> tuple[int, int]:
    """(cpu millis, memory bytes) of a ResourceList, as `Amount.of` reads it, without building an
    Amount (a frozen dataclass costs more to build than the two numbers cost to parse)."""
    if not resources:
        return 0, 0
    cpu, memory = resources.get("cpu"), resources.get("memory")
    return cpu_millis(cpu) if cpu is not None else 0, byte_value(memory) if memory is not None else 0
