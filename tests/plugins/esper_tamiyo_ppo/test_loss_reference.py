"""The PPO loss against a plain, independent computation of every component.

A small hand-made minibatch covers what the loss must get right: per-head ratios inside
and outside the clip range, with positive and negative advantages (so the clip binds on
both sides of 1 and lets go where PPO says it must), value predictions that moved
further than the clip from the rollout's (so the clipped value loss is sometimes the
larger one), and heads the op does not read as well as illegal choices in the masks.

The reference follows the order of CleanRL's ``ppo.py`` minibatch step, written out one
sample and one head at a time, with the two differences DOMAIN.md §7 asks for: the
surrogate is clipped per head and summed over the heads the op uses (CleanRL has one
joint ratio, which ``ratio_clip = "joint"`` follows and the reference computes too), and advantages are normalised with the population std (CleanRL's
``.std()`` is Bessel-corrected; over several ranks the minibatch's std is the population
one). Approx-KL is CleanRL's ``(ratio - 1) - log ratio`` on the joint ratio.

These tests are what ``tests/mutations.py`` relies on to catch a wrong loss: each
mutation listed there must make one of them fail.
"""

from __future__ import annotations

import attrs
import pytest
import torch
from esper_tamiyo_ppo.distributions import MASK_VALUE, BatchMasks, used_heads_table
from esper_tamiyo_ppo.minibatches import FlatRollout, Share
from esper_tamiyo_ppo.network import HEAD_CONDITION, ActorCritic
from esper_tamiyo_ppo.options import PPOOptions
from esper_tamiyo_ppo.update import ppo_loss
from esper_tamiyo_ppo.update_stats import N_HEADS, N_SCALARS, SCALAR_STATS

from esper_core.env.observation import feature_dim
from esper_core.lifecycle.actions import HEADS, OP_HEADS, OPS, LifecycleOp
from tests.plugins.esper_tamiyo_ppo.helpers import HISTORY, SPACE

OPTIONS = PPOOptions(clip_coef=0.2, vf_coef=0.5, hidden_size=8, mlp_layers=1)
ENT_COEF = 0.05
Op = LifecycleOp
# One row per sample: the op, its slot, blueprint, style, tempo and alpha target (the
# heads the op does not read hold the canonical 0), the target ratio of each head it
# reads (old log-prob = new log-prob - log ratio), the raw advantage, how far the new
# value moved from the rollout's value and the return's offset from the new value.
ROWS = [
    # op                   s  b  st t  a  ratios per used head          adv   moved  ret
    (Op.GERMINATE, 1, 2, 1, 2, 0, (1.5, 1.05, 0.7, 1.1, 1.3), 1.5, -0.5, -1.0),
    (Op.WAIT, 0, 0, 0, 0, 0, (0.6,), -0.7, 0.5, 1.0),
    (Op.PRUNE, 1, 0, 0, 0, 0, (1.1, 0.9), 0.3, 0.05, 0.4),
    (Op.SET_ALPHA_TARGET, 0, 0, 0, 0, 1, (0.5, 1.4, 1.0), -2.0, -0.3, 0.6),
    (Op.ADVANCE, 0, 0, 0, 0, 0, (1.6, 0.95), 0.9, 0.3, 0.2),
    (Op.FOSSILIZE, 1, 0, 0, 0, 0, (0.75, 1.25), -0.2, 0.0, -0.5),
    (Op.WAIT, 0, 0, 0, 0, 0, (1.3,), 2.5, 0.25, -0.8),
    (Op.GERMINATE, 0, 1, 0, 1, 0, (0.9, 0.85, 1.15, 1.0, 0.7), -1.1, -0.1, 0.3),
    # every head inside the clip range, their product (1.64) far outside it
    (Op.GERMINATE, 1, 0, 1, 0, 0, (1.15, 1.1, 1.12, 1.05, 1.1), 1.8, 0.1, 0.2),
]


