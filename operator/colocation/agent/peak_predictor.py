"""How much prod pods requested but will not use: a decaying-histogram peak predictor. Pure.

The NodeMetric's `prodReclaimableMetric`, on which Mid-tier resources are built, comes from
here: koordlet's prediction in outline, in a smaller model of our own. `ProdPeakPredictor` puts
the prod pods' total usage into one `DecayingHistogram` each for cpu and memory; the predicted
peak is a high percentile plus a margin, and a pod younger than the cold start counts its whole
request. Reclaimable is Σ prod requests minus the peak, floored at 0; None before a first
measured sample. Nothing is checkpointed. Memory is bounded; time is the caller's.

The model and its numbers: docs/architecture.md#mid-tier-resources
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from colocation.agent.aggregate import Usage

ProdPodKey = tuple[str, str]  # (namespace, name)

# Rescale the weights once the newest one exceeds 2^this: floats keep ~15 digits, and weights of
# samples more than ~50 half-lives old are negligible next to the newest anyway.
_MAX_EXPONENT = 50.0
_EPSILON = 1e-10  # of the total weight: a bucket lighter than this is dropped when rescaling


class DecayingHistogram:
    """Weights of values in exponentially growing buckets; a later sample weighs 2^(Δt/half_life) more.

    Bucket 0 holds values below `first_bucket`, bucket i values in [first_bucket·growth^(i-1),
    first_bucket·growth^i); values at or above `max_value` go to the last bucket.
    """

    def __init__(self, *, first_bucket: float, max_value: float, growth: float, half_life: float) -> None:
        if first_bucket <= 0 or max_value <= first_bucket or growth <= 1 or half_life <= 0:
            raise ValueError("need 0 < first_bucket < max_value, growth > 1 and a positive half_life")
        count = math.ceil(math.log(max_value / first_bucket, growth)) + 1
        self.bounds = tuple(first_bucket * growth**index for index in range(count))  # each bucket's upper bound
        self.half_life = half_life
        self._weights = [0.0] * count
        self._total = 0.0
        self._reference: float | None = None  # the time whose samples weigh 1

    def __len__(self) -> int:
        return len(self._weights)

    @property
    def empty(self) -> bool:
        return self._total <= 0

    def _bucket(self, value: float) -> int:
        if value < self.bounds[0]:
            return 0
        last = len(self.bounds) - 1
        if value >= self.bounds[last - 1]:
            return last
        index = min(max(int(math.log(value / self.bounds[0], self.bounds[1] / self.bounds[0])) + 1, 1), last)
        # Float logs may land one off at a boundary: settle on the bucket whose range holds value.
        while value >= self.bounds[index]:
            index += 1
        while value < self.bounds[index - 1]:
            index -= 1
        return index

    def add(self, value: float, at: float) -> None:
        if self._reference is None:
            self._reference = at
        exponent = (at - self._reference) / self.half_life
        if exponent > _MAX_EXPONENT:
            self._rescale(at)
            exponent = 0.0
        weight = 2.0 ** max(exponent, -_MAX_EXPONENT)  # a clock stepped far back: a sample of no weight
        self._weights[self._bucket(max(value, 0.0))] += weight
        self._total += weight

    def _rescale(self, at: float) -> None:
        assert self._reference is not None
        factor = 2.0 ** (-(at - self._reference) / self.half_life)
        self._weights = [weight * factor for weight in self._weights]
        self._total = sum(self._weights)
        floor = self._total * _EPSILON
        self._weights = [weight if weight >= floor else 0.0 for weight in self._weights]
        self._total = sum(self._weights)
        self._reference = at

    def percentile(self, fraction: float) -> float | None:
        """The upper bound of the bucket where the cumulative weight reaches `fraction` of the total."""
        if self.empty:
            return None
        threshold = fraction * self._total
        cumulative = 0.0
        for bound, weight in zip(self.bounds, self._weights, strict=True):
            cumulative += weight
            if weight > 0 and cumulative >= threshold:
                return bound
        return self.bounds[-1]


@dataclass(frozen=True, kw_only=True)
class PredictorOptions:
    cpu_half_life: float = 12 * 3600.0
    memory_half_life: float = 24 * 3600.0
    cpu_percentile: float = 0.95
    memory_percentile: float = 0.98
    safety_margin_percent: int = 10
    cold_start: float = 3600.0  # seconds a prod pod is seen before its request may be reclaimed


class ProdPeakPredictor:
    """The prod pods' predicted peak and what their requests leave beyond it, from the samples."""

    def __init__(self, options: PredictorOptions | None = None) -> None:
        self.options = options or PredictorOptions()
        self.cpu = DecayingHistogram(first_bucket=25, max_value=1024 * 1000, growth=1.05,
                                     half_life=self.options.cpu_half_life)
        self.memory = DecayingHistogram(first_bucket=5 * 2**20, max_value=2 * 2**40, growth=1.05,
                                        half_life=self.options.memory_half_life)
        self._first_seen: dict[ProdPodKey, float] = {}

    def observe(self, at: float, prod: Iterable[tuple[ProdPodKey, int | None, int]]) -> None:
        """One sample of the prod pods: (pod, cpu millis or None when unmeasured, memory bytes) each.

        The cpu total is left out of a sample where a prod pod's cpu was not measured (its first
        reading): an incomplete total would understate the peak.
        """
        pods = list(prod)
        self._first_seen = {key: self._first_seen.get(key, at) for key, _, _ in pods}
        cpus = [cpu for _, cpu, _ in pods]
        if None not in cpus:
            self.cpu.add(float(sum(cpu for cpu in cpus if cpu is not None)), at)
        self.memory.add(float(sum(memory for _, _, memory in pods)), at)

    def peak(self, at: float, requests: Mapping[ProdPodKey, Usage]) -> Usage | None:
        """The predicted peak of the prod pods whose requests are given; None without history."""
        cpu, memory = self.cpu.percentile(self.options.cpu_percentile), \
            self.memory.percentile(self.options.memory_percentile)
        if cpu is None or memory is None:
            return None
        ratio = (100 + self.options.safety_margin_percent) / 100
        cold = [request for key, request in requests.items()
                if at - self._first_seen.get(key, at) < self.options.cold_start]
        return Usage(math.ceil(cpu * ratio) + sum(request.cpu_millis for request in cold),
                     math.ceil(memory * ratio) + sum(request.memory_bytes for request in cold))

    def reclaimable(self, at: float, requests: Mapping[ProdPodKey, Usage]) -> Usage | None:
        """Σ prod requests - predicted peak, floored at 0 per resource; None without history."""
        peak = self.peak(at, requests)
        if peak is None:
            return None
        cpu = sum(request.cpu_millis for request in requests.values())
        memory = sum(request.memory_bytes for request in requests.values())
        return Usage(max(cpu - peak.cpu_millis, 0), max(memory - peak.memory_bytes, 0))
