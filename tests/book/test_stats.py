"""The comparison claims: paired differences over seeds, baselines, slopes and trends.

Every number below is worked out by hand in the comment above its assertion.
"""

import dataclasses
import math

import pytest

from vitbook.book import settings, stats


@pytest.fixture(autouse=True)
def cpu_setting(monkeypatch):
    """The cpu setting, where a false claim stops the chapter, unless a test changes it."""
    monkeypatch.delenv("BOOK_DRY_RUN", raising=False)
    monkeypatch.setenv("BOOK_SETTING", "cpu")


# Three seeds; differences 2, 1, 3: mean 2, sample SD 1, SE 1/sqrt(3) = 0.577.
CLEAR_A, CLEAR_B = [80.0, 82.0, 84.0], [78.0, 81.0, 81.0]
# Differences 1, -1, 1: mean 1/3, variance (4/9 + 16/9 + 4/9) / 2 = 4/3, SE 2/3.
NOISY_A, NOISY_B = [80.0, 81.0, 79.0], [79.0, 82.0, 78.0]


def test_paired_difference_is_the_mean_and_standard_error_of_the_differences():
    diff = stats.paired_difference(CLEAR_A, CLEAR_B)
    assert diff.n == 3 and diff.mean == pytest.approx(2.0)
    assert diff.se == pytest.approx(1 / math.sqrt(3))
    assert diff.t == pytest.approx(2 * math.sqrt(3))  # 3.464
    assert str(diff) == "+2.00 ± 0.58 points (paired, n=3, 2 SE = 1.15)"
    noisy = stats.paired_difference(NOISY_A, NOISY_B)
    assert noisy.mean == pytest.approx(1 / 3) and noisy.se == pytest.approx(2 / 3)
    assert noisy.t == pytest.approx(0.5)
    assert noisy.describe("%", digits=1) == "+0.3 ± 0.7 % (paired, n=3, 2 SE = 1.3)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        diff.mean = 0.0


def test_identical_differences_have_no_spread():
    same = stats.paired_difference([3.0, 4.0], [1.0, 2.0])  # differences 2, 2
    assert same.se == 0 and same.t == math.inf
    tie = stats.paired_difference([1.0, 2.0], [1.0, 2.0])
    assert tie.se == 0 and tie.t == 0


@pytest.mark.parametrize(
    "a, b, match",
    [
        ([1.0], [0.0], "at least 2 seeds.*got 1"),
        ([1.0, 2.0, 3.0], [0.0, 1.0], "a has 3, b has 2"),
        ([], [], "at least one seed"),
        ([1.0, math.nan], [0.0, 1.0], "not a finite number"),
    ],
)
def test_paired_difference_needs_two_seeds_of_each(a, b, match):
    with pytest.raises(ValueError, match=match):
        stats.paired_difference(a, b)


# Five seeds (MIN_SEEDS). FIVE: differences 2, 1, 3, 2, 2: mean 2, variance 2/4, SE
# sqrt(0.5 / 5) = 0.316, t = 6.32 on 4 df, two-sided p = 0.0032; t(0.975, 4) = 2.776, so
# the 95% interval is 2 -+ 2.776 * 0.316 = [1.12, 2.88].
FIVE_A, FIVE_B = [82.0, 81.0, 83.0, 82.0, 82.0], [80.0] * 5
# NOISY5: differences 1, -1, 2, -2, 1: mean 0.2, variance 10.8 / 4 = 2.7, SE 0.735,
# t = 0.27, p = 0.80, interval [-1.84, +2.24].
NOISY5_A, NOISY5_B = [81.0, 79.0, 82.0, 78.0, 81.0], [80.0] * 5
# TWO_SE: differences 3, 0, 3, 0, 4: mean 2, variance 14 / 4 = 3.5, SE 0.837: beyond two
# standard errors (1.67), yet t = 2.39 < 2.776 (p = 0.075): not significant.
TWO_SE_A, TWO_SE_B = [83.0, 80.0, 83.0, 80.0, 84.0], [80.0] * 5


def test_beats_is_a_two_sided_paired_t_test_at_five_percent(capsys):
    assert stats.claim_beats("A beats B", FIVE_A, FIVE_B) is True
    assert capsys.readouterr().out == (
        "Checked: A beats B [+2.00 points, 95% CI [+1.12, +2.88], t = 6.32, "
        "p = 0.0032 (paired t-test, n=5)]\n"
    )
    # Two standard errors were the old rule; the t-test asks for more.
    with pytest.raises(settings.ClaimError, match=r"t = 2\.39, p = 0\.075"):
        stats.claim_beats("A beats B", TWO_SE_A, TWO_SE_B)
    # With a margin of 1.5: differences 0.5, -0.5, 1.5, 0.5, 0.5, t = 1.58, p = 0.19.
    with pytest.raises(settings.ClaimError, match=r"p = 0\.19.*margin of 1\.50"):
        stats.claim_beats("A beats B by 1.5", FIVE_A, FIVE_B, margin=1.5)
    with pytest.raises(settings.ClaimError, match=r"\+0\.20 points"):
        stats.claim_beats("A beats B", NOISY5_A, NOISY5_B)
    with pytest.raises(settings.ClaimError):  # significant, but the other way
        stats.claim_beats("B beats A", FIVE_B, FIVE_A)


