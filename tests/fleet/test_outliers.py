"""The robust outlier rule, over families of groups: it finds the slow host and no healthy one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fleet.records import finding, record
from workloads.fleet.load import host_from_record
from workloads.fleet.model import Figure
from workloads.fleet.outliers import MIN_GAP, bounds, group_statistics, is_outlier, robust_z


def _figure(value: float, higher_is_better: bool = True) -> Figure:
    return Figure(host="h", check="c", device=None, value=value, unit="u",
                  higher_is_better=higher_is_better)


def test_the_modified_z_score_is_iglewicz_and_hoaglins() -> None:
    # 0.6745 (x - median) / MAD: 10 below a median of 100 with MAD 2 is -3.3725.
    assert robust_z(90.0, 100.0, 2.0) == 0.6745 * -10 / 2
    assert robust_z(90.0, 100.0, 0.0) is None


def test_a_host_at_half_speed_in_a_tight_group_is_an_outlier_and_the_others_are_not() -> None:
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=s))
             for i, s in enumerate([1.0, 0.99, 1.01, 0.5])]
    _, outliers, small = group_statistics(hosts)
    assert small == []
    assert {o.figure.host for o in outliers} == {"h3"}
    assert all(o.gap > 0.4 for o in outliers)


def test_one_slow_gpu_among_its_siblings_is_named() -> None:
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpu_scale={5: 0.6} if i == 2 else None))
             for i in range(4)]
    _, outliers, _ = group_statistics(hosts)
    assert {(o.figure.host, o.figure.device) for o in outliers} == {("h2", "GPU 5")}
    assert len(outliers) == 3  # matmul, membw and transfer of that GPU
    assert {o.reason().split(" ")[1] for o in outliers} == {"5"}
    assert all("GPU 5" in o.reason() and "below the group median" in o.reason() for o in outliers)


def test_a_group_of_two_gets_no_statistics() -> None:
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=s))
             for i, s in enumerate([1.0, 0.5])]
    stats, outliers, small = group_statistics(hosts)
    assert outliers == [] and small == [hosts[0].group]
    assert all(s.median is None for s in stats)


def test_groups_are_compared_apart() -> None:
    """Four A100 hosts at 60 % of four H100 hosts are not outliers: other hardware."""
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1)) for i in range(4)]
    hosts += [host_from_record(f"a{i}", record(f"a{i}", gpus=1, scale=0.6, model="A100"))
              for i in range(4)]
    _, outliers, _ = group_statistics(hosts)
    assert outliers == []


noise = st.floats(min_value=-0.04, max_value=0.04, allow_nan=False)


@given(healthy=st.lists(noise, min_size=3, max_size=40),
       slow=st.floats(min_value=0.05, max_value=0.75),
       base=st.floats(min_value=1e-3, max_value=1e6))
def test_family_a_slow_host_among_healthy_ones_is_found_and_only_it(
        healthy: list[float], slow: float, base: float) -> None:
    """Healthy hosts within ±4 % of each other; one at 5-75 % of them: it alone is flagged."""
    values = [base * (1 + n) for n in healthy] + [base * slow]
    figures = [_figure(v) for v in values]
    median = sorted(values)[len(values) // 2] if len(values) % 2 else \
        sum(sorted(values)[len(values) // 2 - 1:len(values) // 2 + 1]) / 2
    mad_values = sorted(abs(v - median) for v in values)
    mad = mad_values[len(values) // 2] if len(values) % 2 else \
        sum(mad_values[len(values) // 2 - 1:len(values) // 2 + 1]) / 2
    flagged = [i for i, f in enumerate(figures) if is_outlier(f, median, mad)]
    assert flagged == [len(values) - 1]


@given(values=st.lists(st.floats(min_value=0.93, max_value=1.0), min_size=3, max_size=60))
def test_family_no_host_within_the_gap_is_ever_flagged(values: list[float]) -> None:
    """Whatever the spread, a figure less than MIN_GAP below the median is never an outlier."""
    import statistics

    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    for value in values:
        if (median - value) / median < MIN_GAP:
            assert is_outlier(_figure(value), median, mad) is None
    low, _ = bounds(median, mad)
    assert low <= median * (1 - MIN_GAP) + 1e-12


@given(healthy=st.lists(st.floats(min_value=0.75, max_value=1.25), min_size=3, max_size=3),
       slow=st.floats(min_value=0.05, max_value=0.45))
def test_family_a_host_at_half_speed_is_found_even_among_noisy_siblings(
        healthy: list[float], slow: float) -> None:
    """Four hosts, three of them ±25 % apart (a noisy small group): the MAD alone can hide a
    host at half speed; 40 % below the median is an outlier whatever the spread."""
    import statistics

    values = [*healthy, slow]
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    assert is_outlier(_figure(slow), median, mad) is not None


def test_conditions_count_but_are_not_ranked() -> None:
    """The battery's other-load row has a figure, but a high share is not a fast host."""
    records = [record(f"h{i}", gpus=1) for i in range(4)]
    for i, rec in enumerate(records):
        rec["findings"].append(finding("host", "host", "other load", 80.0 if i == 0 else 1.0,
                                       unit="%", verdict="warn" if i == 0 else "pass",
                                       reason="other processes used 80% of the CPU time"))
    hosts = [host_from_record(f"h{i}", r) for i, r in enumerate(records)]
    stats, outliers, _ = group_statistics(hosts)
    assert outliers == [] and not any(s.series.startswith("host") for s in stats)
    assert hosts[0].findings == [("warn", "host other load: other processes used 80% of the "
                                           "CPU time")]


def test_lower_is_better_figures_are_outliers_above_the_median() -> None:
    assert is_outlier(_figure(200.0, higher_is_better=False), 100.0, 1.0) is not None
    assert is_outlier(_figure(50.0, higher_is_better=False), 100.0, 1.0) is None
