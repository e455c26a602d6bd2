"""The env of growth in the user's own loop: :class:`MorphogeneticEnv` with the user's
model, the user's optimizer and the user's validation batches.

Everything after an epoch is the env's own code (``end_epoch``: slot measurements,
governor, stage ticks, reward, observation; ``apply_action``: the lifecycle rules);
this subclass only says where the model, the trainer and the validation data come
from. The user's loop trains, so the env's own batch loop never runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from attrs import define
from torch import nn

from esper_core.components.blueprint import Blueprint
from esper_core.components.growth_operator import GrowthOperator
from esper_core.components.reward import RewardFamily, SlotSnapshot
from esper_core.components.task import BatchMetrics, TaskData
from esper_core.config import RunConfig
from esper_core.converter import structure, unstructure
from esper_core.env import birth, decision, host_growth
from esper_core.env.apply import ActionOutcome, StepStart
from esper_core.env.cost import CostMeter, account_training
from esper_core.env.decision import StepDecision
from esper_core.env.env import MorphogeneticEnv
from esper_core.env.episode import EpisodeStats
from esper_core.env.evaluation import EvalResult, validate_pending
from esper_core.env.events import StepEvents
from esper_core.env.observation import observe
from esper_core.env.pending import Pending, fetch
from esper_core.env.state import env_state
from esper_core.env.step import StepResult
from esper_core.env.training import TrainStats
from esper_core.errors import CheckpointError, GrowerError
from esper_core.grow.loop_trainer import LoopTrainer
from esper_core.grow.module_host import ModuleHost
from esper_core.lifecycle.actions import Action
from esper_core.lifecycle.governor import Governor
from esper_core.lifecycle.model import MorphogeneticModel


@define
class LoopTask:
    """A task as far as the env needs one in the user's loop: classification (or a
    language model's next token) with cross-entropy on the validation batches."""

    name: ClassVar[str] = "loop"
    description: ClassVar[str] = "The user's own model and data (library API)."
    Options: ClassVar[type] = dict

    topology: str
    num_classes: int
    host: nn.Module
    options: Any = None
    default_max_epochs: int = 100
    default_batch_size: int = 1
    default_eval_batch_size: int = 1

    @property
    def chance_loss(self) -> float:
        return math.log(max(self.num_classes, 2))

    def build_host(self) -> nn.Module:
        return self.host

    def load_data(self, device: torch.device) -> TaskData:
        raise GrowerError("the user's loop owns the data; pass validation batches to end_epoch()")

    def prepare_batch(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        train: bool,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return inputs, targets

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> BatchMetrics:
        flat, labels = outputs.detach().reshape(-1, outputs.shape[-1]), targets.reshape(-1)
        return BatchMetrics(
            loss_sum=F.cross_entropy(flat, labels, reduction="sum"),
            correct=(flat.argmax(dim=-1) == labels).sum(),
            count=torch.full((), labels.numel(), dtype=torch.int64, device=labels.device),
        )


class LoopEnv(MorphogeneticEnv):
    """See the module docstring. ``make_model`` builds the model around the host once,
    with the env's blueprint resolver; the env keeps that model for good."""

    def __init__(
        self,
        task: LoopTask,
        reward: RewardFamily,
        blueprints: Sequence[Blueprint],
        config: RunConfig,
        trainer_options: dict[str, Any],
        device: torch.device,
        operators: Sequence[GrowthOperator] = (),
    ) -> None:
        self._trainer_options = trainer_options
        self._val: Iterable[Any] | None = None
        self._first_val: tuple[torch.Tensor, torch.Tensor] | None = None
        self._kept: tuple[MorphogeneticModel, LoopTrainer] | None = None
        self._loop_train: TrainStats | None = None
        super().__init__(task, reward, blueprints, config, 0, device, operators)

    @property
    def last_train(self) -> TrainStats | None:
        """None: the user's loss is never seen, so observations show validation's numbers."""
        return None

    @last_train.setter
    def last_train(self, value: TrainStats | None) -> None:
        self._loop_train = value

    @property
    def trainer_stats(self) -> TrainStats | None:
        """The last epoch's seed gradient statistics."""
        return self._loop_train

    def _build(self, seed: int) -> None:
        if self._kept is None:
            model = MorphogeneticModel(
                self.task.build_host(), self._resolve_blueprint, self.settings
            ).to(self.device)
            trainer = LoopTrainer(model, self.config.training, **self._trainer_options)
            self._kept = (model, trainer)
        self.model, self.trainer = self._kept
        self.host_params = self.model.host_param_count()
        self.birth_host_params = self.host_params  # what params_added counts from
        self.governor = Governor(self.config.governor, self.task.chance_loss)
        self.cost = CostMeter(tuple(self.operators.values()))
        self.generator = torch.Generator().manual_seed(seed)

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """The env's load, on the kept model: the user's module, widened by the growths it
        has had, can take only a state of those same growths (or of more, if it had none)."""
        if self._kept is not None and self._kept[0].host_growths:
            self.model = self._kept[0]
            if tuple(env_state(data).growths) != host_growth.records(self):
                raise CheckpointError(
                    "the grower state has other layer growths than this grower's model, "
                    "which has widened since it was built; load it into a new Grower over a "
                    "freshly built model"
                )
        super().load_state_dict(data)

    @property
    def loop_trainer(self) -> LoopTrainer:
        assert self._kept is not None
        return self._kept[1]

    def use_validation(self, batches: Iterable[Any]) -> None:
        self._val = batches

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._val is None:
            raise GrowerError(
                "no validation data: pass a DataLoader to grower.end_epoch(val_loader)"
            )
        samples = 0
        for i, batch in enumerate(self._val):
            inputs, targets = _checked(batch, i, self.task.num_classes)
            inputs, targets = inputs.to(self.device), targets.to(self.device)
            if i == 0:
                self._first_val = (inputs, targets)
            samples += targets.numel()
            yield inputs, targets
        if not samples:  # a loss over nothing: NaN, fed to the policy as a measurement
            raise GrowerError(
                "end_epoch: the validation data held no sample; pass the DataLoader of a "
                "non-empty validation split"
            )

    def end_epoch(self, measured: Sequence[Any] | None = None) -> StepResult:
        """The env's end of epoch, with the epoch's training cost counted first: the
        samples the user's loop trained on, at the FLOPs per sample of this epoch's
        architecture (counted once per architecture on a validation batch, as
        ``train_batch`` counts them on a training batch)."""
        if measured is None:
            measured = fetch(*self.queue_measurements())
        host = self.model.host
        assert isinstance(host, ModuleHost)
        samples = host.take_samples()
        if samples and self._first_val is not None:
            account_training(self, *self._first_val, samples=samples)
            host.take_samples()  # the counting pass's own forward
        return super().end_epoch(measured)

    def _evaluations(self, with_test: bool) -> list[Pending]:
        # Rewards, gates and counterfactuals on validation; the test split is the user's.
        amp = self.config.training.amp
        return [
            validate_pending(self.model, self.task, self._batches(), amp=amp, masks=self._masks)
        ]

    def _validation_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # Before the first end_epoch (a start or a resume) the user's batches have not
        # arrived: the expansion probe sees none, and the scores are empty until then.
        return self._batches() if self._val is not None else iter(())

    def _test_due(self, epoch: int) -> bool:
        return False

    def measure(self) -> EvalResult:
        """Validation now, read at once (the untrained model's, before the first epoch)."""
        result: EvalResult = fetch(*self._evaluations(with_test=False))[0]
        return result

    def start(self, baseline: EvalResult | None, example_input: torch.Tensor) -> None:
        """Begin the run: ``baseline`` is the untrained model's validation (None: the
        chance level stands in for it)."""
        self.epoch = 0
        self.stats = EpisodeStats()
        self._count_bare_host(example_input)
        chance = EvalResult(self.task.chance_loss, 100.0 / self.task.num_classes, {}, None, True)
        self.last_eval = baseline or chance
        self.last_test = None
        self.last_train = None
        if baseline is not None:
            self._record_validation(baseline)
        self.last_expansion = fetch(self._expansion())[0]
        events = StepEvents(env=self.env_index, episode=self.episode, epoch=0)
        grown_at_birth = host_growth.start_at_birth(self, events)  # as reset() does
        birth.install(self, self.birth_seeds, events)  # a static policy's architecture
        self.governor.take_snapshot(self.model, 0)
        if not grown_at_birth:
            host_growth.start_due(self, events)  # one scheduled at epoch 0
        self._birth_events = events.events
        self._started = True
        self._observation = observe(self, rolled_back=False)

    def _count_bare_host(self, example_input: torch.Tensor) -> None:
        """The compute baseline, counted before a growth at epoch 0 can widen the host: on
        the baseline's first validation batch, else on the example input against the
        host's own predictions (the loss adds no counted FLOPs). In eval mode: batch norm
        takes a single example, and the samples the user's loop trains on stay uncounted."""
        host = self.model.host
        was_training = host.training
        host.eval()
        try:
            if self._first_val is not None:
                batch = self._first_val
            else:
                inputs = example_input.to(self.device)
                with torch.no_grad():
                    batch = (inputs, host(inputs).argmax(-1))
            self.cost.measure_host(self.model, self.task.loss, batch)
        finally:
            host.train(was_training)

    # ------------------------------------------------------------ the open step

    @property
    def open_action(self) -> Action | None:
        """The action applied for the epoch under way."""
        return None if self._step is None else self._step.action

    @property
    def open_decision(self) -> StepDecision | None:
        """The epoch under way's action in words, with its reason and the host's growth."""
        return None if self._step is None else self._step.decision

    def step_state(self) -> dict[str, Any] | None:
        """The step under way (its action and what the reward compares to), as plain data."""
        step = self._step
        if step is None:
            return None
        return {
            "action": unstructure(step.action),
            "outcome": unstructure(step.outcome),
            "slots_before": unstructure(list(step.slots_before)),
            "eval_before": unstructure(step.eval_before),
        }

    def load_step_state(self, data: dict[str, Any] | None) -> None:
        if data is None:
            self._step = None
            return
        action = structure(data["action"], Action)
        self._step = StepStart(
            action,
            structure(data["outcome"], ActionOutcome),
            tuple(structure(s, SlotSnapshot) for s in data["slots_before"]),
            structure(data["eval_before"], EvalResult),
            time.perf_counter(),
            StepEvents(env=self.env_index, episode=self.episode, epoch=self.epoch),
            # The host's growths are loaded as they were at this boundary: the same words.
            decision.describe(self, action),
        )


IGNORED = -100  # F.cross_entropy's ignore_index: a label it skips (a sequence's padding)


def _checked(batch: Any, index: int, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A validation batch as ``(inputs, targets)``, or one line saying what it is instead:
    a bare tensor, targets that are no class indices, a label the model has no output for
    (cross-entropy fails on it mid-validation; on a GPU as a device-side assert)."""
    if not isinstance(batch, tuple | list) or len(batch) < 2:
        raise GrowerError(
            f"end_epoch: validation batch {index} is a {type(batch).__name__}, not "
            "(inputs, targets); pass a DataLoader over (input, target) pairs (a TensorDataset "
            "of inputs and labels)"
        )
    inputs, targets = batch[0], batch[1]
    if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise GrowerError(
            f"end_epoch: validation batch {index} holds a {type(inputs).__name__} and a "
            f"{type(targets).__name__}; expected tensors (inputs, targets)"
        )
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise GrowerError(
            f"end_epoch: validation batch {index}'s targets are {targets.dtype}; targets are "
            "class indices (integers)"
        )
    counted = targets[targets != IGNORED]  # cross-entropy skips them (padding)
    if counted.numel():
        low, high = int(counted.min()), int(counted.max())
        if low < 0 or high >= classes:
            raise GrowerError(
                f"end_epoch: validation batch {index} holds label {low if low < 0 else high}, "
                f"but the model has {classes} outputs, so labels must lie in 0..{classes - 1}; "
                "renumber the labels from 0, or give the model one output per class"
            )
    return inputs, targets