def _masks(batch: int) -> BatchMasks:
    """Every chosen action legal; elsewhere some choices masked (illegal)."""
    sizes = SPACE.head_sizes
    op = torch.ones(batch, len(OPS), dtype=torch.bool)
    slot = torch.ones(batch, len(OPS), sizes["slot"], dtype=torch.bool)
    blueprint = torch.ones(batch, sizes["slot"], sizes["blueprint"], dtype=torch.bool)
    style = torch.ones(batch, sizes["style"], dtype=torch.bool)
    tempo = torch.ones(batch, sizes["tempo"], dtype=torch.bool)
    alpha = torch.ones(batch, sizes["slot"], sizes["alpha_target"], dtype=torch.bool)
    for b, (chosen, s, bp, _st, tp, a, *_rest) in enumerate(ROWS):
        others = [o for o in OPS if o != chosen and o != Op.WAIT]
        op[b, others[b % len(others)]] = False  # an illegal op
        slot[b, int(chosen), 1 - s] = b % 2 == 0  # the other slot illegal in half the rows
        blueprint[b, s, (bp + 1) % sizes["blueprint"]] = False
        blueprint[b, 1 - s, bp] = False  # the chosen blueprint cannot grow in the other slot
        tempo[b, (tp + 1) % sizes["tempo"]] = False
        alpha[b, s, 1 - a] = False
    return BatchMasks(op, slot, blueprint, style, tempo, alpha)


def _network() -> ActorCritic:
    torch.manual_seed(3)
    net = ActorCritic(feature_dim(SPACE, HISTORY), SPACE.head_sizes, "mlp", 8, 1)
    # Policy heads start near uniform (gain 0.01); spread them so probabilities differ.
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for head in net.heads.values():
            head.weight.copy_(torch.randn(head.weight.shape, generator=gen))
    return net


