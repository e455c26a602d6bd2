"""The options of the ``ppo`` policy (``[policies.ppo]`` in a config, ``--set policies.ppo.X=...``).

Defaults follow DOMAIN.md §7 and CleanRL's PPO. The discount γ is deliberately NOT an
option: GAE and the reward normaliser use the run's ``run.gamma`` (from the
:class:`~esper_core.components.policy.PolicyContext`), the same γ the reward shaping uses.
This module imports no torch, so discovering the plugin stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrs import define

from esper_core.components import host_growth_choice as auto
from esper_core.components import host_growth_options as growth
from esper_core.config_limits import MAX_BATCH, MAX_DEPTH, MAX_EPOCHS, MAX_FACTOR, MAX_LR, MAX_WIDTH
from esper_core.converter import in_range, one_of, options_field
from esper_core.errors import ConfigError

GROWTH_FIELDS = (
    "host_growth",
    "host_growth_factor",
    "host_growth_mode",
    "host_growth_min_at",
    "host_growth_max_at",
    "host_growth_tempo",
    "host_growth_curve",
    "depth_expansion_ratio",
    "depth_topologies",
)
# Fields that define how the network reads its input: a trained checkpoint loaded with
# ``ppo:PATH`` brings its own values of these, whatever the evaluation config says.
MODEL_FIELDS = (
    "network",
    "trunk",
    "hidden_size",
    "mlp_layers",
    "normalize_observations",
    "obs_clip",
    # The growth head exists only with host_growth on, and a trained policy asks for the
    # growth it was trained to ask for: a checkpoint brings these too.
    *GROWTH_FIELDS,
    # What it was trained to read before germinating: acting earlier meets states it never
    # acted in.
    "min_epoch",
)


OP_NAMES = ("WAIT", "GERMINATE", "ADVANCE", "SET_ALPHA_TARGET", "PRUNE", "FOSSILIZE")


def _op_biases(value: object) -> str | None:
    if not isinstance(value, dict):
        return f"expected a table of op name = number, got {value!r}"
    for name, bias in value.items():
        if name not in OP_NAMES:
            return f"unknown op {name!r}; expected one of {', '.join(OP_NAMES)}"
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -20 <= bias <= 20:
            return f"{name}: expected a number in [-20, 20], got {bias!r}"
    return None


if TYPE_CHECKING:
    from esper_core.components.policy import PolicyContext


@define
class PPOOptions:
    # ---------------------------------------------------------------- network
    network: str = options_field(
        "flat",
        one_of("flat", "slots"),
        "flat: an MLP over the flat feature vector, its heads sized by this host's slots and "
        "blueprints; slots: a shared per-slot encoder with pooling over slots, per-slot slot "
        "logits and blueprints scored by their features, so a checkpoint acts on hosts with "
        "any number of slots and with blueprints installed after training.",
    )
    trunk: str = options_field(
        "mlp", one_of("mlp", "lstm"), "Shared trunk: an MLP, or an MLP encoder + LSTM."
    )
    hidden_size: int = options_field(
        128, in_range(1, MAX_WIDTH, integer=True), "Width of the trunk (and LSTM state)."
    )
    mlp_layers: int = options_field(
        2, in_range(1, MAX_DEPTH, integer=True), "Linear+tanh layers of the encoder."
    )
    init_op_bias: dict[str, float] = options_field(
        {"SET_ALPHA_TARGET": -2.0, "PRUNE": -1.0},
        _op_biases,
        "Initial bias of the op head's logits by op name (e.g. {WAIT = 1.0}): a prior over "
        "ops before any update; ops not named start at 0.",
    )
    # ---------------------------------------------------------------- rollouts
    rollout_episodes: int = options_field(
        4,
        in_range(1, 1000, integer=True),
        "Episodes of every env in one rollout (one update): rollout length = this x "
        "max_epochs steps per env.",
    )
    # ---------------------------------------------------------------- optimisation
    learning_rate: float = options_field(
        3e-3, in_range(0, MAX_LR, lo_open=True), "Adam learning rate."
    )
    adam_eps: float = options_field(1e-5, in_range(0, MAX_FACTOR, lo_open=True), "Adam epsilon.")
    anneal_lr: bool = options_field(
        True, doc="Decay the learning rate linearly to 0 over train.updates."
    )
    update_epochs: int = options_field(
        4, in_range(1, MAX_EPOCHS, integer=True), "K: passes over each rollout."
    )
    num_minibatches: int = options_field(
        4,
        in_range(1, MAX_BATCH, integer=True),
        "Minibatches per pass (of samples, or of sequence chunks for the LSTM).",
    )
    lstm_chunk_length: int = options_field(
        0,
        in_range(0, MAX_EPOCHS, integer=True),
        "LSTM training sequence length (0: the whole rollout of an env).",
    )
    max_grad_norm: float = options_field(
        0.5, in_range(0, MAX_FACTOR, lo_open=True), "Global gradient-norm clip."
    )
    # ---------------------------------------------------------------- PPO objective
    gae_lambda: float = options_field(0.95, in_range(0, 1), "GAE lambda (gamma is run.gamma).")
    clip_coef: float = options_field(
        0.2, in_range(0, MAX_FACTOR, lo_open=True), "Surrogate (and value) clip range."
    )
    # joint by measurement: on digits impaired, three training runs each, the joint clip's
    # greedy policies beat the per-head ones on the tuning seeds' validation accuracy
    # (docs/results/ppo-digits.md).
    ratio_clip: str = options_field(
        "joint",
        one_of("per_head", "joint"),
        "joint: clip the product of the used heads' ratios once, the standard PPO for a "
        "factored action (CleanRL's MultiDiscrete, Stable-Baselines3); per_head: clip each "
        "action head's ratio and sum the heads' surrogates (DOMAIN.md section 7).",
    )
    clip_value_loss: bool = options_field(
        True, doc="Clip the value loss around the rollout's values."
    )
    vf_coef: float = options_field(0.5, in_range(0, MAX_FACTOR), "Value-loss weight.")
    ent_coef: float = options_field(
        0.01, in_range(0, MAX_FACTOR), "Entropy bonus at the first update."
    )
    ent_coef_final: float = options_field(
        0.0,
        in_range(0, MAX_FACTOR),
        "Entropy bonus at the last update (linear annealing over train.updates).",
    )
    normalize_advantages: bool = options_field(True, doc="Normalise advantages per minibatch.")
    advantage_groups: str = options_field(
        "rollout",
        one_of("rollout", "pair", "seed"),
        "rollout: advantages as GAE gives them, every pair of a mixed run on one scale; "
        "pair: first normalised within each pair of the rollout (train.pairs), so a pair "
        "whose returns vary little (a small gain in its own units) weighs as much as one "
        "whose vary much, as multi-task RL scales its tasks; seed: each step's discounted "
        "return to go against the other envs that ran the same episode (train.seed_group "
        ">= 2: the same host, data and pair), normalised within that group as GRPO does, "
        "so luck of the seed cancels and only what the actions changed is credited (the "
        "critic still learns, unused by the advantages).",
    )
    target_kl: float = options_field(
        0.015, in_range(0, MAX_FACTOR), "Approx-KL target of the early stop (0 disables it)."
    )
    kl_stop_factor: float = options_field(
        1.5,
        in_range(0, MAX_FACTOR, lo_open=True),
        "Stop the update once approx KL > factor x target_kl.",
    )
    # ---------------------------------------------------------------- normalisers
    normalize_observations: bool = options_field(
        True, doc="Running mean/std of features, frozen during a rollout, updated between rollouts."
    )
    obs_clip: float = options_field(
        10.0, in_range(0, MAX_FACTOR, lo_open=True), "Clip of normalised features."
    )
    normalize_rewards: bool = options_field(
        True, doc="Divide rewards by the running std of discounted returns (no mean shift)."
    )
    reward_clip: float = options_field(
        10.0, in_range(0, MAX_FACTOR, lo_open=True), "Clip of normalised rewards."
    )
    # ---------------------------------------------------------------- acting
    min_epoch: int = options_field(
        0,
        in_range(0, MAX_EPOCHS, integer=True),
        "Germinate nothing before this many epochs are done, so the policy reads the host's "
        "own learning curve first (0: from the first decision, before the host has trained).",
    )
    deterministic: bool = options_field(
        True,
        doc="Outside training, take the most likely action of each head, and grow the host at "
        "the median of the policy's own growth moment (false: sample, as in training).",
    )
    init_from: str = options_field(
        "",
        doc="Start this training run from a slots checkpoint's network weights and "
        "observation statistics (a fresh optimiser): a checkpoint.pt, its run directory, or "
        "`pretrained` (the shipped one); its network options must be this run's. Empty: "
        "random weights.",
    )
    allow_untrained: bool = options_field(
        False,
        doc="Let `esper run` evaluate a policy with no checkpoint (random weights); without it "
        "`--policy ppo` must name one: ppo:DIR/checkpoint.pt.",
    )
    # ---------------------------------------------------------------- host growth
    host_growth: str = growth.kind_field(
        "Let the policy grow the host itself, once per episode, at the epoch it chooses "
        "(a head of its own: grow now or not, asked with WAIT when the env says the growth "
        "can start: no seed in its way, none ramping, not the last epoch): "
        "widen (a CNN's conv stages, a transformer's d_model), deepen (host_growth_mode), "
        "auto (the head says when; the host's expansion score says which, as the "
        "heuristic's auto does: see depth_expansion_ratio) or off (no such head: the "
        "shipped checkpoints' layout).",
        extra=("auto",),
    )
    depth_expansion_ratio: float = auto.ratio_field()
    depth_topologies: list[str] = auto.topologies_field()
    host_growth_factor: float = growth.factor_field()
    host_growth_mode: str = growth.mode_field()
    host_growth_min_at: float = growth.at_field(
        0.0, "The policy may grow the host from epoch round(f x max_epochs)..."
    )
    host_growth_max_at: float = growth.at_field(
        0.6, "...until epoch round(f x max_epochs), this f."
    )
    host_growth_tempo: int = growth.tempo_field()
    host_growth_curve: str = growth.curve_field()

    def __esper_validate__(self) -> list[str]:
        return growth.growth_problems(self)


# What a checkpoint written before a model field existed was trained with.
MODEL_FIELD_DEFAULTS = {
    "network": "flat",
    **{name: getattr(PPOOptions(), name) for name in GROWTH_FIELDS},
    "min_epoch": 0,
}


def check_seed_groups(options: PPOOptions, context: PolicyContext) -> None:
    """A training run comparing envs by their shared seed has groups of at least two."""
    if options.advantage_groups != "seed" or not context.total_updates:
        return
    if context.seed_group < 2:
        raise ConfigError(
            [
                'policies.ppo.advantage_groups = "seed" compares envs that share an '
                f"episode's random seed, but train.seed_group = {context.seed_group}; set "
                "train.seed_group to 2 or more (a divisor of run.n_envs)"
            ]
        )


def saved_model_fields(state: dict[str, Any]) -> dict[str, Any]:
    """The network-defining options of a checkpoint (older ones lack some: their defaults)."""
    saved = state["options"]
    return {k: saved[k] if k in saved else MODEL_FIELD_DEFAULTS[k] for k in MODEL_FIELDS}
