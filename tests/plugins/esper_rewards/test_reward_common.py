"""The shared rules: the potential Φ, the shaping term, the parameter rent, gamma."""

from __future__ import annotations

import inspect
import itertools
import math

import pytest
from esper_rewards.common import (
    ShapingOptions,
    ShapingRentOptions,
    flops_rent,
    output_params,
    potential,
    rent,
    shaping,
    slot_potential,
)
from hypothesis import given
from hypothesis import strategies as st

from esper_core.components.reward import RewardSetup
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import LifecycleOp
from esper_core.lifecycle.rules import BLENDED_STAGES
from esper_core.lifecycle.stages import Stage
from tests.plugins.esper_rewards.builders import (
    FAMILIES,
    SHAPING_FAMILIES,
    ctx,
    dormant,
    family,
    snap,
)

OPTS = ShapingOptions()
RENT = ShapingRentOptions()

# Per-stage potentials (DOMAIN §6's, FOSSILIZED raised from 6 to 7.5 so that fossilizing
# never lowers Φ), written out here independently of the plugin.
SPEC_POTENTIAL = {
    Stage.DORMANT: 0.0,
    Stage.GERMINATED: 1.0,
    Stage.TRAINING: 2.0,
    Stage.BLENDING: 3.5,
    Stage.HOLDING: 5.5,
    Stage.FOSSILIZED: 7.5,
    Stage.PRUNED: 0.0,
    Stage.EMBARGOED: 0.0,
    Stage.RESETTING: 0.0,
}


@pytest.mark.parametrize("stage", list(Stage))
def test_stage_potentials_are_the_spec_defaults(stage: Stage) -> None:
    assert slot_potential(snap("r0c0", stage, epochs=0), OPTS) == SPEC_POTENTIAL[stage]


@pytest.mark.parametrize(
    "stage", [Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED]
)
def test_epoch_bonus_grows_by_0_3_and_caps_at_1_on_seed_stages(stage: Stage) -> None:
    base = SPEC_POTENTIAL[stage]
    assert slot_potential(snap("r0c0", stage, epochs=1), OPTS) == pytest.approx(base + 0.3)
    assert slot_potential(snap("r0c0", stage, epochs=3), OPTS) == pytest.approx(base + 0.9)
    # 0.3 * 4 = 1.2 > 1: capped
    assert slot_potential(snap("r0c0", stage, epochs=4), OPTS) == pytest.approx(base + 1.0)
    assert slot_potential(snap("r0c0", stage, epochs=50), OPTS) == pytest.approx(base + 1.0)


def test_no_advance_lowers_the_potential() -> None:
    # A seed at its stage's largest bonus is worth no more than a fresh seed one stage on.
    lifecycle = [Stage.GERMINATED, Stage.TRAINING, Stage.BLENDING, Stage.HOLDING, Stage.FOSSILIZED]
    for here, there in itertools.pairwise(lifecycle):
        old = slot_potential(snap("r0c0", here, epochs=50), OPTS)
        assert slot_potential(snap("r0c0", there, epochs=0), OPTS) >= old, (here, there)


@pytest.mark.parametrize("stage", [Stage.DORMANT, Stage.PRUNED, Stage.EMBARGOED, Stage.RESETTING])
def test_no_epoch_bonus_without_a_seed(stage: Stage) -> None:
    # An idle or cooling-down slot must not gain potential by waiting: otherwise
    # germinating (DORMANT 0 + bonus -> GERMINATED 1) would lower Φ.
    assert slot_potential(snap("r0c0", stage, epochs=9), OPTS) == 0.0


def test_potential_sums_every_slot_not_only_the_targeted_one() -> None:
    slots = (
        snap("r0c0", Stage.TRAINING, epochs=3),  # 2 + 0.9
        snap("r0c1", Stage.DORMANT, epochs=7),  # 0
        snap("r0c2", Stage.HOLDING, epochs=10),  # 5.5 + 1 (capped)
        snap("r0c3", Stage.EMBARGOED, epochs=4),  # 0
    )
    assert potential(slots, OPTS) == pytest.approx(2.9 + 0.0 + 6.5 + 0.0)


def test_wait_is_credited_for_every_slot() -> None:
    # WAIT targets no slot; seeds in two slots progress, both count.
    before = (snap("r0c0", Stage.TRAINING, 2), snap("r0c1", Stage.BLENDING, 1), *dormant(1))
    after = (snap("r0c0", Stage.TRAINING, 3), snap("r0c1", Stage.BLENDING, 2), *dormant(1))
    step = ctx(op=LifecycleOp.WAIT, slots_before=before, slots_after=after)
    assert step.target_slot is None
    # Φ(s) = 2.6 + 3.8 = 6.4, Φ(s') = 2.9 + 4.1 = 7.0; 0.3·(0.9·7.0 − 6.4) = −0.03
    assert shaping(step, OPTS, 0.9) == pytest.approx(0.3 * (0.9 * 7.0 - 6.4))
    # An op on r0c0 is credited for r0c1's progress too.
    targeted = ctx(op=LifecycleOp.ADVANCE, slot=0, slots_before=before, slots_after=after)
    assert shaping(targeted, OPTS, 0.9) == shaping(step, OPTS, 0.9)


