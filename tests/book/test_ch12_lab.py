"""Chapter 12's interleaved timing and the time ratio's interval."""

import math

import pytest
from scipy import stats

from vitbook.book.ch12_lab import interleaved_times, time_ratio


def test_jobs_alternate_their_order_round_by_round():
    calls = []
    jobs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    ticks = iter(range(100))
    times = interleaved_times(jobs, rounds=3, clock=lambda: next(ticks))
    assert calls == list("abc" + "cba" + "abc")
    assert times == {name: [1, 1, 1] for name in "abc"}


def test_interleaved_times_needs_rounds():
    with pytest.raises(ValueError, match="rounds >= 1"):
        interleaved_times({"a": lambda: None}, rounds=0)


def test_the_ratio_is_the_geometric_mean_with_a_t_interval():
    a, b = [2.0, 4.0, 2.0, 4.0], [1.0, 1.0, 1.0, 1.0]
    r = time_ratio(a, b)
    logs = [math.log(2), math.log(4)] * 2
    mean = sum(logs) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 3)
    half = stats.t.ppf(0.975, 3) * sd / 2
    assert r.ratio == pytest.approx(math.sqrt(8))
    assert (r.low, r.high) == pytest.approx(
        (math.exp(mean - half), math.exp(mean + half))
    )
    assert r.n == 4 and r.excludes(1.0) and not r.excludes(3.0)
    assert "95% CI" in str(r)


def test_the_ratio_is_paired_round_by_round():
    # Both models slow down together in the busy rounds: the ratio stays exactly 1.1.
    b = [1.0, 3.0, 1.0, 5.0, 2.0]
    r = time_ratio([1.1 * x for x in b], b)
    assert r.ratio == pytest.approx(1.1)
    assert r.high - r.low == pytest.approx(0, abs=1e-9)


def test_time_ratio_refuses_unpaired_or_too_few_times():
    with pytest.raises(ValueError, match="equally long"):
        time_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        time_ratio([1.0, 0.0], [1.0, 1.0])
