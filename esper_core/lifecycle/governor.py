"""The governor: per-env safety rollback (DOMAIN §8).

It keeps exactly one snapshot (host + fossilized seeds, on the CPU), taken every
``snapshot_every`` epochs and after each fossilization, with non-blocking copies (see
:mod:`~esper_core.lifecycle.host_copy`). It panics at once on a
non-finite loss, or for ``consecutive`` epochs in a row of either

- a validation loss above every floor (``k_chance`` x chance-level loss, mean +
  ``sigma`` std and ``mean_multiplier`` x mean of the recent healthy history); before
  the history holds ``min_history`` losses only the first floor exists, and it alone
  applies, so a model that diverges from its first epoch cannot make its own huge
  losses the history every later loss is judged by;
- a validation accuracy at chance level (at most ``chance_band`` x the accuracy of a
  uniform guess, ``exp(-chance_loss)``) when the snapshot was clearly better. A model
  can collapse to predicting one class while its loss stays under every floor (a
  host learning rate far too high does this); a rollback helps only when the
  snapshot it restores was above chance, so only then does the accuracy count.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from attrs import frozen

from esper_core.config import GovernorSection
from esper_core.lifecycle import rules
from esper_core.lifecycle.host_copy import HostCopy
from esper_core.lifecycle.model import MorphogeneticModel


@frozen
class Verdict:
    panic: bool
    reason: str = ""


class Governor:
    def __init__(self, cfg: GovernorSection, chance_loss: float) -> None:
        self.cfg = cfg
        self.chance_loss = chance_loss
        self.history: deque[float] = deque(maxlen=cfg.history)
        self.strikes = 0
        self.chance_strikes = 0  # consecutive epochs at chance accuracy
        self.last_accuracy: float | None = None  # of the last judged epoch
        self.snapshot_accuracy: float | None = None  # of the model in the snapshot
        self._snapshot: HostCopy | None = None
        self.snapshot_epoch = -1
        self.rollbacks = 0

    def floor(self) -> float:
        """The loss above which an epoch counts as a strike: with too little history for
        statistics, the chance-level floor alone."""
        chance_floor = self.cfg.k_chance * self.chance_loss
        if len(self.history) < self.cfg.min_history:
            return chance_floor
        mean = statistics.fmean(self.history)
        std = statistics.pstdev(self.history)
        return max(chance_floor, mean + self.cfg.sigma * std, self.cfg.mean_multiplier * mean)

    @property
    def chance_accuracy(self) -> float:
        """Validation accuracy (points) at or below which the model is at chance level."""
        return self.cfg.chance_band * 100.0 * math.exp(-self.chance_loss)

    def check(
        self, val_loss: float, train_finite: bool = True, val_acc: float | None = None
    ) -> Verdict:
        """Judge one epoch's validation loss (and accuracy); healthy losses join the history."""
        if not self.cfg.enabled:
            return Verdict(False)
        if not math.isfinite(val_loss) or not train_finite:
            return Verdict(
                True,
                "non-finite loss"
                + ("" if math.isfinite(val_loss) else f" (validation {val_loss})"),
            )
        self.last_accuracy = val_acc
        collapsed = self._at_chance(val_acc)
        if collapsed is not None:
            return collapsed
        floor = self.floor()
        if val_loss > floor:
            self.strikes += 1
            if self.strikes >= self.cfg.consecutive:
                return Verdict(
                    True,
                    f"validation loss {val_loss:.4g} above {floor:.4g} for {self.strikes} consecutive epochs",
                )
            return Verdict(False)
        self.strikes = 0
        self.history.append(val_loss)
        return Verdict(False)

    def _at_chance(self, val_acc: float | None) -> Verdict | None:
        """A panic once accuracy has sat at chance level for ``consecutive`` epochs while
        the snapshot is above it; None otherwise (the loss checks decide)."""
        chance = self.chance_accuracy
        better_snapshot = self.snapshot_accuracy is not None and self.snapshot_accuracy > chance
        if not self.cfg.chance_band or val_acc is None or val_acc > chance or not better_snapshot:
            self.chance_strikes = 0
            return None
        self.chance_strikes += 1
        if self.chance_strikes < self.cfg.consecutive:
            return None
        return Verdict(
            True,
            f"validation accuracy {val_acc:.1f}% at chance level (<= {chance:.1f}%) for "
            f"{self.chance_strikes} consecutive epochs; the snapshot had {self.snapshot_accuracy:.1f}%",
        )

    # ------------------------------------------------------------ snapshots

    @property
    def snapshot_state(self) -> dict[str, Any] | None:
        """The snapshot on the CPU (waits for its copies to finish), None before the first."""
        return None if self._snapshot is None else self._snapshot.get()

    def take_snapshot(self, model: MorphogeneticModel, epoch: int) -> None:
        """Copy host and fossil weights to the CPU, replacing the previous snapshot.

        The copies are queued without blocking; :attr:`snapshot_state` waits for them.
        """
        if model.host_growth is not None:
            # Mid-growth the host's modules are masked ones; a rollback prunes the growth
            # first, so the snapshot it loads must be of the host before it (kept).
            return
        self.snapshot_accuracy = self.last_accuracy  # the model judged last is the one copied
        fossils = {
            slot.slot_id: slot.state_dict()
            for slot in model.iter_slots()
            if rules.is_fossil(slot.stage)
        }
        with model.host_own():  # the seeds' weights are not the host's
            host = model.host.state_dict()
        self._snapshot = HostCopy({"host": host, "fossils": fossils})
        self.snapshot_epoch = epoch

    def due(self, epoch: int) -> bool:
        return epoch - self.snapshot_epoch >= self.cfg.snapshot_every

    def rollback(self, model: MorphogeneticModel) -> list[str]:
        """Restore the snapshot and prune every live seed; return the pruned slot ids."""
        snapshot = self.snapshot_state
        if snapshot is None:
            raise RuntimeError(
                "governor rollback without a snapshot; take_snapshot() runs at reset"
            )
        with model.host_own():
            model.host.load_state_dict(snapshot["host"])
        for slot_id, slot_state in snapshot["fossils"].items():
            model.slot(slot_id).load_state_dict(slot_state)
        pruned = []
        for slot in model.iter_slots():
            if slot.stage in rules.LIVE_STAGES:
                slot.prune()
                pruned.append(slot.slot_id)
        self.strikes = self.chance_strikes = 0
        self.rollbacks += 1
        return pruned

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": list(self.history),
            "strikes": self.strikes,
            "snapshot": self.snapshot_state,
            "snapshot_epoch": self.snapshot_epoch,
            "rollbacks": self.rollbacks,
            "chance_strikes": self.chance_strikes,
            "last_accuracy": self.last_accuracy,
            "snapshot_accuracy": self.snapshot_accuracy,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = deque(state["history"], maxlen=self.cfg.history)
        self.strikes = int(state["strikes"])
        snapshot = state["snapshot"]
        self._snapshot = None if snapshot is None else HostCopy(snapshot)
        self.snapshot_epoch = int(state["snapshot_epoch"])
        self.rollbacks = int(state["rollbacks"])
        self.chance_strikes = int(state["chance_strikes"])
        self.last_accuracy = state["last_accuracy"]
        self.snapshot_accuracy = state["snapshot_accuracy"]