def test_changing_gamma_changes_the_shaping() -> None:
    step = ctx(
        slots_before=(snap("r0c0", Stage.TRAINING, 1), *dormant(2)),
        slots_after=(snap("r0c0", Stage.TRAINING, 2), *dormant(2)),
    )
    # w·(γ·2.6 − 2.3): the two differ by w·(γ1 − γ2)·Φ(s′) = 0.3·0.09·2.6
    high, low = shaping(step, OPTS, 0.99), shaping(step, OPTS, 0.9)
    assert high == pytest.approx(0.3 * (0.99 * 2.6 - 2.3))
    assert low == pytest.approx(0.3 * (0.9 * 2.6 - 2.3))
    assert high - low == pytest.approx(0.3 * 0.09 * 2.6)
    for cls in SHAPING_FAMILIES:
        a = family(cls, gamma=0.99).compute(step).components["shaping"]
        b = family(cls, gamma=0.9).compute(step).components["shaping"]
        assert a == pytest.approx(high) and b == pytest.approx(low)


def test_zero_terminal_potential_drops_phi_of_the_last_state() -> None:
    seeds = (snap("r0c0", Stage.FOSSILIZED, 3), *dormant(2))  # Φ = 7.5 + 0.9 = 8.4
    mid = ctx(epoch=5, slots_before=seeds, slots_after=seeds)
    last = ctx(epoch=30, slots_before=seeds, slots_after=seeds)
    rollback = ctx(epoch=5, slots_before=seeds, slots_after=seeds, rolled_back=True)
    assert OPTS.zero_terminal_potential  # the default
    assert shaping(mid, OPTS, 0.9) == pytest.approx(0.3 * (0.9 * 8.4 - 8.4))
    assert shaping(last, OPTS, 0.9) == pytest.approx(-0.3 * 8.4)
    assert shaping(rollback, OPTS, 0.9) == pytest.approx(-0.3 * 8.4)
    kept = ShapingOptions(zero_terminal_potential=False)
    assert shaping(last, kept, 0.9) == shaping(mid, kept, 0.9)


def test_rent_golden_values() -> None:
    # 0.01 · min(0.5·ln(1 + 2000/10000), 1.5) = 0.005·ln 1.2
    assert rent(2000, 10_000, RENT) == pytest.approx(-0.005 * math.log(1.2))
    # a host below the floor counts as 200 parameters: 0.005·ln(1 + 100/200)
    assert rent(100, 50, RENT) == pytest.approx(-0.005 * math.log(1.5))
    # capped at 1.5 before the weight
    assert rent(10**9, 1000, RENT) == pytest.approx(-0.01 * 1.5)
    assert rent(0, 1000, RENT) == 0.0
    assert math.copysign(1.0, rent(0, 1000, RENT)) == 1.0  # +0.0, not -0.0, in telemetry


def test_flops_rent_prices_added_compute_only_when_weighted() -> None:
    def per_epoch(ratio: float, opts: ShapingRentOptions) -> float:
        return flops_rent(ctx(train_flops_ratio=ratio), opts, 0.9)

    assert per_epoch(2.0, RENT) == 0.0  # unpriced by default: behaviour as before
    priced = ShapingRentOptions(flops_rent_weight=0.1)
    # 0.1 · min(0.5·ln 2, 1.5): doubling an epoch's compute
    assert per_epoch(2.0, priced) == pytest.approx(-0.05 * math.log(2.0))
    assert per_epoch(1.0, priced) == 0.0  # the bare host pays nothing
    assert math.copysign(1.0, per_epoch(1.0, priced)) == 1.0
    assert per_epoch(0.5, priced) == 0.0  # never a bonus
    assert per_epoch(1e9, priced) == pytest.approx(-0.1 * 1.5)  # capped


def _episode_rent(ratios: list[float], timing: str, gamma: float) -> float:
    """The discounted sum of the compute rent over an episode of epoch FLOPs ratios."""
    opts = ShapingRentOptions(flops_rent_weight=0.1, flops_rent_timing=timing)
    prev, total = 1.0, 0.0
    for t, ratio in enumerate(ratios):
        step = ctx(
            epoch=t + 1,
            max_epochs=len(ratios),
            train_flops_ratio=ratio,
            train_flops_ratio_prev=prev,
        )
        total += gamma**t * flops_rent(step, opts, gamma)
        prev = ratio
    return total


