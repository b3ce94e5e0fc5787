"""The robust outlier rule, over families of groups: it finds the slow host and no healthy one."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.fleet.records import finding, record
from workloads.fleet.load import host_from_record
from workloads.fleet.model import Figure, Host
from workloads.fleet.outliers import (
    FAIL_GAP,
    MIN_GAP,
    bounds,
    group_statistics,
    is_outlier,
    median_without,
    robust_z,
)


def _figure(value: float, higher_is_better: bool = True) -> Figure:
    return Figure(host="h", check="c", device=None, value=value, unit="u",
                  higher_is_better=higher_is_better)


def test_the_modified_z_score_is_iglewicz_and_hoaglins_with_a_noise_floor() -> None:
    # 0.6745 (x - median) / MAD: 10 below a median of 100 with MAD 4 is -1.68625.
    assert robust_z(90.0, 100.0, 4.0) == 0.6745 * -10 / 4
    # A MAD below 2 % of the median (0 included) is taken as 2 %: defined, and not hair-trigger.
    assert robust_z(90.0, 100.0, 0.0) == robust_z(90.0, 100.0, 1.0) == 0.6745 * -10 / 2


def test_one_noisy_sibling_does_not_hide_a_host_far_below_its_best_siblings() -> None:
    """[100, 80, 100, 65]: the group's MAD (17.5) hid the 65; against the other three
    ([100, 80, 100]: median 100) it is 35 % below, a fail; the 80 is 20 % below, a warn."""
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=s))
             for i, s in enumerate([1.0, 0.8, 1.0, 0.65])]
    _, outliers, _ = group_statistics(hosts)
    levels = {(o.figure.host, o.level) for o in outliers}
    assert levels == {("h3", "fail"), ("h1", "warn")}
    assert {o.reference for o in outliers if o.figure.check == "matmul bfloat16"} == {700.0}


@pytest.mark.parametrize(("value", "level"), [(100.0, None), (95.0, None), (90.0, None),
                                              (89.0, "warn"), (75.0, "warn"), (70.1, "warn"),
                                              (70.0, "fail"), (0.0, "fail")])
def test_at_a_mad_of_0_the_gap_alone_decides_and_severity_follows_it(
        value: float, level: str | None) -> None:
    """Identical siblings (MAD 0): within 10.4 % (z 3.5 at the 2 % floor) nothing; then warn;
    from 30 % below, fail."""
    outlier = is_outlier(_figure(value), 100.0, 0.0)
    assert (outlier.level if outlier else None) == level


def test_a_reference_of_0_ranks_nothing() -> None:
    """No other host measured anything: there is no gap to speak of (their own verdicts do)."""
    assert is_outlier(_figure(0.0), 0.0, 0.0) is None
    assert is_outlier(_figure(5.0), 0.0, 0.0) is None
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=0.0)) for i in range(4)]
    stats, outliers, _ = group_statistics(hosts)
    assert outliers == [] and all(s.median == 0.0 for s in stats)


def test_a_host_at_half_speed_in_a_tight_group_fails_and_the_others_pass() -> None:
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=s))
             for i, s in enumerate([1.0, 0.99, 1.01, 0.5])]
    _, outliers, small = group_statistics(hosts)
    assert small == []
    assert {(o.figure.host, o.level) for o in outliers} == {("h3", "fail")}
    assert all(o.gap > 0.4 for o in outliers)


@given(values=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=40),
       data=st.data())
def test_family_the_median_without_some_values_is_the_median_of_the_rest(
        values: list[float], data: st.DataObject) -> None:
    removed = data.draw(st.lists(st.sampled_from(range(len(values))), unique=True,
                                 max_size=len(values)))
    rest = [v for i, v in enumerate(values) if i not in removed]
    got = median_without(sorted(values), [values[i] for i in removed])
    assert got == (statistics.median(rest) if rest else None)


def test_one_slow_gpu_among_its_siblings_is_named() -> None:
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpu_scale={5: 0.6} if i == 2 else None))
             for i in range(4)]
    _, outliers, _ = group_statistics(hosts)
    assert {(o.figure.host, o.figure.device) for o in outliers} == {("h2", "GPU 5")}
    assert len(outliers) == 3  # matmul, membw and transfer of that GPU
    assert {o.reason().split(" ")[1] for o in outliers} == {"5"}
    assert all("GPU 5" in o.reason() and "below its group's" in o.reason() for o in outliers)


def test_a_group_of_two_gets_no_statistics_but_the_fail_rule() -> None:
    """Two hosts: no median or spread, but 30 % or more worse than the other fails the worse."""
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=s))
             for i, s in enumerate([1.0, 0.5])]
    stats, outliers, small = group_statistics(hosts)
    assert small == [hosts[0].group]
    assert all(s.median is None for s in stats)
    assert {o.figure.host for o in outliers} == {"h1"}
    assert {o.level for o in outliers} == {"fail"} and len(outliers) == 4


@given(gap=st.floats(min_value=0.0, max_value=0.95), gpus=st.sampled_from([1, 2, 8]))
def test_family_a_pair_fails_the_worse_host_from_30_percent_and_nothing_below(
        gap: float, gpus: int) -> None:
    """The worse of two hosts fails from a 30 % gap on; below it no outlier, not even a warn
    (two figures cannot say which is odd); the better host never."""
    assume(abs(gap - FAIL_GAP) > 1e-6)  # at the edge itself floating point decides
    hosts = [host_from_record("a", record("a", gpus=gpus)),
             host_from_record("b", record("b", gpus=gpus, scale=1 - gap))]
    _, outliers, _ = group_statistics(hosts)
    assert {o.figure.host for o in outliers} <= {"b"}
    assert {o.level for o in outliers} <= {"fail"}
    assert bool(outliers) == (gap > FAIL_GAP)


def test_groups_are_compared_apart() -> None:
    """Four A100 hosts at 60 % of four H100 hosts are not outliers: other hardware."""
    hosts = [host_from_record(f"h{i}", record(f"h{i}", gpus=1)) for i in range(4)]
    hosts += [host_from_record(f"a{i}", record(f"a{i}", gpus=1, scale=0.6, model="A100"))
              for i in range(4)]
    _, outliers, _ = group_statistics(hosts)
    assert outliers == []


noise = st.floats(min_value=-0.04, max_value=0.04, allow_nan=False)


def _hosts(scales: list[float]) -> list[Host]:
    return [host_from_record(f"h{i}", record(f"h{i}", gpus=1, scale=s))
            for i, s in enumerate(scales)]


@given(healthy=st.lists(noise, min_size=2, max_size=40),
       slow=st.floats(min_value=0.05, max_value=0.7))
def test_family_a_slow_host_among_healthy_ones_is_found_and_only_it(
        healthy: list[float], slow: float) -> None:
    """Healthy hosts within ±4 % of each other; one at 5-70 % of them: it alone is flagged,
    in every check, and it fails where it is 30 % or more below the others' median."""
    _, outliers, _ = group_statistics(_hosts([1 + n for n in healthy] + [slow]))
    slow_host = f"h{len(healthy)}"
    assert {o.figure.host for o in outliers} == {slow_host}
    assert len(outliers) == 4  # matmul, membw, transfer and the all-reduce
    assert all(o.level == "fail" for o in outliers if o.gap >= FAIL_GAP)


