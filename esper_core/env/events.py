"""The typed telemetry events of one env step, stamped with env, episode and epoch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from attrs import define, field, frozen

from esper_core.converter import unstructure
from esper_core.env import cost
from esper_core.env.step import EpochMetrics
from esper_core.lifecycle.gates import GateResult
from esper_core.lifecycle.rules import BLENDED_STAGES, INCUBATING_STAGES
from esper_core.lifecycle.slot import SeedSlot
from esper_core.lifecycle.slot_state import SlotReport
from esper_core.lifecycle.stages import Stage
from esper_core.lifecycle.views import by_name
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    GateEvaluated,
    HostGrowthFossilized,
    HostGrowthPruned,
    HostGrowthStageChanged,
    HostGrowthStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
    SlotSummary,
    StageChanged,
)

if TYPE_CHECKING:
    from esper_core.env.episode import EpisodeStats
    from esper_core.env.evaluation import EvalResult
    from esper_core.env.growing import HostCount
    from esper_core.lifecycle.governor import Governor
    from esper_core.lifecycle.host_growth import HostGrowth
    from esper_core.lifecycle.model import MorphogeneticModel


def growth_id(env: HostCount, growth: HostGrowth) -> str:
    """``width-K`` (``depth-K``): the growth's operator and its index among the episode's
    host growths (pruned ones included, so an id is never reused within an episode)."""
    return f"{growth.operator}-{env.model.host_growths.index(growth)}"


def _widths(growth: HostGrowth, after: bool) -> dict[str, int]:
    """The sizes by the dimension a reader knows: a transformer's one width is d_model,
    its depth n_layer; a CNN stage's depth its layers (stage0_layers)."""
    return growth.sizes(after)


def _plan(growth: HostGrowth) -> str:
    return growth.describe()


def _growth_params_before(env: HostCount, growth: HostGrowth) -> int:
    """The host's parameters before ``growth``, read while it is in flight."""
    return env.host_params - growth.new_param_count()