def test_within_noise_is_a_confidence_interval_that_holds_zero(capsys):
    assert stats.claim_within_noise("no difference", NOISY5_A, NOISY5_B) is True
    assert "95% CI [-1.84, +2.24]" in capsys.readouterr().out
    with pytest.raises(settings.ClaimError, match=r"95% CI \[\+1\.12, \+2\.88\]"):
        stats.claim_within_noise("no difference", FIVE_A, FIVE_B)


def test_order_names_the_outcome_and_checks_it(capsys):
    assert stats.claim_order("A", FIVE_A, "B", FIVE_B) == "beats"
    assert stats.claim_order("B", FIVE_B, "A", FIVE_A) == "trails"
    assert stats.claim_order("A", NOISY5_A, "B", NOISY5_B) == "is within the noise of"
    assert stats.claim_order("A", TWO_SE_A, "B", TWO_SE_B) == "is within the noise of"
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Checked: A beats B [+2.00 points, 95% CI [+1.12")
    assert out[1].startswith("Checked: A beats B [+2.00 points")  # the winner first
    assert out[2].startswith("Checked: A and B are within the noise [+0.20 points")


def test_fewer_than_five_seeds_conclude_nothing(monkeypatch, capsys):
    for check in (stats.claim_beats, stats.claim_within_noise, stats.claim_larger):
        with pytest.raises(settings.ClaimError, match="n=3: fewer than 5 seeds"):
            check("A beats B", CLEAR_A, CLEAR_B)
        with pytest.raises(settings.ClaimError, match="n=1: fewer than 5 seeds"):
            check("A beats B", [90.0], [10.0])
    with pytest.raises(ValueError, match="a has 2, b has 1"):
        stats.claim_beats("A beats B", [90.0, 91.0], [10.0])
    monkeypatch.setenv("BOOK_SETTING", "quick")
    assert stats.claim_order("A", CLEAR_A, "B", CLEAR_B) == "is not separable from"
    assert capsys.readouterr().out == (
        "Not shown in this short run (quick setting or dry run): "
        "A against B [n=3: fewer than 5 seeds, no verdict]\n"
    )


def test_a_false_comparison_only_reports_in_the_quick_setting_and_a_dry_run(
    monkeypatch, capsys
):
    for name in ("cpu", "gpu", "full"):
        monkeypatch.setenv("BOOK_SETTING", name)
        with pytest.raises(settings.ClaimError, match="contradicts"):
            stats.claim_beats("A beats B", NOISY5_A, NOISY5_B)
    monkeypatch.setenv("BOOK_SETTING", "quick")
    assert stats.claim_beats("A beats B", NOISY5_A, NOISY5_B) is False
    monkeypatch.setenv("BOOK_SETTING", "gpu")
    monkeypatch.setenv("BOOK_DRY_RUN", "1")
    assert stats.claim_within_noise("no change", FIVE_A, FIVE_B) is False
    assert stats.claim_above("above", [1.0], 2.0) is False
    out = capsys.readouterr().out
    assert out.count("Not shown in this short run") == 3


def test_above_needs_every_seed_above_and_reports_the_smallest_margin(capsys):
    # Margins 0.6, 0.2, 0.8 over 84.4: the smallest is +0.20.
    assert stats.claim_above("above pixels", [85.0, 84.6, 85.2], 84.4) is True
    assert capsys.readouterr().out == (
        "Checked: above pixels [smallest margin +0.20 points over 84.40, n=3]\n"
    )
    # One seed of three at 84.3 is below: -0.10.
    with pytest.raises(settings.ClaimError, match=r"smallest margin -0\.10"):
        stats.claim_above("above pixels", [85.0, 84.3, 85.2], 84.4)
    with pytest.raises(ValueError, match="at least one value"):
        stats.claim_above("above pixels", [], 84.4)


def test_slope_is_the_least_squares_slope_in_log_log(capsys):
    # y = x^(-1/2) exactly: slope -0.5.
    x, y = [1, 4, 16, 64], [1.0, 0.5, 0.25, 0.125]
    assert stats.log_log_slope(x, y) == pytest.approx(-0.5)
    # In units of log 2, centred: log x = (-1, 0, 1), log y = (-1/3, -1/3, 2/3);
    # slope = sum(lx * ly) / sum(lx^2) = (1/3 + 2/3) / 2 = 1/2.
    assert stats.log_log_slope([1, 2, 4], [1, 1, 2]) == pytest.approx(0.5)
    assert stats.claim_slope("falls like 1/sqrt(n)", x, y, expected=-0.5, tol=0.1)
    assert capsys.readouterr().out == (
        "Checked: falls like 1/sqrt(n) "
        "[log-log slope -0.50, expected -0.50 ± 0.10, 4 points]\n"
    )
    with pytest.raises(
        settings.ClaimError, match="log-log slope -0.50, expected -1.00"
    ):
        stats.claim_slope("falls like 1/n", x, y, expected=-1.0, tol=0.25)
    for bad_x, bad_y, match in [
        ([1], [1.0], "at least 2 points"),
        ([1, 2], [1.0, 0.0], "positive"),
        ([2, 2], [1.0, 3.0], "two different x"),
        ([1, 2, 3], [1.0, 2.0], "x has 3 values, y has 2"),
    ]:
        with pytest.raises(ValueError, match=match):
            stats.log_log_slope(bad_x, bad_y)


def test_trend_checks_every_step_or_kendalls_tau(capsys):
    # Steps +2, -1, +2: 2 of 3 up. Pairs: 5 concordant, 1 discordant -> tau 4/6.
    x, y = [1, 2, 3, 4], [1.0, 3.0, 2.0, 4.0]
    assert stats.kendall_tau(x, y) == pytest.approx(2 / 3)
    with pytest.raises(
        settings.ClaimError, match=r"2 of 3 steps up; Kendall's tau \+0.67"
    ):
        stats.claim_trend("grows with depth", x, y)
    assert stats.claim_trend("mostly grows with depth", x, y, all_steps=False)
    assert capsys.readouterr().out == (
        "Checked: mostly grows with depth [2 of 3 steps up; Kendall's tau +0.67]\n"
    )
    with pytest.raises(settings.ClaimError, match="1 of 3 steps down"):
        stats.claim_trend("falls with depth", x, y, increasing=False)
    # The x values need not be in order: sorted by x, y rises 10, 20, 30.
    assert stats.claim_trend("grows", [3, 1, 2], [30.0, 10.0, 20.0])
    assert stats.claim_trend("falls", [3, 1, 2], [1.0, 3.0, 2.0], increasing=False)
    # A flat step is not a step up.
    with pytest.raises(settings.ClaimError, match="1 of 2 steps up"):
        stats.claim_trend("grows", [1, 2, 3], [1.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="distinct x"):
        stats.claim_trend("grows", [1, 1, 2], [1.0, 2.0, 3.0])


def test_larger_needs_a_two_sided_paired_t_test_at_five_percent(capsys):
    # CLEAR: differences 2, 1, 3, t = 2 / (1 / sqrt 3) = 3.464 on 2 degrees of freedom.
    # With 2 df the two-sided p is 1 - t / sqrt(t^2 + 2) = 1 - 3.464 / 3.742 = 0.0742,
    # and t(0.975, 2) = 0.95 / sqrt(2 * 0.975 * 0.025) = 4.303, so the 95% interval is
    # 2 -+ 4.303 / sqrt 3 = [-0.484, 4.484]: beyond 2 SE (claim_beats), not significant.
    test = stats.paired_t_test(CLEAR_A, CLEAR_B)
    assert test.mean == pytest.approx(2.0) and test.n == 3
    assert test.t == pytest.approx(2 * math.sqrt(3))
    assert test.p == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14))
    assert (test.low, test.high) == pytest.approx((-0.4841, 4.4841), abs=1e-4)
    assert test.describe() == (
        "+2.00 points, 95% CI [-0.48, +4.48], t = 3.46, p = 0.074 (paired t-test, n=3)"
    )
    # claim_larger is the same test: 5 seeds, p < 0.05 and a positive mean.
    assert stats.claim_larger("A is larger", FIVE_A, FIVE_B)
    assert capsys.readouterr().out.startswith(
        "Checked: A is larger [+2.00 points, 95% CI [+1.12, +2.88], t = 6.32"
    )
    with pytest.raises(settings.ClaimError, match=r"p = 0\.075"):
        stats.claim_larger("A is larger", TWO_SE_A, TWO_SE_B)
    with pytest.raises(settings.ClaimError, match=r"-2\.00 points"):
        stats.claim_larger("B is larger", FIVE_B, FIVE_A)


def test_a_t_test_without_spread_or_with_one_seed():
    # Differences 2, 2: no spread, p 0; 0, 0: p 1.
    same = stats.paired_t_test([3.0, 4.0], [1.0, 2.0])
    assert (same.p, same.low, same.high, same.t) == (0.0, 2.0, 2.0, math.inf)
    assert stats.paired_t_test([1.0, 2.0], [1.0, 2.0]).p == 1.0
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.paired_t_test([1.0], [0.0])