def _reference_heads(
    net: ActorCritic, features: torch.Tensor, masks: BatchMasks, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sample and head: log-prob of the stored action, entropy, used (bool); a plain
    loop over samples and heads, the heads fed the features and their parent's one-hot."""
    batch, n_heads = actions.shape
    log_probs = torch.zeros(batch, n_heads)
    entropies = torch.zeros(batch, n_heads)
    used = torch.zeros(batch, n_heads, dtype=torch.bool)
    for b in range(batch):
        op = int(actions[b, 0])
        for h, head in enumerate(HEADS):
            if head not in OP_HEADS[LifecycleOp(op)]:
                continue
            parent = HEAD_CONDITION[head]
            inputs = features[b]
            if parent is not None:
                index = int(actions[b, HEADS.index(parent)])
                onehot = torch.zeros(net.head_sizes[parent])
                onehot[index] = 1.0
                inputs = torch.cat([inputs, onehot])
            if head == "slot":
                legal = masks.slot[b, op]
            elif head in ("alpha_target", "blueprint"):
                legal = getattr(masks, head)[b, int(actions[b, 1])]
            else:
                legal = getattr(masks, head)[b]
            logits = torch.where(legal, net.heads[head](inputs), torch.tensor(MASK_VALUE))
            log_p = torch.log_softmax(logits, dim=-1)
            log_probs[b, h] = log_p[int(actions[b, h])]
            entropies[b, h] = -(log_p.exp() * log_p).sum()
            used[b, h] = True
    return log_probs, entropies, used


class Case:
    """The minibatch, the loss under test and the reference's components."""

    def __init__(self, options: PPOOptions) -> None:
        torch.manual_seed(5)
        self.options = options
        self.net = _network()
        batch = len(ROWS)
        self.obs = torch.randn(batch, feature_dim(SPACE, HISTORY))
        self.actions = torch.tensor([[int(r[0]), *r[1:6]] for r in ROWS], dtype=torch.long)
        self.masks = _masks(batch)
        with torch.no_grad():
            features = self.net.encoder(self.obs)
            new_logp, _, used = _reference_heads(self.net, features, self.masks, self.actions)
            new_values = self.net.value(features)
        log_ratio = torch.zeros(batch, len(HEADS))
        for b, row in enumerate(ROWS):
            log_ratio[b, used[b]] = torch.log(torch.tensor(row[6]))
        self.target_ratio = log_ratio.exp()
        self.used = used
        self.old_log_probs = torch.where(used, new_logp - log_ratio, 0.0)
        self.advantages = torch.tensor([r[7] for r in ROWS])
        self.old_values = new_values - torch.tensor([r[8] for r in ROWS])
        self.returns = new_values + torch.tensor([r[9] for r in ROWS])

    def loss(self, ent_coef: float = ENT_COEF) -> tuple[torch.Tensor, dict[str, float]]:
        batch = len(ROWS)
        rollout = FlatRollout(
            obs=self.obs,
            starts=torch.zeros(batch, dtype=torch.bool),
            state_h=torch.zeros(batch, 0),
            state_c=torch.zeros(batch, 0),
            actions=self.actions,
            log_probs=self.old_log_probs,
            values=self.old_values,
            returns=self.returns,
            advantages=self.advantages,
            masks=self.masks,
            positions=torch.arange(batch).view(1, batch),
            padding=None,
        )
        part = torch.arange(batch)
        loss, stats = ppo_loss(
            self.net,
            self.options,
            part,
            rollout,
            ent_coef,
            Share(1, None),
            part,
            None,
            used_heads_table(),
        )
        out = dict(zip(SCALAR_STATS, stats[:N_SCALARS].tolist()))
        used_counts = stats[N_SCALARS + N_HEADS :]
        out["clip_fraction"] = out["n_clipped"] / out["n_ratios"]
        out["entropy_per_head"] = stats[N_SCALARS : N_SCALARS + N_HEADS].tolist()
        out["used_per_head"] = used_counts.tolist()
        return loss, out

    def reference(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """CleanRL's minibatch step, in its order, one sample and head at a time."""
        o = self.options
        features = self.net.encoder(self.obs)
        newlogprob, entropy, used = _reference_heads(self.net, features, self.masks, self.actions)
        newvalue = self.net.value(features)
        logratio = (newlogprob - self.old_log_probs) * used  # per head; 0 where unused
        ratio = logratio.exp()
        joint_ratio = logratio.sum(1).exp()
        with torch.no_grad():
            joint = logratio.sum(1)
            approx_kl = ((joint.exp() - 1) - joint).mean()
            if o.ratio_clip == "joint":
                outside = (joint_ratio - 1.0).abs() > o.clip_coef
                clipfrac = outside.sum() / len(ROWS)
            else:
                outside = ((ratio - 1.0).abs() > o.clip_coef) & used
                clipfrac = outside.sum() / used.sum()
        mb_advantages = self.advantages
        if o.normalize_advantages:
            mean = mb_advantages.mean()
            std = ((mb_advantages - mean) ** 2).mean().sqrt()
            mb_advantages = (mb_advantages - mean) / (std + 1e-8)
        pg_per_sample = []
        for b in range(len(ROWS)):
            if o.ratio_clip == "joint":  # CleanRL's one ratio per sample
                pg_loss1 = -mb_advantages[b] * joint_ratio[b]
                pg_loss2 = -mb_advantages[b] * torch.clamp(
                    joint_ratio[b], 1 - o.clip_coef, 1 + o.clip_coef
                )
                pg_per_sample.append(torch.max(pg_loss1, pg_loss2))
                continue
            total = torch.zeros(())
            for h in range(len(HEADS)):
                if not used[b, h]:
                    continue
                pg_loss1 = -mb_advantages[b] * ratio[b, h]
                pg_loss2 = -mb_advantages[b] * torch.clamp(
                    ratio[b, h], 1 - o.clip_coef, 1 + o.clip_coef
                )
                total = total + torch.max(pg_loss1, pg_loss2)
            pg_per_sample.append(total)
        pg_loss = torch.stack(pg_per_sample).mean()
        v_loss_unclipped = (newvalue - self.returns) ** 2
        if o.clip_value_loss:
            v_clipped = self.old_values + torch.clamp(
                newvalue - self.old_values, -o.clip_coef, o.clip_coef
            )
            v_loss_clipped = (v_clipped - self.returns) ** 2
            v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
        else:
            v_loss = 0.5 * v_loss_unclipped.mean()
        entropy_loss = (entropy * used).sum(1).mean()
        loss = pg_loss - ENT_COEF * entropy_loss + v_loss * o.vf_coef
        parts = {
            "pg_loss": pg_loss,
            "v_loss": v_loss,
            "entropy": entropy_loss,
            "approx_kl": approx_kl,
            "clip_fraction": clipfrac,
            "ratio_deviation": (joint_ratio - 1.0).abs().sum()
            if o.ratio_clip == "joint"
            else ((ratio - 1.0).abs() * used).sum(),
            "n_clipped": outside.sum(),
            "entropy_per_head": (entropy * used).sum(0),
            "used_per_head": used.sum(0),
        }
        return loss, parts


def _close(actual: object, expected: torch.Tensor, name: str) -> None:
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float32),
        expected.detach().to(torch.float32),
        rtol=1e-5,
        atol=1e-6,
        msg=lambda m: f"{name}: {m}",
    )


