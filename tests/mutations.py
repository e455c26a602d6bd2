"""Mutation check: one-line bugs the fast tests must catch.

Each :class:`Mutation` replaces one exact snippet of a module by a plausible bug (a clip
removed, a sign flipped, a terminal condition dropped). :func:`run` copies the module's
package to a temporary directory, applies the mutation to the copy, and runs the named
fast tests in a fresh process (forked from a warm interpreter that holds no Esper module,
tests/mutant_fork.py) with the copy first on the path (checking that the copy is what
gets imported). The mutation is *caught* when a test fails.

``tests/test_mutations.py`` runs every mutation in CI; a mutation that survives fails
there with its name. By hand: ``python -m tests.mutations [NAME ...]`` prints a table.

Before this check, the PPO loss's tests let four of these five through.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from attrs import frozen

from tests.mutant_fork import Forker
from tests.plugin_set import REPO

PPO = "plugins/esper-tamiyo-ppo/esper_tamiyo_ppo"
HEURISTIC = "plugins/esper-tamiyo-heuristic/esper_tamiyo_heuristic"
REWARDS = "plugins/esper-rewards/esper_rewards"

# Files, not their directory: pytest would then collect the directory in its own order,
# and the reference test (the quickest to fail) would run last.
PPO_TESTS = (
    "tests/plugins/esper_tamiyo_ppo/test_loss_reference.py",
    "tests/plugins/esper_tamiyo_ppo/test_distributions.py",
    "tests/plugins/esper_tamiyo_ppo/test_learner.py",
)
GAE_TESTS = ("tests/plugins/esper_tamiyo_ppo/test_gae.py",)
HEURISTIC_TESTS = ("tests/plugins/esper_tamiyo_heuristic",)
TASKS = "plugins/esper-tasks/esper_tasks"
GLYPH_TESTS = ("tests/plugins/esper_tasks/test_glyphs.py",)
BLUEPRINTS = "plugins/esper-blueprints/esper_blueprints"
STACKING_TESTS = ("tests/integration/test_stacking.py",)
CORE = "esper_core"
OPERATORS = "plugins/esper-operators/esper_operators"
CROSSED_TESTS = ("tests/core/test_crossed_bootstrap.py",)
WIDTH_TESTS = ("tests/core/test_width_exact.py",)
DEEPEN_TESTS = ("tests/core/test_deepening_strided.py",)
PPO_GROWTH_TESTS = ("tests/plugins/esper_tamiyo_ppo/test_host_growth.py",)
READY_TESTS = ("tests/plugins/esper_tasks/test_host_growth_ready.py",)
FOLD_TESTS = ("tests/core/test_fold_optimizer_state.py",)
MIXED_TESTS = ("tests/plugins/esper_tamiyo_ppo/test_mixed_hosts.py",)
FOSSIL_WIDTH_TESTS = ("tests/plugins/esper_tasks/test_width_around_fossil.py",)


@frozen
class Mutation:
    name: str
    package: str  # the package directory copied (relative to the repository)
    module: str  # the file mutated, relative to the package directory
    original: str  # must occur exactly once in the file
    mutated: str
    # Fast tests that must catch it (run with -m "not slow" -x): files, or the node id of
    # the test that catches it where the tests run before it in its files took tens of
    # seconds a mutant (a test renamed away fails the check: pytest finds no test).
    tests: tuple[str, ...]

    @property
    def path(self) -> Path:
        return REPO / self.package / self.module

    @property
    def dotted(self) -> str:
        """The mutated module's import name, e.g. ``esper_tamiyo_ppo.update``."""
        return f"{Path(self.package).name}.{self.module.removesuffix('.py').replace('/', '.')}"