class Finishing(Protocol):
    """What an episode's last event reads of an env (``MorphogeneticEnv`` is one)."""

    @property
    def model(self) -> MorphogeneticModel: ...

    @property
    def stats(self) -> EpisodeStats: ...

    @property
    def governor(self) -> Governor: ...

    @property
    def last_eval(self) -> EvalResult: ...

    @property
    def last_test(self) -> EvalResult | None: ...

    @property
    def host_params(self) -> int: ...

    @property
    def birth_host_params(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def seed(self) -> int: ...


@frozen
class SeedRecord:
    """A seed as its events name it; read before a prune or a rollback removes it."""

    seed_id: str
    blueprint: str
    contribution: float | None
    params: int
    germinated_epoch: int
    gain: float | None

    @classmethod
    def of(cls, slot: SeedSlot, accuracy: float | None = None) -> SeedRecord:
        """``accuracy``: validation accuracy now, for the seed's gain."""
        s = slot.state
        gain = None
        if accuracy is not None and s.acc_before_blend is not None:
            gain = accuracy - s.acc_before_blend
        return cls(
            seed_id=s.seed_id or "",
            blueprint=s.blueprint or "",
            contribution=s.contribution,
            params=slot.seed_param_count(),
            germinated_epoch=s.germinated_epoch,
            gain=gain,
        )


@define
class StepEvents:
    """The events of one step, in the order they happened.

    ``epoch`` is the epoch the events belong to: the one the action was taken in, then
    (from :meth:`MorphogeneticEnv.end_epoch` on) the epoch just trained.
    """

    env: int
    episode: int
    epoch: int
    events: list[Event] = field(factory=list)

    def emit(self, cls: Callable[..., Event], **fields: Any) -> None:
        self.events.append(cls(env=self.env, episode=self.episode, epoch=self.epoch, **fields))

    def stage_changed(self, slot: SeedSlot, before: Stage) -> None:
        if slot.stage == before:
            return
        self.emit(
            StageChanged,
            slot_id=slot.slot_id,
            seed_id=slot.state.seed_id,
            from_stage=before.value,
            to_stage=slot.stage.value,
        )

    def gate(self, slot: SeedSlot, gate: GateResult) -> None:
        self.emit(
            GateEvaluated,
            slot_id=slot.slot_id,
            seed_id=slot.state.seed_id,
            gate=gate.gate,
            passed=gate.passed,
            failed=list(gate.failed),
        )

    def germinated(self, slot: SeedSlot) -> None:
        s = slot.state
        self.emit(
            SeedGerminated,
            slot_id=slot.slot_id,
            seed_id=s.seed_id,
            blueprint=s.blueprint,
            style=s.style,
            tempo=s.tempo,
            params=slot.seed_param_count(),
        )

    def pruned(self, slot_id: str, stage: Stage, seed: SeedRecord, reason: str) -> None:
        """``stage``: the stage the seed was pruned from; ``reason``: policy, rollback or non_finite."""
        self.emit(
            SeedPruned, slot_id=slot_id, stage=stage.value, reason=reason, **unstructure(seed)
        )

    def fossilized(self, slot: SeedSlot) -> None:
        """After the fossilization, whose accuracy is the stage's start accuracy."""
        record = SeedRecord.of(slot, slot.state.acc_at_stage_start)
        self.emit(SeedFossilized, slot_id=slot.slot_id, **unstructure(record))

    def host_growth_started(self, env: HostCount, growth: HostGrowth) -> None:
        """Just after ``growth`` was born (alpha 0) and the env counted the host anew."""
        self.emit(
            HostGrowthStarted,
            growth_id=growth_id(env, growth),
            operator=growth.operator,
            plan=_plan(growth),
            widths_before=_widths(growth, after=False),
            widths_after=_widths(growth, after=True),
            params_before=_growth_params_before(env, growth),
            params_after=env.host_params,
            tempo=growth.schedule.ticks,
            curve=growth.schedule.curve,
        )

    def host_growth_stage(self, env: HostCount, growth: HostGrowth, before: Stage) -> None:
        if growth.stage == before:
            return
        self.emit(
            HostGrowthStageChanged,
            growth_id=growth_id(env, growth),
            operator=growth.operator,
            from_stage=before.value,
            to_stage=growth.stage.value,
        )

    def host_growth_fossilized(
        self, env: HostCount, growth: HostGrowth, params_before: int
    ) -> None:
        """After the fold and the env's new count; ``params_before``: the host's before the
        growth (read while it was in flight, before the fold)."""
        self.emit(
            HostGrowthFossilized,
            growth_id=growth_id(env, growth),
            operator=growth.operator,
            started_epoch=growth.born_epoch,
            params_before=params_before,
            params_after=env.host_params,
        )

    def host_growth_pruned(
        self,
        env: HostCount,
        growth: HostGrowth,
        stage: Stage,
        params_before: int,
        reason: str,
    ) -> None:
        """After the prune and the env's new count; ``stage``: the one it was pruned from,
        ``params_before``: the host's with the growth in place."""
        self.emit(
            HostGrowthPruned,
            growth_id=growth_id(env, growth),
            operator=growth.operator,
            stage=stage.value,
            started_epoch=growth.born_epoch,
            params_before=params_before,
            params_after=env.host_params,
            reason=reason,
        )

    def epoch_completed(
        self, metrics: EpochMetrics, reports: tuple[SlotReport, ...], **fields: Any
    ) -> None:
        """The epoch's event: ``metrics`` (but the batch count), the slots and ``fields``."""
        numbers = unstructure(metrics)
        del numbers["batches"]
        slots = [by_name(SlotSummary, r, stage=r.stage.value) for r in reports]
        self.emit(EpochCompleted, slots=slots, **numbers, **fields)

    def episode_finished(self, env: Finishing) -> None:
        test, stats = env.last_test, env.stats
        host_added = env.host_params - env.birth_host_params
        self.events.append(
            EpisodeFinished(
                env=self.env,
                episode=self.episode,
                epochs=env.epoch,
                final_val_acc=env.last_eval.accuracy,
                final_val_loss=env.last_eval.loss,
                final_test_acc=test.accuracy if test else None,
                final_test_loss=test.loss if test else None,
                total_reward=stats.reward_total,
                reward_components=dict(stats.reward_components),
                host_params=env.host_params,
                # Only seeds that reached the output count as added, with the host's own
                # growth; the others are kept apart (a seed still incubating changes
                # nothing the host computes).
                params_added=env.model.seed_param_count(BLENDED_STAGES) + host_added,
                host_params_added=host_added,
                params_unblended=env.model.seed_param_count(INCUBATING_STAGES),
                seeds_germinated=stats.n_germinated,
                seeds_fossilized=stats.n_fossilized,
                seeds_pruned=stats.n_pruned,
                rollbacks=env.governor.rollbacks,
                refused_actions=stats.n_refused,
                seed=env.seed,
                params_forward=cost.params_forward(env.model),
                params_held=cost.params_held(env.model),
                train_flops=stats.train_flops,
                host_train_flops=(
                    0
                    if stats.host_flops_per_sample is None
                    else round(stats.host_flops_per_sample * stats.train_samples)
                ),
            )
        )
