"""The prod pods' peak predictor: a decaying histogram percentile, a safety margin, a cold start."""

from __future__ import annotations

import math

import pytest

from colocation.agent.aggregate import Usage
from colocation.agent.peak_predictor import DecayingHistogram, PredictorOptions, ProdPeakPredictor

GI = 2**30
HOUR = 3600.0
WEB = ("shop", "web")
API = ("shop", "api")


def histogram(half_life: float = HOUR) -> DecayingHistogram:
    return DecayingHistogram(first_bucket=25, max_value=1024 * 1000, growth=1.05, half_life=half_life)


def bound_of(h: DecayingHistogram, value: float) -> float:
    """The upper bound of the bucket holding `value`: what a percentile landing there answers."""
    return min(bound for bound in h.bounds if bound > value)


def test_a_percentile_is_the_upper_bound_of_its_bucket_never_below_what_was_seen() -> None:
    h = histogram()
    for value in range(1, 101):
        h.add(value * 100, at=0)
    p95 = h.percentile(0.95)
    assert p95 == bound_of(h, 9500)
    assert 9500 < p95 <= 9500 * 1.05
    assert h.percentile(1.0) == bound_of(h, 10000)


def test_nothing_seen_predicts_nothing() -> None:
    assert histogram().percentile(0.95) is None


def test_recent_samples_weigh_more_by_the_half_life() -> None:
    h = histogram()
    for _ in range(50):
        h.add(5000, at=0)
    for _ in range(50):
        h.add(1000, at=HOUR)  # one half-life later: each weighs twice as much
    # 1000's bucket holds 100 of 150 units of weight: two thirds.
    assert h.percentile(0.6) == bound_of(h, 1000)
    assert h.percentile(0.7) == bound_of(h, 5000)


def test_a_load_that_went_away_fades_out() -> None:
    h = histogram()
    for _ in range(1000):
        h.add(50_000, at=0)
    for second in range(100):
        h.add(2000, at=20 * HOUR + second)  # 20 half-lives later: the old peak weighs 2^-20 as much
    assert h.percentile(0.95) == bound_of(h, 2000)


def test_weights_are_rescaled_so_months_of_samples_never_overflow() -> None:
    h = histogram(half_life=60.0)
    for minute in range(60 * 24 * 30):  # a month of minutes: 43,200 half-lives
        h.add(3000 if minute % 2 else 1000, at=minute * 60.0)
    # The last sample (3000) weighs 1, the one before (1000) 1/2, then 1/4...: 1000 holds a third.
    assert h.percentile(0.33) == bound_of(h, 1000)
    assert h.percentile(0.34) == bound_of(h, 3000)
    assert math.isfinite(sum(h._weights))


def test_memory_is_bounded_by_the_buckets_whatever_the_values() -> None:
    h = histogram()
    size = len(h)
    for value in (0, -5, 1, 10**12, float(2**62)):
        h.add(value, at=0)
    assert len(h) == size
    assert h.percentile(1.0) == h.bounds[-1]  # beyond max_value: the last bucket


def test_a_clock_stepped_back_is_survived() -> None:
    h = histogram()
    h.add(1000, at=10_000 * HOUR)
    h.add(9000, at=0)  # 10,000 half-lives before: no weight to speak of
    assert h.percentile(0.99) == bound_of(h, 1000)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="growth"):
        DecayingHistogram(first_bucket=25, max_value=1000, growth=1.0, half_life=HOUR)


# ---- the predictor --------------------------------------------------------------------------------

def predictor(cold_start: float = 600.0) -> ProdPeakPredictor:
    return ProdPeakPredictor(PredictorOptions(cold_start=cold_start))


REQUESTS = {WEB: Usage(4000, 8 * GI), API: Usage(2000, 2 * GI)}


def steady(p: ProdPeakPredictor, seconds: int, web: tuple[int, int] = (1000, 2 * GI),
           api: tuple[int, int] = (500, GI)) -> None:
    for second in range(seconds):
        p.observe(float(second), [(WEB, *web), (API, *api)])


def test_no_history_no_prediction() -> None:
    assert predictor().reclaimable(0.0, REQUESTS) is None


def test_reclaimable_is_requests_minus_the_predicted_peak_with_its_margin() -> None:
    p = predictor()
    steady(p, 700)
    cpu_peak = math.ceil(bound_of(p.cpu, 1500) * 1.1)  # p95 of the prod total, + 10 %
    memory_peak = math.ceil(min(b for b in p.memory.bounds if b > 3 * GI) * 1.1)
    assert p.reclaimable(700.0, REQUESTS) == Usage(6000 - cpu_peak, 10 * GI - memory_peak)


def test_pods_in_their_cold_start_reclaim_nothing() -> None:
    p = predictor(cold_start=600.0)
    steady(p, 300)
    assert p.reclaimable(300.0, REQUESTS) == Usage(0, 0)  # both pods cold: their requests are the peak
    # A prod pod the samples never showed (no cgroup yet) stays cold: its request counts as peak.
    steady(p, 700)
    late = {**REQUESTS, ("shop", "new"): Usage(1000, GI)}
    assert p.reclaimable(700.0, late) == p.reclaimable(700.0, REQUESTS)


def test_usage_above_the_requests_reclaims_zero_not_a_negative_amount() -> None:
    p = predictor(cold_start=0.0)
    steady(p, 10, web=(9000, 20 * GI))
    assert p.reclaimable(10.0, REQUESTS) == Usage(0, 0)


def test_a_sample_with_an_unmeasured_prod_cpu_adds_no_cpu() -> None:
    p = predictor(cold_start=0.0)
    p.observe(0.0, [(WEB, None, 2 * GI), (API, 500, GI)])  # web's first reading: no rate yet
    assert p.cpu.empty and not p.memory.empty
    assert p.reclaimable(0.0, REQUESTS) is None


def test_short_spikes_do_not_move_the_cpu_peak() -> None:
    p = predictor(cold_start=0.0)
    for second in range(1000):
        spike = second % 50 == 0  # 2 % of the samples
        p.observe(float(second), [(WEB, 3900 if spike else 1000, 2 * GI)])
    assert p.peak(1000.0, {WEB: REQUESTS[WEB]}) == Usage(math.ceil(bound_of(p.cpu, 1000) * 1.1),
                                                          math.ceil(min(b for b in p.memory.bounds
                                                                        if b > 2 * GI) * 1.1))


def test_only_the_latest_samples_pods_are_remembered() -> None:
    p = predictor()
    p.observe(0.0, [(WEB, 1000, GI), (API, 500, GI)])
    p.observe(1.0, [(WEB, 1000, GI)])
    assert set(p._first_seen) == {WEB}


@pytest.mark.parametrize("value", [0.0, 24.9, 25.0, 26.25, 1000.0, 1019.3580054985853, 123456.7, 1023999.0])
def test_each_value_lands_in_the_bucket_whose_range_holds_it(value: float) -> None:
    h = histogram()
    h.add(value, at=0)
    (index,) = [i for i, weight in enumerate(h._weights) if weight]
    assert (h.bounds[index - 1] if index else 0.0) <= value < h.bounds[index]