@pytest.mark.parametrize("gamma", [1.0, 0.995, 0.9])
def test_final_timing_charges_the_final_models_compute_whenever_it_grew(gamma: float) -> None:
    # 8 epochs; the model doubles its compute at epoch 2 or at epoch 6
    early = [1.0] + [2.0] * 7
    late = [1.0] * 5 + [2.0] * 3
    final_price = -0.1 * 8 * gamma**8 * 0.5 * math.log(2.0)
    assert _episode_rent(early, "final", gamma) == pytest.approx(final_price)
    assert _episode_rent(late, "final", gamma) == pytest.approx(final_price)
    # per epoch, the late growth pays for 3 epochs, the early one for 7
    assert _episode_rent(late, "per_epoch", 1.0) == pytest.approx(
        3 / 7 * _episode_rent(early, "per_epoch", 1.0)
    )
    # a growth pruned before the end is refunded: only the final model is priced
    assert _episode_rent([1.0, 2.0, 2.0, 1.0], "final", gamma) == pytest.approx(0.0, abs=1e-12)
    assert _episode_rent([1.0] * 4, "final", gamma) == 0.0


def test_final_timing_charges_a_growth_on_the_epoch_it_starts() -> None:
    opts = ShapingRentOptions(flops_rent_weight=0.1, flops_rent_timing="final")
    grew = ctx(max_epochs=8, train_flops_ratio=2.0, train_flops_ratio_prev=1.0)
    assert flops_rent(grew, opts, 1.0) == pytest.approx(-0.1 * 8 * 0.5 * math.log(2.0))
    held = ctx(max_epochs=8, train_flops_ratio=2.0, train_flops_ratio_prev=2.0)
    assert flops_rent(held, opts, 1.0) == 0.0


def test_flops_rent_timing_is_checked() -> None:
    with pytest.raises(ConfigError, match="flops_rent_timing"):
        family(FAMILIES[0], flops_rent_timing="late")


def test_output_params_count_only_seeds_that_touch_the_output() -> None:
    slots = tuple(snap(f"s{i}", stage, 1, params=10**i) for i, stage in enumerate(Stage))
    expected = sum(10**i for i, stage in enumerate(Stage) if stage in BLENDED_STAGES)
    assert output_params(slots) == expected
    assert output_params((snap("r0c0", Stage.TRAINING, 9, params=10**6),)) == 0


params = st.integers(min_value=0, max_value=10**8)


@given(a=params, b=params, host=st.integers(min_value=0, max_value=10**8))
def test_rent_grows_with_seed_parameters(a: int, b: int, host: int) -> None:
    small, large = sorted((a, b))
    assert rent(large, host, RENT) <= rent(small, host, RENT) <= 0.0


@given(seed=params, h1=params, h2=params)
def test_rent_never_grows_with_host_parameters(seed: int, h1: int, h2: int) -> None:
    small, large = sorted((h1, h2))
    # more host parameters only enlarge the denominator: the rent can only shrink
    assert abs(rent(seed, large, RENT)) <= abs(rent(seed, small, RENT))


def test_rent_strictly_grows_for_a_realistic_seed() -> None:
    assert rent(20_000, 100_000, RENT) < rent(10_000, 100_000, RENT) < 0.0
    assert rent(10_000, 200_000, RENT) > rent(10_000, 100_000, RENT)


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.name)
def test_gamma_has_no_default_and_is_validated(cls: type) -> None:
    parameter = inspect.signature(cls.__init__).parameters["setup"]
    assert parameter.default is inspect.Parameter.empty
    with pytest.raises(TypeError):
        cls(cls.Options())
    with pytest.raises(TypeError):
        RewardSetup()  # type: ignore[call-arg]  # the shaping discounts with the run's gamma only
    for bad in (0.0, -0.5, 1.5, float("nan"), True):
        with pytest.raises(ConfigError, match=r"run\.gamma"):
            cls(cls.Options(), RewardSetup(gamma=bad))
    assert cls(cls.Options(), RewardSetup(gamma=0.97)).gamma == 0.97


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: c.name)
def test_options_are_validated_with_their_path(cls: type) -> None:
    first = next(iter(cls.Options.__attrs_attrs__))
    with pytest.raises(ConfigError, match=rf"rewards\.{cls.name}: unknown key.*no_such_option"):
        family(cls, no_such_option=1.0)
    with pytest.raises(ConfigError, match=rf"rewards\.{cls.name}\.{first.name}"):
        family(cls, **{first.name: -1.0})


def test_potentials_refuse_non_finite_values() -> None:
    # Bounded to ±1000 (beyond, one stage would drown every other term).
    with pytest.raises(
        ConfigError,
        match=r"rewards\.pbrs\.potential_holding: expected a number in \[-1000, 1000\], got inf",
    ):
        family(FAMILIES[0], potential_holding=float("inf"))
