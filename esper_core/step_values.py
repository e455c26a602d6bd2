"""The values of one env step: what a policy observes after an epoch (Observation) and
what the step returns to the executor, the runner and the policy (StepResult, with the
epoch's EpochMetrics).

Below the env (env/, which builds them) and the policy protocols (components/policy.py,
which name them): neither imports the other for them. observe() and the feature vector
stay in env/observation.py.
"""

from __future__ import annotations

from typing import Any

from attrs import field, frozen

from esper_core.lifecycle.actions import ActionMasks
from esper_core.lifecycle.gates import GateResult
from esper_core.lifecycle.slot_state import SlotReport
from esper_core.run.telemetry import EpochScores, Event


@frozen
class Observation:
    """The structured observation of one env after an epoch (before the next action)."""

    env_index: int
    epoch: int  # epochs completed in this episode
    max_epochs: int
    val_loss: float
    val_acc: float  # percent
    train_loss: float
    train_acc: float
    chance_loss: float
    loss_history: tuple[float, ...]  # last validation losses, oldest first
    acc_history: tuple[float, ...]
    plateau_epochs: int  # consecutive epochs without a gain above plateau_delta
    best_acc: float
    epochs_since_prune: int  # since the last prune in this episode (large if never)
    host_params: int
    seed_params: int
    slots: tuple[SlotReport, ...]
    gates: tuple[GateResult | None, ...]  # the next gate of each slot, evaluated now
    masks: ActionMasks
    rolled_back: bool = False
    # Per blueprint (in ActionSpace order): epochs a new seed of it trains before it
    # touches the output (0: it blends from germination); see lifecycle.isolation.
    epochs_before_blending: tuple[int, ...] = ()
    # The last epoch's training FLOPs over the bare host's on the same samples (1: no
    # growth): what a compute-aware policy prices its seeds by.
    train_flops_ratio: float = 1.0
    # Per slot (in slot order): the slot's expansion score over the host's
    # (esper_core.env.expansion_score), measured after this epoch; NaN where the probe
    # saw no gradient, () with env.expansion_batches = 0.
    expansion: tuple[float, ...] = ()
    # What each blueprint IS, so a policy can describe it by its features instead of its
    # index in the vocabulary (PPO's `slots` network): the parameters a new seed of each
    # blueprint would have in each slot ([slot][blueprint], ActionSpace order; 0 where it
    # cannot grow), and per blueprint whether it is the identity at birth and a branch.
    blueprint_params: tuple[tuple[int, ...], ...] = ()
    blueprint_identity: tuple[bool, ...] = ()
    blueprint_branch: tuple[bool, ...] = ()
    # Per growth the policy declared (GrowsHostOnline.online_host_growths, in order):
    # whether it can start now (esper_core.env.host_growth_ready); () when none.
    host_growth_ready: tuple[bool, ...] = ()
    # The kind of each of those growths ("width", "depth"), in the same order: a policy
    # that declared several reads which the host took (a host without a depth operator
    # declares only its width growth).
    host_growth_kinds: tuple[str, ...] = ()
    # The env's task topology ("cnn", "transformer", "mlp"): a policy acting on envs of
    # several tasks at once (train.pairs) reads it per observation.
    topology: str = ""
    # The env's own blueprint keys (its ActionSpace order; a mixed run's space names
    # blueprints by position): what names the blueprint of each slot's installed seed
    # among blueprint_identity and blueprint_branch. () where the env does not say.
    blueprints: tuple[str, ...] = ()
    # False where the env saw no training batch of its own (a Grower: the user's loop
    # trains; before the first epoch): train_loss and train_acc then hold validation's,
    # and a reason that quotes them must say so.
    train_measured: bool = True
    # The label of the pair this env drew for the episode in a mixed run (train.pairs;
    # "" otherwise): a key a learner may group its statistics by (PPO's per-pair
    # advantage normalisation), never a feature, since a host it has never seen has none.
    pair: str = ""
    # The env's random seed this episode (host, data order, pair): envs of a training run
    # that share it (train.seed_group) ran the same episode but for their actions, a key
    # a learner may compare them by (PPO's advantage_groups = "seed"), never a feature.
    seed: int = 0


@frozen
class EpochMetrics(EpochScores):
    """Host numbers of one epoch, already on the CPU (one sync per epoch): the scores
    (losses, accuracies) the epoch event reports, then its time and batch count."""

    epoch_time: float
    batches: int


@frozen
class StepResult:
    """The outcome of one RL step (= one host epoch) of one env.

    ``done``: the episode is over (last epoch). ``terminal``: the value of the next
    state must not be bootstrapped: the episode ended or the governor rolled back,
    which ends this env's rollout segment (and only this env's).
    """

    env_index: int
    observation: Observation
    reward: float
    reward_components: dict[str, float]
    done: bool
    terminal: bool
    metrics: EpochMetrics
    refused: str | None = None  # why the action was refused, if it was
    rolled_back: bool = False
    events: list[Event] = field(factory=list)
    info: dict[str, Any] = field(factory=dict)
    # Why the policy chose the epoch's action (its Action.reason), after what the host did
    # at that boundary ("host widening, ramp 2/5; ...": esper_core.env.decision).
    reason: str = ""
