"""The per-episode counters of one env: seeds, refusals, reward and validation history."""

from __future__ import annotations

import math

from attrs import define, field

from esper_core.components.reward import RewardBreakdown

# What an observation reports as "epochs since the last prune" when no seed was pruned.
NEVER_PRUNED = 10_000


@define
class EpisodeStats:
    """Everything one episode counts; reset with the host, checkpointed as plain data."""

    val_history: list[float] = field(factory=list)  # last validation losses, oldest first
    acc_history: list[float] = field(factory=list)
    best_acc: float = -math.inf
    plateau_epochs: int = 0  # consecutive epochs without a gain above plateau_delta
    last_prune_epoch: int | None = None
    n_germinated: int = 0
    n_fossilized: int = 0
    n_pruned: int = 0
    n_refused: int = 0  # illegal actions
    n_gate_failures: int = 0  # legal actions whose gate failed
    train_flops: int = 0  # forward + backward FLOPs of every training batch so far
    train_samples: int = 0  # samples of every training batch so far
    # Training FLOPs per sample of the bare host (counted once on it, by the CostMeter; None
    # before the first batch): the growth's FLOPs baseline.
    host_flops_per_sample: float | None = None
    reward_total: float = 0.0
    reward_components: dict[str, float] = field(factory=dict)

    def record_validation(
        self, accuracy: float, loss: float, plateau_delta: float, history_length: int
    ) -> None:
        if accuracy > self.best_acc + plateau_delta:
            self.plateau_epochs = 0
        else:
            self.plateau_epochs += 1
        self.best_acc = max(self.best_acc, accuracy)
        self.val_history.append(loss)
        self.acc_history.append(accuracy)
        del self.val_history[:-history_length], self.acc_history[:-history_length]

    def record_prune(self, epoch: int) -> None:
        self.n_pruned += 1
        self.last_prune_epoch = epoch

    def epochs_since_prune(self, epoch: int) -> int:
        return NEVER_PRUNED if self.last_prune_epoch is None else epoch - self.last_prune_epoch

    def add_reward(self, breakdown: RewardBreakdown) -> None:
        self.reward_total += breakdown.total
        for key, value in breakdown.components.items():
            self.reward_components[key] = self.reward_components.get(key, 0.0) + value