def test_the_batch_covers_what_the_loss_must_get_right() -> None:
    """Guards the fixture: a later edit must keep each case in it."""
    case = Case(OPTIONS)
    clip = OPTIONS.clip_coef
    adv = case.advantages
    mean = adv.mean()
    normed = (adv - mean) / ((adv - mean) ** 2).mean().sqrt()
    r, used = case.target_ratio, case.used
    positive, negative = (normed > 0).unsqueeze(1), (normed < 0).unsqueeze(1)
    assert bool((used & positive & (r > 1 + clip)).any()), "clip binds above 1 (A > 0)"
    assert bool((used & negative & (r < 1 - clip)).any()), "clip binds below 1 (A < 0)"
    assert bool((used & positive & (r < 1 - clip)).any()), "clip lets go below 1 (A > 0)"
    assert bool((used & negative & (r > 1 + clip)).any()), "clip lets go above 1 (A < 0)"
    assert bool((used & ((r - 1).abs() < clip)).any()), "ratios inside the range"
    assert not bool(used.all()), "heads the op ignores"
    assert not bool(case.masks.blueprint.all()) and not bool(case.masks.slot.all())
    with torch.no_grad():
        new_values = case.net.value(case.net.encoder(case.obs))
    moved = (new_values - case.old_values).abs() > clip
    clipped = case.old_values + (new_values - case.old_values).clamp(-clip, clip)
    larger = (clipped - case.returns) ** 2 > (new_values - case.returns) ** 2
    assert bool((moved & larger).any()) and bool((moved & ~larger).any())
    assert abs(float(adv.mean())) > 0.1 and abs(float(adv.std()) - 1) > 0.1, "not normalised"


@pytest.mark.parametrize(
    "options",
    [
        OPTIONS,
        attrs.evolve(OPTIONS, clip_value_loss=False),
        attrs.evolve(OPTIONS, normalize_advantages=False),
        attrs.evolve(OPTIONS, ratio_clip="joint"),
        attrs.evolve(OPTIONS, ratio_clip="joint", normalize_advantages=False),
    ],
    ids=["defaults", "value-loss-unclipped", "advantages-raw", "joint", "joint-raw"],
)
def test_every_component_matches_the_reference(options: PPOOptions) -> None:
    case = Case(options)
    loss, stats = case.loss()
    expected_loss, parts = case.reference()
    for name in ("pg_loss", "v_loss", "entropy", "approx_kl", "clip_fraction"):
        _close(stats[name], parts[name], name)
    _close(stats["ratio_deviation"], parts["ratio_deviation"], "ratio_deviation")
    _close(stats["n_clipped"], parts["n_clipped"], "n_clipped")
    _close(stats["entropy_per_head"], parts["entropy_per_head"], "entropy per head")
    _close(stats["used_per_head"], parts["used_per_head"], "heads used")
    _close(loss, expected_loss, "total loss")


@pytest.mark.parametrize("ratio_clip", ["per_head", "joint"])
def test_the_gradient_matches_the_reference(ratio_clip: str) -> None:
    """The same loss could still detach the wrong term: compare every parameter's gradient."""
    case = Case(attrs.evolve(OPTIONS, ratio_clip=ratio_clip))
    loss, _ = case.loss()
    ours = torch.autograd.grad(loss, list(case.net.parameters()), allow_unused=True)
    expected_loss, _ = case.reference()
    theirs = torch.autograd.grad(expected_loss, list(case.net.parameters()), allow_unused=True)
    for (name, _p), a, b in zip(case.net.named_parameters(), ours, theirs, strict=True):
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_the_joint_clip_stops_a_germinate_whose_heads_each_stay_inside_the_range() -> None:
    """The last row: every head's ratio within 1 +- 0.2, the joint ratio 1.64, a positive
    advantage. Per-head clipping still pushes its probability up; the joint clip does not."""
    row = len(ROWS) - 1
    r = Case(OPTIONS).target_ratio[row]
    assert bool(((r - 1).abs() < OPTIONS.clip_coef).all()) and float(r.prod()) > 1.6

    def policy_gradient(ratio_clip: str) -> float:
        """The gradient of our loss with only this row's advantage, no value or entropy term."""
        options = attrs.evolve(
            OPTIONS, ratio_clip=ratio_clip, normalize_advantages=False, vf_coef=0.0
        )
        case = Case(options)
        case.advantages = torch.where(torch.arange(len(ROWS)) == row, 1.0, 0.0)
        loss, _ = case.loss(ent_coef=0.0)
        grads = torch.autograd.grad(loss, list(case.net.parameters()), allow_unused=True)
        return sum(float(g.abs().sum()) for g in grads if g is not None)

    assert policy_gradient("per_head") > 0.0
    assert policy_gradient("joint") == 0.0
