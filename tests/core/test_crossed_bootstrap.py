"""The crossed bootstrap across training runs: its draws, its level, its coverage."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from esper_core.compare.crossed_bootstrap import (
    complete_table,
    crossed_interval,
    crossed_resamples,
    mean_variance,
)
from esper_core.compare.stats import iqm_interval


def test_one_seed_draw_is_shared_by_every_drawn_run() -> None:
    """A slow reference with the same generator usage: runs drawn, then one draw of the
    seeds that every drawn run is read at."""
    table = np.arange(12.0).reshape(3, 4) ** 1.5
    resamples = 200
    rng = np.random.default_rng(7)
    runs = rng.integers(0, 3, size=(resamples, 3))
    seeds = rng.integers(0, 4, size=(resamples, 4))
    reference = [
        stats.trim_mean([table[r, s] for r in runs[b] for s in seeds[b]], 0.25)
        for b in range(resamples)
    ]
    iqms, means = crossed_resamples(table, resamples, 7)
    np.testing.assert_allclose(iqms, reference, rtol=1e-12)
    np.testing.assert_allclose(
        means, [table[np.ix_(runs[b], seeds[b])].mean() for b in range(resamples)]
    )


def test_the_variance_of_the_grand_mean_is_the_two_way_anova_one() -> None:
    """Runs x seeds = run effect + seed effect + rest: the unbiased variance of the grand
    mean is (MS_run + MS_seed - MS_rest) / (R S)."""
    table = np.array([[1.0, 2.0, 4.0], [2.0, 2.5, 6.0]])
    grand = table.mean()
    ms_run = 3 * ((table.mean(axis=1) - grand) ** 2).sum() / 1
    ms_seed = 2 * ((table.mean(axis=0) - grand) ** 2).sum() / 2
    rest = table - table.mean(axis=1, keepdims=True) - table.mean(axis=0) + grand
    ms_rest = (rest**2).sum() / 2
    variance, dof = mean_variance(table)
    assert variance == pytest.approx((ms_run + ms_seed - ms_rest) / 6)
    combined = ms_run + ms_seed - ms_rest
    assert dof == pytest.approx(combined**2 / (ms_run**2 / 1 + ms_seed**2 / 2 + ms_rest**2 / 2))


def test_only_the_seeds_every_run_finished_are_pooled() -> None:
    table = complete_table([[1.0, 2.0, float("nan"), 4.0], [5.0, 6.0, 7.0]])
    np.testing.assert_array_equal(table, [[1.0, 2.0], [5.0, 6.0]])
    assert crossed_interval([[1.0, 2.0, 3.0], [1.5, 2.5]], 0.95, 100, 0).estimate == 1.75


def _half_width(runs: np.ndarray, confidence: float) -> float:
    interval = crossed_interval(list(runs), confidence, 4000, 0)
    assert interval.low is not None and interval.high is not None
    return (interval.high - interval.low) / 2


def test_the_interval_has_the_level_it_is_asked_for() -> None:
    """With many runs and seeds the resamples are near normal and the expansion near 1:
    the interval's half-width scales as the normal quantile of its level (0.80 against
    0.95: 1.2816 / 1.9600), and matches the analytic standard error of the IQM within 25 %
    (a level read as 0.95 whatever is asked, or a tail cut twice, fails both)."""
    rng = np.random.default_rng(3)
    runs = rng.normal(size=(20, 1)) + rng.normal(size=(1, 20)) + rng.normal(size=(20, 20))
    ratio = _half_width(runs, 0.80) / _half_width(runs, 0.95)
    assert ratio == pytest.approx(stats.norm.ppf(0.90) / stats.norm.ppf(0.975), rel=0.08)
    variance, _ = mean_variance(runs)
    assert _half_width(runs, 0.95) == pytest.approx(1.96 * np.sqrt(variance), rel=0.25)


def test_the_seeds_interval_has_the_level_it_is_asked_for() -> None:
    """The same for one policy's interval over its seeds (``iqm_interval``)."""
    values = np.random.default_rng(4).normal(size=400)

    def half(confidence: float) -> float:
        interval = iqm_interval([values], confidence, 4000, 0)
        assert interval.low is not None and interval.high is not None
        return (interval.high - interval.low) / 2

    assert half(0.80) / half(0.95) == pytest.approx(
        stats.norm.ppf(0.90) / stats.norm.ppf(0.975), rel=0.08
    )


def _coverage(runs: int, sd_run: float, sd_seed: float, sd_rest: float, trials: int) -> float:
    """How often the 95 % interval holds the method's true value (0: the effects are
    symmetric, so the population IQM is their mean) over simulated studies of ``runs``
    training runs x 10 evaluation seeds."""
    rng = np.random.default_rng(11)
    hits = 0
    for trial in range(trials):
        table = (
            sd_run * rng.normal(size=(runs, 1))
            + sd_seed * rng.normal(size=(1, 10))
            + sd_rest * rng.normal(size=(runs, 10))
        )
        interval = crossed_interval(list(table), 0.95, 1000, trial)
        assert interval.low is not None and interval.high is not None
        hits += interval.low <= 0.0 <= interval.high
    return hits / trials


@pytest.mark.slow
@pytest.mark.parametrize(
    ("runs", "sd_run", "sd_seed", "sd_rest"),
    [
        (4, 0.5, 1.0, 0.5),  # the first design: seeds shared, and they matter most
        (4, 1.0, 1.0, 1.0),
        (3, 1.0, 0.3, 0.3),  # training runs matter most
        (2, 1.0, 1.0, 1.0),
    ],
)
def test_the_crossed_interval_covers_at_its_level(
    runs: int, sd_run: float, sd_seed: float, sd_rest: float
) -> None:
    """The nested bootstrap covered 0.73 in the first design. Within 0.93-0.97
    at nominal 95 % (800 studies: a standard error of 0.008)."""
    assert 0.93 <= _coverage(runs, sd_run, sd_seed, sd_rest, 800) <= 0.97


def test_two_training_runs_give_an_interval_as_wide_as_a_t_with_one_degree_of_freedom() -> None:
    """With two runs far apart, the spread between runs is all the interval knows, and a
    t with one degree of freedom is 6.5 times the normal quantile: the expanded interval
    reaches well past both runs, where the plain percentile one stops between them."""
    rng = np.random.default_rng(5)
    runs = np.stack([rng.normal(0.0, 0.1, 10), rng.normal(1.0, 0.1, 10)])
    interval = crossed_interval(list(runs), 0.95, 2000, 0)
    assert interval.low is not None and interval.high is not None
    assert interval.high - interval.low > 4.0 * abs(runs[1].mean() - runs[0].mean())