MUTATIONS = (
    # ---- The PPO loss (the five probes the check began with).
    Mutation(
        "ppo-ratio-clip-removed",
        PPO,
        "update.py",
        "neg_adv * ratio.clamp(1.0 - o.clip_coef, 1.0 + o.clip_coef)",
        "neg_adv * ratio",
        PPO_TESTS,
    ),
    Mutation(
        "ppo-entropy-bonus-sign",
        PPO,
        "update.py",
        "loss = pg_loss - ent_coef * entropy",
        "loss = pg_loss + ent_coef * entropy",
        PPO_TESTS,
    ),
    Mutation(
        "ppo-value-clip-removed",
        PPO,
        "update.py",
        "v_loss = torch.max(v_loss, (clipped - mb_returns) ** 2)",
        "v_loss = v_loss",
        PPO_TESTS,
    ),
    Mutation(
        "ppo-advantage-normalisation-removed",
        PPO,
        "update.py",
        "if o.normalize_advantages:",
        "if False:",
        PPO_TESTS,
    ),
    Mutation(
        "ppo-policy-gradient-sign",
        PPO,
        "update.py",
        "neg_adv = -mb_advantages.unsqueeze(1)",
        "neg_adv = mb_advantages.unsqueeze(1)",
        PPO_TESTS,
    ),
    # ---- The joint-ratio clip (ratio_clip = "joint").
    Mutation(
        "ppo-joint-clip-ignored",
        PPO,
        "update.py",
        'if o.ratio_clip == "joint":',
        "if False:",
        PPO_TESTS,
    ),
    Mutation(
        "ppo-joint-ratio-per-head",
        PPO,
        "update.py",
        "ratio = log_ratio.sum(1, keepdim=True).exp()",
        "ratio = log_ratio.exp()",
        PPO_TESTS,
    ),
    # ---- The update around the loss (these three survived the check before).
    Mutation(
        "ppo-grad-norm-clip-removed",
        PPO,
        "update.py",
        "nn.utils.clip_grad_norm_(net.parameters(), o.max_grad_norm, foreach=True)",
        "None",
        (
            "tests/plugins/esper_tamiyo_ppo/test_learner.py::test_every_step_sees_gradients_clipped_to_max_grad_norm",
        ),
    ),
    Mutation(
        "ppo-gae-lambda-one",
        PPO,
        "update.py",
        "self.gamma, o.gae_lambda",
        "self.gamma, 1.0",
        (
            "tests/plugins/esper_tamiyo_ppo/test_learner.py::test_the_advantages_use_the_options_lambda_and_the_runs_gamma",
        ),
    ),
    Mutation(
        "ppo-explained-variance-sign",
        PPO,
        "update_stats.py",
        "float(1.0 - (returns - values).var() / var)",
        "float((returns - values).var() / var - 1.0)",
        (
            "tests/plugins/esper_tamiyo_ppo/test_learner.py::test_explained_variance_against_scikit_learn",
        ),
    ),
    # ---- GAE: nothing is bootstrapped across a terminal step.
    Mutation(
        "gae-terminal-bootstrap",
        PPO,
        "update.py",
        "gamma * next_value * not_terminal",
        "gamma * next_value",
        GAE_TESTS,
    ),
    Mutation(
        "gae-terminal-trace",
        PPO,
        "update.py",
        "gamma * gae_lambda * not_terminal * running",
        "gamma * gae_lambda * running",
        GAE_TESTS,
    ),
    # ---- The heuristic's rules.
    Mutation(
        "heuristic-min-epoch-ignored",
        HEURISTIC,
        "germination.py",
        "if obs.epoch < o.min_epoch:",
        "if False:",
        HEURISTIC_TESTS,
    ),
    Mutation(
        "heuristic-prune-cooldown-ignored",
        HEURISTIC,
        "germination.py",
        "if obs.epochs_since_prune < o.prune_cooldown:",
        "if False:",
        HEURISTIC_TESTS,
    ),
    Mutation(
        "heuristic-keep-threshold-inverted",
        HEURISTIC,
        "heuristic.py",
        "if gain is None or gain < need:",
        "if gain is None or gain > need:",
        HEURISTIC_TESTS,
    ),
    Mutation(
        "heuristic-regression-sign",
        HEURISTIC,
        "heuristic.py",
        "if drop < -o.regression_points:",
        "if drop < o.regression_points:",
        HEURISTIC_TESTS,
    ),
    Mutation(
        "heuristic-several-seeds-at-once",
        HEURISTIC,
        "germination.py",
        "if any(r.stage in LIVE_STAGES for r in obs.slots):",
        "if False:",
        HEURISTIC_TESTS,
    ),
    # ---- The reward families' terminal terms.
    Mutation(
        "pbrs-terminal-bonus-dropped",
        REWARDS,
        "pbrs.py",
        "terminal=opts.terminal_weight * ctx.val_acc / 100.0 if ctx.is_last_step else 0.0,",
        "terminal=0.0,",
        ("tests/plugins/esper_rewards/test_reward_families.py::test_pbrs_golden_last_step",),
    ),
    Mutation(
        "pbrs-terminal-bonus-every-step",
        REWARDS,
        "pbrs.py",
        "terminal=opts.terminal_weight * ctx.val_acc / 100.0 if ctx.is_last_step else 0.0,",
        "terminal=opts.terminal_weight * ctx.val_acc / 100.0,",
        ("tests/plugins/esper_rewards/test_reward_families.py::test_pbrs_golden_mid_episode",),
    ),
    Mutation(
        "simplified-terminal-weight-ignored",
        REWARDS,
        "simplified.py",
        "terminal_accuracy=opts.terminal_accuracy_weight * ctx.val_acc / 100.0 if last else 0.0,",
        "terminal_accuracy=ctx.val_acc / 100.0 if last else 0.0,",
        ("tests/plugins/esper_rewards/test_reward_families.py::test_simplified_golden_last_step",),
    ),
    Mutation(
        "simplified-fossil-bonus-dropped",
        REWARDS,
        "simplified.py",
        "fossils = useful_fossils(ctx.slots_after, opts.useful_gain) if last else 0",
        "fossils = 0",
        ("tests/plugins/esper_rewards/test_reward_families.py::test_simplified_golden_last_step",),
    ),
    Mutation(
        "sparse-terminal-clip-removed",
        REWARDS,
        "sparse.py",
        "terminal=max(-opts.clip, min(opts.clip, raw))",
        "terminal=raw",
        (
            "tests/plugins/esper_rewards/test_reward_families.py::test_sparse_golden_terminal_values",
        ),
    ),
    Mutation(
        "shaping-rollback-not-terminal",
        REWARDS,
        "common.py",
        "opts.zero_terminal_potential and (ctx.is_last_step or ctx.rolled_back)",
        "opts.zero_terminal_potential and ctx.is_last_step",
        (
            "tests/plugins/esper_rewards/test_reward_common.py::test_zero_terminal_potential_drops_phi_of_the_last_state",
        ),
    ),
    # ---- Survivors of an earlier mutation probe, pinned since.
    Mutation(
        "glyphs-val-test-same-stream",
        TASKS,
        "glyphs.py",
        '_SPLIT_STREAMS = {"train": 0, "val": 1, "test": 2}',
        '_SPLIT_STREAMS = {"train": 0, "val": 1, "test": 1}',
        GLYPH_TESTS,
    ),
    Mutation(
        "stacked-block-head-count-dropped",
        BLUEPRINTS,
        "transformer_modules.py",
        "self.attention.n_head = n_head",
        "self.attention.n_head = self.attention.n_head",
        STACKING_TESTS,
    ),
    Mutation(
        "grower-resume-ignores-group-order",
        CORE,
        "grow/loop_trainer.py",
        'self.sync_optimizers(order=list(state.get("order", [])))',
        "self.sync_optimizers()",
        (
            "tests/integration/test_grower.py::test_a_resume_rejoins_the_seeds_in_the_order_they_joined",
        ),
    ),
    Mutation(
        "grower-rollback-keeps-optimizer-state",
        CORE,
        "grow/loop_trainer.py",
        "self.optimizer.state.clear()",
        "pass",
        (
            "tests/integration/test_grower.py::test_a_rollback_drops_the_momentum_of_the_weights_it_undid",
        ),
    ),
    Mutation(
        "heuristic-slowdown-uses-flat-max-drop",
        HEURISTIC,
        "germination.py",
        "max_drop=o.slowdown_drop,",
        "max_drop=o.flat_max_drop,",
        HEURISTIC_TESTS,
    ),
    Mutation(
        "heuristic-flops-price-from-the-bare-host",
        HEURISTIC,
        "heuristic.py",
        "memory.flops_before_growth = obs.train_flops_ratio",
        "memory.flops_before_growth = 1.0",
        HEURISTIC_TESTS,
    ),
    Mutation(
        "env-flops-ratio-not-given-to-the-reward",
        CORE,
        "env/epoch_end.py",
        "train_flops_ratio=env.cost.epoch_flops_ratio(),",
        "train_flops_ratio=1.0,",
        ("tests/core/test_birth_and_cost.py::test_the_reward_is_shown_the_epochs_flops_ratio",),
    ),
    # ---- Host growth: the masks between 0 and 1, which checks at 0 and 1 miss.
    Mutation(
        "width-stage-mask-squared",
        OPERATORS,
        "width_conv.py",
        "new = None if y_new is None else y_new * self.mask.to(y_new.dtype)",
        "new = None if y_new is None else y_new * self.mask.to(y_new.dtype) ** 2",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-layer-mask-snapped-to-one",
        CORE,
        "grow/layer_widening.py",
        "self._op(new, self.cross_weight, None) * self.mask",
        "self._op(new, self.cross_weight, None) * self.mask.ceil()",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-masks-get-alpha-squared",
        CORE,
        "lifecycle/module_swap.py",
        "mask.fill_(value)",
        "mask.fill_(value * value)",
        WIDTH_TESTS,
    ),
    # ---- Host growth: biases and a later layer's new inputs at the fold.
    Mutation(
        "width-stage-consumer-bias-reinitialised",
        OPERATORS,
        "width_conv.py",
        "wide.bias = conv.bias  # no new outputs",
        "pass  # no new outputs",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-layer-fold-bias-rows-swapped",
        CORE,
        "grow/layer_widening.py",
        "(base.bias, self.out_bias), cat0",
        "(self.out_bias, base.bias), cat0",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-stage-consumer-only-not-folded",
        OPERATORS,
        "width_conv.py",
        "if cross is None and not self.out_extra:",
        "if not self.out_extra:",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-layer-folds-below-mask-one",
        CORE,
        "grow/layer_widening.py",
        "if self.in_extra and float(self.mask) != 1.0:",
        "if False:",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-layer-flatten-spread-ignored",
        CORE,
        "grow/layer_widening.py",
        "ins[pair.consumer] = more * pair.spread",
        "ins[pair.consumer] = more",
        WIDTH_TESTS,
    ),
    # ---- Host growth: the fresh BatchNorm on new channels (eval mode hid it in tolerance).
    Mutation(
        "width-layer-new-norm-skipped",
        CORE,
        "grow/layer_widening.py",
        "torch.cat([output, self.extra(new)], dim=1)",
        "torch.cat([output, new], dim=1)",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-layer-new-norm-torch-defaults",
        CORE,
        "grow/layer_widening.py",
        "norm = type(base)(extra, base.eps, base.momentum, base.affine, base.track_running_stats)",
        "norm = type(base)(extra)",
        WIDTH_TESTS,
    ),
    Mutation(
        "width-stage-new-norm-torch-defaults",
        OPERATORS,
        "width_conv.py",
        "out_extra, bn.eps, bn.momentum, bn.affine, bn.track_running_stats",
        "out_extra",
        WIDTH_TESTS,
    ),
    # ---- Host growth: a strided stage deepened, and when a declared growth can start.
    Mutation(
        "deepen-stack-copies-a-strided-conv",
        OPERATORS,
        "deepening_cnn.py",
        "if conv.stride != (1, 1):",
        "if False:",
        DEEPEN_TESTS,
    ),
    Mutation(
        "host-growth-ready-at-the-last-epoch",
        CORE,
        "env/host_growth_ready.py",
        "if env.epoch >= env.max_epochs - 1:",
        "if env.epoch >= env.max_epochs:",
        READY_TESTS,
    ),
    Mutation(
        "host-growth-ready-a-fossil-blocks-every-operator",
        CORE,
        "env/host_growth_ready.py",
        'in_the_way = LIVE_STAGES if getattr(operator, "keeps_fossils", False) else SEED_STAGES',
        "in_the_way = SEED_STAGES",
        READY_TESTS,
    ),
    Mutation(
        "host-growth-ready-every-slot-touched",
        CORE,
        "env/host_growth_ready.py",
        "(touches is None or touches(host, now, slot.spec))",
        "True",
        READY_TESTS,
    ),
    Mutation(
        "ppo-host-growth-ignores-the-env",
        PPO,
        "host_growth.py",
        "and ready(obs, choose(o, obs)[0])",
        "and True",
        PPO_GROWTH_TESTS,
    ),
    # ---- The optimizer's state through a growth's fold.
    Mutation(
        "fold-young-slices-take-the-old-step",
        CORE,
        "env/adam_ages.py",
        "[own_lags(s, p) + (k - j) for s, p, j in",
        "[own_lags(s, p) for s, p, j in",
        FOLD_TESTS,
    ),
    Mutation(
        "fold-stateless-piece-counted-one-step-old",
        CORE,
        "env/adam_ages.py",
        'if "step" in s else 0 for s in states]',
        'if "step" in s else 1 for s in states]',
        FOLD_TESTS,
    ),
    Mutation(
        "fold-young-slices-ignore-amsgrad",
        CORE,
        "env/adam_ages.py",
        'v = state["max_exp_avg_sq"] if group["amsgrad"] else state["exp_avg_sq"]',
        'v = state["exp_avg_sq"]',
        FOLD_TESTS,
    ),
    Mutation(
        "fold-lag-dropped-after-one-step",
        CORE,
        "env/adam_ages.py",
        'return bool(max(group["betas"]) ** youngest < NEGLIGIBLE)',
        "return True",
        FOLD_TESTS,
    ),
    Mutation(
        "fold-missing-piece-moments-not-zero",
        CORE,
        "env/optimizers.py",
        "and ok else torch.zeros_like(p)",
        "and ok else torch.full_like(p, 1e-4)",
        FOLD_TESTS,
    ),
    Mutation(
        "fold-piece-moments-dropped",
        CORE,
        "env/optimizers.py",
        "v if isinstance(v, torch.Tensor) and ok else torch.zeros_like(p)",
        "torch.zeros_like(p)",
        FOLD_TESTS,
    ),
    Mutation(
        "fold-carried-state-dropped",
        CORE,
        "env/optimizers.py",
        "new.state[p] = dict(old.state[p])",
        "pass",
        FOLD_TESTS,
    ),
    Mutation(
        "env-adamw-young-slices-not-hooked",
        CORE,
        "env/optimizers.py",
        "correct_young_slices(adam)",
        "None",
        FOLD_TESTS,
    ),
    Mutation(
        "grower-adam-young-slices-not-hooked",
        CORE,
        "grow/loop_trainer.py",
        "self._ages = correct_young_slices(optimizer)",
        "self._ages = None",
        FOLD_TESTS,
    ),
    # ---- The numbers a comparison states.
    Mutation(
        "crossed-interval-level-ignored",
        CORE,
        "compare/crossed_bootstrap.py",
        "tail = (1 - confidence) / 2 * 100",
        "tail = 2.5",
        CROSSED_TESTS,
    ),
    Mutation(
        "crossed-interval-not-expanded-for-few-runs",
        CORE,
        "compare/crossed_bootstrap.py",
        "scale = expansion(table, boot_means, confidence)",
        "scale = 1.0",
        CROSSED_TESTS,
    ),
    Mutation(
        "seeds-interval-level-ignored",
        CORE,
        "compare/stats.py",
        "confidence_level=confidence,",
        "confidence_level=0.95,",
        CROSSED_TESTS,
    ),
    Mutation(
        "frontier-chosen-by-the-test-metric",
        CORE,
        "compare/frontier_results.py",
        "chosen_by=per_seed_val,",
        "chosen_by=None,",
        (
            "tests/core/test_frontier.py::test_the_frontier_is_chosen_by_validation_and_drawn_at_test_values",
        ),
    ),
    Mutation(
        "tuning-chooses-a-point-that-stalled",
        CORE,
        "compare/tuning_results.py",
        "point = choose(eligible, higher) if complete else None",
        "point = choose(means, higher) if complete else None",
        ("tests/core/test_tuning.py::test_a_point_that_stalls_on_one_tuning_seed_is_never_chosen",),
    ),
    Mutation(
        "verdict-against-a-failed-arm-not-unresolved",
        CORE,
        "compare/tables.py",
        "if failed & {policy, results.baseline}:",
        "if False:",
        ("tests/core/test_stalls.py",),
    ),
    # ---- The expansion probe and the heuristic's trigger and judgement that read it.
    Mutation(
        "expansion-features-linear",
        CORE,
        "env/expansion_score.py",
        "phi = torch.relu(h @ projection)",
        "phi = h @ projection",
        ("tests/core/test_expansion_score.py",),
    ),
    Mutation(
        "expansion-trigger-threshold-inverted",
        HEURISTIC,
        "signals.py",
        "if best < ratio:",
        "if best > ratio:",
        ("tests/plugins/esper_tamiyo_heuristic/test_tamiyo_expansion.py",),
    ),
    Mutation(
        "expansion-trigger-first-slot-not-best",
        HEURISTIC,
        "germination.py",
        'slot = best_slot(legal_slots, obs.expansion if o.trigger == "expansion" else ())',
        "slot = legal_slots.index(True)",
        ("tests/plugins/esper_tamiyo_heuristic/test_tamiyo_expansion.py",),
    ),
    Mutation(
        "contribution-judge-keeps-a-short-seed",
        HEURISTIC,
        "judgement.py",
        "if c is None or c < o.min_contribution:",
        "if c is None:",
        ("tests/plugins/esper_tamiyo_heuristic/test_tamiyo_expansion.py",),
    ),
    # ---- One PPO policy on hosts of different sizes (schema 2, padded to the union).
    Mutation(
        "ppo-slots-pooling-counts-padded-slots",
        PPO,
        "slot_network.py",
        "mean, top = present_pool(h, slots[..., -1] > 0.5)",
        "mean, top = h.mean(dim=-2), h.amax(dim=-2)",
        MIXED_TESTS,
    ),
    Mutation(
        "ppo-padded-choices-legal",
        PPO,
        "distributions.py",
        "out = torch.zeros(shape, dtype=torch.bool, device=mask.device)",
        "out = torch.ones(shape, dtype=torch.bool, device=mask.device)",
        MIXED_TESTS,
    ),
    Mutation(
        "ppo-normaliser-samples-padding",
        PPO,
        "normalizers.py",
        "x = rows[rows[:, -1] > 0.5]",
        "x = rows",
        MIXED_TESTS,
    ),
    Mutation(
        "ppo-installed-blueprint-unread",
        PPO,
        "padded_features.py",
        "j = installed_index(report.blueprint, obs, n_bp)",
        "j = -1",
        MIXED_TESTS,
    ),
    # ---- A host widened around a fossil: the seed at its own widths, the rest passed by.
    Mutation(
        "fossil-fed-the-new-channels",
        CORE,
        "lifecycle/slot_forward.py",
        "    if extra == 0:\n        return None",
        "    if extra >= 0:\n        return None",
        FOSSIL_WIDTH_TESTS,
    ),
    Mutation(
        "fossil-drops-the-new-channels",
        CORE,
        "lifecycle/slot_forward.py",
        "return torch.cat([stage_forward(slot, old, series(seed, old)), new], dim)",
        "return torch.cat([stage_forward(slot, old, series(seed, old)), 0 * new], dim)",
        FOSSIL_WIDTH_TESTS,
    ),
    Mutation(
        "fossil-branch-drops-the-new-channels",
        CORE,
        "lifecycle/slot_forward.py",
        "return torch.cat([stage_forward(slot, old, branch(seed, x, old)), new], dim)",
        "return torch.cat([stage_forward(slot, old, branch(seed, x, old)), 0 * new], dim)",
        FOSSIL_WIDTH_TESTS,
    ),
    Mutation(
        "fossil-rebuilt-at-the-slots-width",
        CORE,
        "lifecycle/slot_state.py",
        "return attrs.evolve(spec, channels=channels, next_channels=after)",
        "return spec",
        FOSSIL_WIDTH_TESTS,
    ),
    Mutation(
        "widening-refused-around-a-fossil",
        OPERATORS,
        "width.py",
        "    keeps_fossils = True",
        "    keeps_fossils = False",
        (
            "tests/plugins/esper_tasks/test_width_around_fossil.py::test_a_seed_grown_then_fossilized_no_longer_blocks_a_widening",
        ),
    ),
)
BY_NAME = {m.name: m for m in MUTATIONS}


