"""benchmarks.promql: the PromQL subset the dashboard PNGs are computed with gives Prometheus's answers."""

from __future__ import annotations

import math

import pytest

from benchmarks import promql


def series(*points: tuple[float, str, dict[str, str], float]) -> promql.Series:
    return promql.Series((t, {"__name__": name, **labels}, value) for t, name, labels, value in points)


def at(expr: str, data: promql.Series, t: float) -> promql.Vector:
    return promql.query(promql.parse(expr), data, t)


@pytest.mark.parametrize(("text", "message"), [
    ("sum(rate(x[5m])", r"expected \)"),
    ("irate(x[5m])", "unknown function 'irate'"),
    ("x[5]", "duration"),
    ("x{a~\"b\"}", "unexpected character"),
    ("sum(x) y", "after a complete expression"),
    ("x{a=b}", "bad label matcher"),
])
def test_expressions_outside_the_subset_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(promql.PromQLError, match=message):
        promql.parse(text)


def test_metric_names_lists_every_selected_metric() -> None:
    expr = promql.parse('(sum by (a) (rate(x_total{b="1"}[1m])) / max(y)) > 0 or vector(0)')
    assert promql.metric_names(expr) == {"x_total", "y"}


def test_rate_counts_a_counter_reset_as_a_restart_from_zero() -> None:
    data = series((0, "c_total", {}, 10.0), (10, "c_total", {}, 20.0), (20, "c_total", {}, 5.0))
    assert at("rate(c_total[1m])", data, 20) == {(): pytest.approx((10 + 5) / 20)}
    assert at("increase(c_total[1m])", data, 20) == {(): pytest.approx(15)}


def test_rate_needs_two_samples_in_the_range() -> None:
    data = series((0, "c_total", {}, 1.0), (100, "c_total", {}, 5.0))
    assert at("rate(c_total[1m])", data, 100) == {}


def test_a_nan_sample_marks_the_series_stale_until_its_next_sample() -> None:
    data = series((0, "g", {}, 1.0), (5, "g", {}, math.nan), (10, "g", {}, 2.0))
    assert [at("g", data, t) for t in (0, 5, 10)] == [{(("__name__", "g"),): 1.0}, {}, {(("__name__", "g"),): 2.0}]


def test_sum_by_keeps_only_the_grouping_labels() -> None:
    data = series((0, "g", {"node": "a", "zone": "1"}, 2.0), (0, "g", {"node": "b", "zone": "1"}, 3.0),
                  (0, "g", {"node": "c", "zone": "2"}, 4.0))
    assert at("sum by (zone) (g)", data, 0) == {(("zone", "1"),): 5.0, (("zone", "2"),): 4.0}
    assert at("max(g)", data, 0) == {(): 4.0}


def test_an_instant_selector_reads_the_latest_sample_within_five_minutes() -> None:
    data = series((0, "g", {"i": "old"}, 1.0), (250, "g", {"i": "new"}, 2.0), (290, "g", {"i": "new"}, 3.0))
    assert at("g", data, 320) == {(("__name__", "g"), ("i", "new")): 3.0}


def test_histogram_quantile_interpolates_within_the_bucket() -> None:
    buckets = {"0.1": 50.0, "0.5": 90.0, "1.0": 100.0, "+Inf": 100.0}
    data = series(*((0, "h_bucket", {"le": le}, count) for le, count in buckets.items()))
    # rank 95 falls in (0.5, 1.0], which holds ranks 90..100.
    assert at("histogram_quantile(0.95, h_bucket)", data, 0) == {(("__name__", "h_bucket"),): pytest.approx(0.75)}


def test_histogram_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    data = series((0, "h_bucket", {"le": "1"}, 1.0), (0, "h_bucket", {"le": "+Inf"}, 10.0))
    (value,) = promql.histogram_quantile(0.99, {(("le", le),): c for le, c in (("1", 1.0), ("+Inf", 10.0))}).values()
    assert value == 1.0
    assert at("histogram_quantile(0.99, h_bucket)", data, 0) == {(("__name__", "h_bucket"),): 1.0}


def test_histogram_quantile_of_no_observations_is_nan() -> None:
    (value,) = promql.histogram_quantile(0.5, {(("le", "1"),): 0.0, (("le", "+Inf"),): 0.0}).values()
    assert math.isnan(value)


def test_quantile_interpolates_between_ranks() -> None:
    data = series(*((0, "g", {"i": str(v)}, float(v)) for v in (1, 2, 3, 4, 5)))
    assert at("quantile(0.9, g)", data, 0) == {(): pytest.approx(4.6)}


def test_comparisons_filter_and_or_fills_in_missing_label_sets() -> None:
    data = series((0, "g", {"i": "a"}, 0.0), (0, "g", {"i": "b"}, 2.0))
    assert at("g > 1", data, 0) == {(("__name__", "g"), ("i", "b")): 2.0}
    assert at("(sum(g) or vector(0)) < 1", data, 0) == {}
    assert at("(sum(nothing) or vector(0)) < 1", data, 0) == {(): 0.0}


def test_arithmetic_matches_series_on_labels_without_the_name() -> None:
    data = series((0, "a", {"n": "x"}, 6.0), (0, "b", {"n": "x"}, 3.0), (0, "b", {"n": "y"}, 1.0))
    assert at("a / b", data, 0) == {(("n", "x"),): 2.0}
    assert at("a * 2", data, 0) == {(("n", "x"),): 12.0}

