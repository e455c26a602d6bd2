"""Seeds installed at birth (the static baseline) and the cost axes of a run."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from esper_core.env import cost
from esper_core.env.birth import parse_birth_seeds
from esper_core.env.init_seeds import init_seed
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.rules import LifecycleError
from esper_core.lifecycle.stages import Stage
from esper_core.run.telemetry import EpisodeFinished, SeedFossilized, SeedGerminated
from tests.fakes import RES_RANDOM, drive_to, make_env


def born(*specs: str, seed: int = 0, overrides: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    env = make_env(*overrides, seed=seed)
    env.install_at_birth(list(specs))
    env.reset(seed)
    return env


def fossil_by_hand(env, slot_id: str, germination: int) -> None:  # type: ignore[no-untyped-def]
    """Make ``slot_id`` hold a fossil from the start by hand: germinate with the env's
    init for that germination, then set the stage, bypassing every gate."""
    slot = env.model.slot(slot_id)
    slot.germinate(
        f"{slot_id}-s{germination}", RES_RANDOM, init_seed=init_seed(env.seed, germination)
    )
    slot.state.stage = Stage.FOSSILIZED
    slot.state.alpha_schedule.tick()
    slot._sync_alpha()
    env.stats.n_germinated = germination
    env.trainer.sync_optimizers()


def trajectory(env, epochs: int = 3) -> list[tuple[float, ...]]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(epochs):
        m = env.step(WAIT).metrics
        out.append((m.train_loss, m.train_acc, m.val_loss, m.val_acc))
    return out


# ---------------------------------------------------------------- install at birth


def test_installed_seeds_start_as_fossils_in_the_first_observation() -> None:
    env = born("res_random@r0c0", "res_random@r0c1")
    reports = {r.slot_id: r for r in env.observation.slots}
    assert reports["r0c0"].stage == reports["r0c1"].stage == Stage.FOSSILIZED
    assert [r.seed_id for r in reports.values()] == ["r0c0-s1", "r0c1-s2"]
    channels = [env.model.slot(s).spec.channels for s in ("r0c0", "r0c1")]
    assert env.observation.seed_params == sum(RES_RANDOM.param_estimate(c) for c in channels)
    assert env.stats.n_germinated == env.stats.n_fossilized == 2


def test_seeds_installed_at_birth_train_exactly_like_seeds_fossilized_at_birth() -> None:
    installed = born("res_random@r0c0", seed=3)
    by_hand = make_env(seed=3)
    fossil_by_hand(by_hand, "r0c0", 1)
    assert trajectory(installed) == trajectory(by_hand)
    for (name, a), b in zip(
        installed.model.named_parameters(), by_hand.model.parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def test_an_installed_seed_gets_the_init_of_the_same_germination_in_a_grown_run() -> None:
    installed = born("res_random@r0c0", seed=5)
    grown = make_env(seed=5)
    grown.apply_action(grown.space.germinate("r0c0", "res_random"))  # germination 1, untrained
    for a, b in zip(
        installed.model.slot("r0c0").seed_parameters(),
        grown.model.slot("r0c0").seed_parameters(),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_installed_seeds_leave_the_host_init_and_data_order_of_the_seed_alone() -> None:
    installed, plain = born("res_random@r0c1", seed=2), make_env(seed=2)
    for (name, a), b in zip(
        installed.model.host.named_parameters(), plain.model.host.parameters(), strict=True
    ):
        assert torch.equal(a, b), name
    assert torch.equal(installed.generator.get_state(), plain.generator.get_state())


def test_birth_events_arrive_with_the_first_step_and_every_episode_reinstalls() -> None:
    env = born("res_random@r0c0", overrides=("env.max_epochs=2",))
    first = env.step(WAIT).events
    germinated = [e for e in first if isinstance(e, SeedGerminated)]
    fossilized = [e for e in first if isinstance(e, SeedFossilized)]
    assert [(e.epoch, e.slot_id) for e in germinated] == [(0, "r0c0")]
    assert [(e.epoch, e.seed_id, e.gain) for e in fossilized] == [(0, "r0c0-s1", None)]
    last = env.step(WAIT).events
    assert not any(isinstance(e, SeedGerminated) for e in last)
    (finished,) = [e for e in last if isinstance(e, EpisodeFinished)]
    assert (finished.seeds_germinated, finished.seeds_fossilized) == (1, 1)
    env.reset(7)
    assert env.model.slot("r0c0").stage == Stage.FOSSILIZED


def test_a_birth_seed_keeps_its_blend_style() -> None:
    env = born("res_random@r0c0:gated")
    slot = env.model.slot("r0c0")
    assert slot.state.style == "gated" and slot.gate is not None
    assert (
        parse_birth_seeds(
            ["cnn/res@r0c1:gated", "res_random@r0c0"], env.blueprints, env.model.slot_ids
        )[0].spec
        == "res@r0c1:gated"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("res_random", "expected blueprint@slot"),
        ("res@r0c0:wobbly", "unknown style 'wobbly'"),
        ("nope@r0c0", "unknown blueprint 'nope'"),
        ("res@r9c9", "unknown slot 'r9c9'"),
    ],
)
def test_bad_birth_seeds_are_config_errors(spec: str, message: str) -> None:
    env = make_env()
    with pytest.raises(ConfigError, match=message):
        env.install_at_birth([spec])


def test_one_seed_per_slot_at_birth() -> None:
    env = make_env()
    with pytest.raises(ConfigError, match="r0c0 already holds a seed"):
        parse_birth_seeds(["res@r0c0", "cnn/res_random@r0c0"], env.blueprints, env.model.slot_ids)


def test_install_at_birth_is_refused_once_the_host_has_trained() -> None:
    env = make_env()
    env.step(WAIT)
    with pytest.raises(LifecycleError, match="untrained host"):
        env.model.slot("r0c0").install_at_birth("x", RES_RANDOM, epochs_done=env.epoch)


# ---------------------------------------------------------------- cost axes


def counted_flops(model, task, batch: int) -> int:  # type: ignore[no-untyped-def]
    """FlopCounterMode's count of one training step's forward and backward on ``batch`` samples."""
    x = torch.randn(batch, 1, 4, 4)
    y = torch.randint(0, 4, (batch,))
    with FlopCounterMode(display=False) as counter:
        task.loss(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def test_train_flops_are_flop_counter_mode_times_samples() -> None:
    env = make_env()
    env.step(WAIT)
    samples = env.last_train.samples
    per_batch = counted_flops(env.model, env.task, env.batch_size)
    assert samples % env.batch_size == 0
    assert per_batch > 0
    assert env.stats.train_flops == per_batch * (samples // env.batch_size)


class _Attention(torch.nn.Module):
    """Causal self-attention through torch's fused entry point, as the transformer host's."""

    def __init__(self, heads: int = 2, dim: int = 8) -> None:
        super().__init__()
        self.heads, self.qkv = heads, torch.nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, d)


def test_attention_is_counted_as_its_math_on_every_device() -> None:
    # torch gives the CPU's fused attention kernel no FLOP formula: counted as it runs, the
    # attention itself would be free. Its math is two batched matmuls forward and four
    # backward, each 2 * b * heads * t * t * head_dim FLOPs.
    b, t, heads, dim = 3, 16, 2, 8
    model, x = _Attention(heads, dim), torch.randn(b, t, dim)
    with FlopCounterMode(display=False) as fused:
        model(x).sum().backward()
    projection = 2 * 2 * b * t * dim * 3 * dim  # the qkv Linear: forward, weight gradient
    assert fused.get_total_flops() == projection  # the attention counted as zero
    counted = cost.count_train_flops(model, lambda out, _: out.sum(), x, x)
    attention = 6 * 2 * b * heads * t * t * (dim // heads)
    assert counted == projection + attention


def test_train_flops_follow_every_architecture_change() -> None:
    env = make_env("env.max_epochs=12")
    before = env.stats.train_flops
    results = drive_to(env, "r0c0", "FOSSILIZED", blueprint="res_random")
    assert results
    fossil_flops = counted_flops(env.model, env.task, env.batch_size)
    host_only = make_env()
    host_flops = counted_flops(host_only.model, host_only.task, env.batch_size)
    assert fossil_flops > host_flops
    done = env.stats.train_flops
    env.step(WAIT)
    batches = env.last_train.samples // env.batch_size
    assert env.stats.train_flops - done == fossil_flops * batches
    assert done > before + host_flops * batches  # a seed was trained in earlier epochs too


def test_the_epoch_flops_ratio_is_one_without_growth_and_prices_a_fossil() -> None:
    host_only = make_env()
    host_only.step(WAIT)
    assert host_only.cost.epoch_flops_ratio() == 1.0
    env = make_env("env.max_epochs=12")
    drive_to(env, "r0c0", "FOSSILIZED", blueprint="res_random")
    env.step(WAIT)
    fossil = counted_flops(env.model, env.task, env.batch_size)
    host = counted_flops(host_only.model, host_only.task, env.batch_size)
    assert env.cost.epoch_flops_ratio() == pytest.approx(fossil / host)
    assert env.cost.epoch_flops_ratio() > 1.0


def test_the_host_alone_flops_are_the_bare_hosts() -> None:
    env = make_env("env.max_epochs=12")
    env.step(WAIT)  # one epoch of the host alone
    drive_to(env, "r0c0", "FOSSILIZED", blueprint="res_random")
    host = make_env()
    per_sample = counted_flops(host.model, host.task, env.batch_size) / env.batch_size
    assert env.stats.host_flops_per_sample == pytest.approx(per_sample)
    # The growth's FLOPs baseline: the host alone on every batch this episode trained.
    assert env.stats.train_samples * per_sample < env.stats.train_flops
    # Counted on the bare host itself, so a model grown before it trained alone has it too.
    grown_at_once = make_env("env.max_epochs=12")
    drive_to(grown_at_once, "r0c0", "FOSSILIZED", blueprint="res_random")
    assert grown_at_once.stats.host_flops_per_sample == pytest.approx(per_sample)


def test_counting_flops_leaves_training_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = born("res_random@r0c0", seed=1)
    counted_run = trajectory(counted)
    assert counted.stats.train_flops > 0
    monkeypatch.setattr(cost, "count_train_flops", lambda *args: 0)
    uncounted = born("res_random@r0c0", seed=1)
    assert trajectory(uncounted) == counted_run
    assert uncounted.stats.train_flops == 0


def test_params_forward_and_held_count_blended_and_incubating_seeds() -> None:
    env = make_env("lifecycle.isolation_non_identity=full", "env.max_epochs=12")
    host = env.model.host_param_count()
    drive_to(env, "r0c0", "TRAINING", blueprint="res_random")
    seed = RES_RANDOM.param_estimate(4)
    assert (cost.params_forward(env.model), cost.params_held(env.model)) == (host, host + seed)
    drive_to(env, "r0c0", "BLENDING", blueprint="res_random")
    assert cost.params_forward(env.model) == cost.params_held(env.model) == host + seed


# ---------------------------------------------------------------- the summary's growth line


def seed_row(
    fate: str,
    *,
    stage: str = "HOLDING",
    gain: float | None = 3.0,
    epoch: int = 3,
    contribution: float | None = None,
    **kw,
):  # type: ignore[no-untyped-def]
    return {
        "seed_id": kw.get("seed_id", "r0c0-s1"),
        "env": 0,
        "episode": 0,
        "slot_id": kw.get("slot_id", "r0c0"),
        "blueprint": kw.get("blueprint", "cnn/conv_heavy"),
        "style": kw.get("style", "linear_add"),
        "params": 100,
        "germinated_epoch": epoch,
        "fate": fate,
        "last_stage": stage,
        "gain": gain,
        "contribution": contribution,
    }


def test_final_architecture_is_what_shapes_the_output_at_the_end() -> None:
    from esper_core.run.summary import final_architecture

    rows = [
        seed_row("fossilized", epoch=9, seed_id="r0c1-s2", slot_id="r0c1", style="gated"),
        seed_row("fossilized", epoch=2),
        seed_row("pruned", epoch=4, seed_id="r0c2-s3", slot_id="r0c2"),
        seed_row("live", stage="BLENDING", epoch=20, seed_id="r0c2-s4", slot_id="r0c2"),
        seed_row("live", stage="TRAINING", epoch=25, seed_id="r0c0-s5"),
    ]
    assert final_architecture(rows) == [
        "conv_heavy@r0c0",
        "conv_heavy@r0c1:gated",
        "conv_heavy@r0c2",
    ]


def test_the_growth_line_says_what_grew_and_what_it_gained() -> None:
    from esper_core.run.ledger import SeedRecord
    from esper_core.run.summary import growth_verdict

    def records(*rows):  # type: ignore[no-untyped-def]
        keep = ("seed_id", "env", "episode", "slot_id", "blueprint", "style", "params")
        return [
            SeedRecord(
                **{k: r[k] for k in keep},
                germinated_epoch=r["germinated_epoch"],
                fate=r["fate"],
                last_stage=r["last_stage"],
                gain=r["gain"],
                contribution=r["contribution"],
            )
            for r in rows
        ]

    episode = {"seeds_germinated": 0, "host_params": 1000, "params_added": 0}
    assert growth_verdict([episode], []) == "no growth: no seed was germinated"
    tried = {**episode, "seeds_germinated": 2}
    pruned = records(seed_row("pruned"), seed_row("pruned", seed_id="r0c0-s2"))
    assert growth_verdict([tried], pruned) == "no growth kept: 2 seed(s) tried and pruned"
    kept = {**episode, "seeds_germinated": 1, "params_added": 500}
    # The kept seed's counterfactual contribution, not the accuracy gained since its
    # germination (which holds the host's own learning meanwhile).
    line = growth_verdict([kept], records(seed_row("fossilized", gain=54.6, contribution=12.5)))
    assert line == (
        "growth kept: 1 seed(s) fossilized (conv_heavy@r0c0), +500 parameters per episode "
        "(+50% of the host), counterfactual contribution +12.50 points (validation accuracy "
        "with the kept seed minus switched off)"
    )
    costed = growth_verdict(
        [{**kept, "train_flops": 1.5e9}], records(seed_row("fossilized", gain=None, epoch=3))
    )
    # No gain was measured: none is claimed; the FLOPs recorded are.
    assert costed == (
        "growth kept: 1 seed(s) fossilized (conv_heavy@r0c0), +500 parameters per episode "
        "(+50% of the host), 1.5e+09 training FLOPs per episode"
    )
    # The host alone measured (it trained an epoch without a seed): the FLOPs growth added.
    over = growth_verdict(
        [{**kept, "train_flops": 1.5e9, "host_train_flops": 1e9}],
        records(seed_row("fossilized", gain=2.0, contribution=1.0)),
    )
    assert over == (
        "growth kept: 1 seed(s) fossilized (conv_heavy@r0c0), +500 parameters per episode "
        "(+50% of the host), +5e+08 training FLOPs per episode (+50% over the host alone), "
        "counterfactual contribution +1.00 points (validation accuracy with the kept seed "
        "minus switched off)"
    )
    many = records(*(seed_row("fossilized", seed_id=f"s{i}", slot_id=f"r0c{i}") for i in range(5)))
    assert "(conv_heavy@r0c0, conv_heavy@r0c1, conv_heavy@r0c2, ...)" in growth_verdict(
        [kept], many
    )
    born = growth_verdict([kept], records(seed_row("fossilized", gain=None, epoch=0)))
    assert born.endswith("1 installed at birth")


def test_the_cost_meter_is_in_the_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """After a resume the observation's FLOPs ratio (what ``price = "flops"`` and the
    FLOPs rent read) is the last epoch's, not 1.0, and no architecture is counted again."""
    env = make_env("env.max_epochs=12")
    drive_to(env, "r0c0", "FOSSILIZED", blueprint="res_random")
    env.step(WAIT)
    assert env.observation.train_flops_ratio > 1.0
    torch.save(env.state_dict(), tmp_path / "env.pt")
    resumed = make_env("env.max_epochs=12")
    resumed.load_state_dict(torch.load(tmp_path / "env.pt", weights_only=True))
    assert resumed.observation.train_flops_ratio == env.observation.train_flops_ratio
    assert resumed.cost.per_sample == env.cost.per_sample
    assert resumed.cost.host_per_sample == env.cost.host_per_sample
    resumed.step(WAIT)
    env.step(WAIT)
    assert resumed.stats.train_flops == env.stats.train_flops