@frozen
class Outcome:
    mutation: Mutation
    caught: bool
    returncode: int
    seconds: float
    output: str

    def line(self) -> str:
        verdict = "caught" if self.caught else "SURVIVED"
        return f"{self.mutation.name:40} {verdict:8} ({self.seconds:.1f} s)"


def applies(mutation: Mutation) -> str | None:
    """Why the mutation no longer applies to the source (None: it does)."""
    text = mutation.path.read_text(encoding="utf-8")
    count = text.count(mutation.original)
    if count != 1:
        return (
            f"{mutation.name}: {mutation.original!r} occurs {count} times in "
            f"{mutation.path.relative_to(REPO)} (expected once): update tests/mutations.py"
        )
    return None


def run(mutation: Mutation, forker: Forker, timeout: int = 900) -> Outcome:
    """Apply ``mutation`` to a copy of its package and run its tests against the copy, in a
    process ``forker`` starts."""
    problem = applies(mutation)
    if problem is not None:
        raise AssertionError(problem)
    with tempfile.TemporaryDirectory(prefix="esper-mutant-") as tmp:
        root = Path(tmp)
        package = REPO / mutation.package
        copy = root / package.name
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
        target = copy / mutation.module
        target.write_text(
            target.read_text(encoding="utf-8").replace(mutation.original, mutation.mutated),
            encoding="utf-8",
        )
        args = [
            *mutation.tests,
            "-q",
            "-x",
            "-m",
            "not slow",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-o",
            "addopts=",
        ]
        started = time.perf_counter()
        returncode, output = forker.run(root, mutation.dotted, args, timeout)
        seconds = time.perf_counter() - started
    if "MUTATION NOT LOADED" in output:
        raise AssertionError(output.strip().splitlines()[-1])
    # pytest exits 1 when tests failed; anything else (2: collection error or interrupt,
    # 5: no tests) says nothing about the tests' power, so it is not counted as caught.
    # A negative code: the child was killed (-9: it ran past ``timeout``).
    if returncode not in (0, 1):
        raise AssertionError(
            f"{mutation.name}: pytest exited {returncode} on the mutant:\n{output[-3000:]}"
        )
    return Outcome(mutation, returncode == 1, returncode, seconds, output)


def main(names: list[str]) -> int:
    chosen = [BY_NAME[n] for n in names] if names else list(MUTATIONS)
    forker = Forker()
    try:
        outcomes = [run(m, forker) for m in chosen]
    finally:
        forker.close()
    for outcome in outcomes:
        print(outcome.line())
    return 0 if all(o.caught for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