@given(value=st.floats(min_value=0.0, max_value=1e6), reference=st.floats(min_value=1e-6,
                                                                            max_value=1e6),
       mad=st.floats(min_value=0.0, max_value=1e6))
def test_family_no_figure_within_the_gap_is_ever_flagged(
        value: float, reference: float, mad: float) -> None:
    """Whatever the spread, a figure less than MIN_GAP below the reference is never an
    outlier, one FAIL_GAP or more below always fails, and the bounds say the same."""
    outlier = is_outlier(_figure(value), reference, mad)
    gap = (reference - value) / reference
    if gap < MIN_GAP:
        assert outlier is None
    if gap >= FAIL_GAP:
        assert outlier is not None and outlier.level == "fail"
    low, _ = bounds(reference, mad)
    assert reference * (1 - FAIL_GAP) - 1e-9 * reference <= low
    assert low <= reference * (1 - MIN_GAP) + 1e-9 * reference


@given(healthy=st.lists(st.floats(min_value=0.75, max_value=1.25), min_size=3, max_size=3),
       slow=st.floats(min_value=0.05, max_value=0.45))
def test_family_a_host_at_half_speed_fails_even_among_noisy_siblings(
        healthy: list[float], slow: float) -> None:
    """Four hosts, three of them ±25 % apart (a noisy small group, a MAD wide enough to hide
    anything): a host 40 % or more below the others' median fails whatever the spread."""
    _, outliers, _ = group_statistics(_hosts([*healthy, slow]))
    assert {(o.figure.host, o.level) for o in outliers if o.figure.host == "h3"} == {("h3", "fail")}


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