def test_the_reward_is_shown_the_epochs_flops_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compute-aware reward (the shaping families' FLOPs rent) charges what the epoch
    cost: the env hands it the ratio it measured, as it does the observation."""
    env = born("res_random@r0c0")
    seen: list[float] = []
    reward_class = type(env.reward)
    compute = reward_class.compute

    def recording(self, ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.train_flops_ratio)
        return compute(self, ctx)

    monkeypatch.setattr(reward_class, "compute", recording)
    env.step(WAIT)
    assert env.cost.epoch_flops_ratio() > 1.0  # the fossil costs FLOPs over the host
    assert seen == [pytest.approx(env.cost.epoch_flops_ratio())]
    assert env.observation.train_flops_ratio == seen[0]


def test_the_reward_is_shown_the_last_epochs_flops_ratio_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A price on the final model's compute charges each epoch's change: the env hands the
    reward the ratio the action was chosen from (the last epoch's, 1 before the first)."""
    env = born("res_random@r0c0")
    seen: list[tuple[float, float]] = []
    reward_class = type(env.reward)
    compute = reward_class.compute

    def recording(self, ctx):  # type: ignore[no-untyped-def]
        seen.append((ctx.train_flops_ratio_prev, ctx.train_flops_ratio))
        return compute(self, ctx)

    monkeypatch.setattr(reward_class, "compute", recording)
    before = env.observation.train_flops_ratio
    env.step(WAIT)
    env.step(WAIT)
    assert [prev for prev, _ in seen] == [before, seen[0][1]]
    assert seen[0][1] > 1.0
