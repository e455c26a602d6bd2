"""``executors.streams``: many envs at once on one or more GPUs, one CUDA stream per env.

Control flow is inverted: the batch loop is outside and the envs inside. One step is

1. for every env, on its own stream (after waiting for the work already queued on its
   device): apply the action and ``begin_epoch()`` (which allocates the env's
   device-side accumulators, so they are born on that stream);
2. round-robin: one training batch of each env in turn, each inside its env's stream
   context, until every env's batches are exhausted; batch tensors are moved
   ``non_blocking`` (from pinned memory) and ``record_stream``-ed on the env's stream;
3. for every env, on its stream: ``queue_measurements()`` (its epoch statistics,
   validation and counterfactuals: device work only), then the caller's stream waits
   on an event recorded after it. Every env's validation is queued before anything is
   read, so validations of different envs overlap;
4. ONE ``fetch`` of every env's numbers (one host synchronisation per device, so one
   per step on a single GPU), then for every env, on its stream, ``end_epoch(measured)``
   (governor, slot ticks, reward, observation); the caller's stream waits on an event
   recorded after it, so nothing later (a reset, a checkpoint) reads the env's tensors
   before its stream has written them.

Each env's accumulators, model, optimizers and GradScaler (one per env: see
``EpochTrainer``) are only touched on that env's stream, so envs sharing a GPU never
race. On CPU every stream operation is a no-op and the interleaving changes no number:
the results are bit-identical to ``serial``, because envs draw randomness only from
their own generators.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define, field

from esper_core import ExecutorContext, hookimpl
from esper_core.converter import options_field

if TYPE_CHECKING:
    import torch

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action
    from esper_streams.stream_api import StreamAPI


@define
class StreamsOptions:
    streams: bool = options_field(
        True,
        doc="One CUDA stream per env; false interleaves envs on the default stream (for debugging).",
    )


@define(eq=False)
class Lane:
    """One env and the stream all of its device work is queued on."""

    env: Any
    device: Any  # torch.device
    stream: Any
    batches: Iterator[Any] | None = field(default=None)


class StreamsExecutor:
    name: ClassVar[str] = "streams"
    description: ClassVar[str] = (
        "Interleaves the batches of all envs, one CUDA stream per env, envs round-robin over run.devices."
    )
    Options: ClassVar[type] = StreamsOptions

    def __init__(
        self,
        options: StreamsOptions | None = None,
        context: ExecutorContext | None = None,
        *,
        devices: Sequence[torch.device] | None = None,
        stream_api: StreamAPI | None = None,
    ) -> None:
        from esper_streams.devices import check_one_type, run_devices
        from esper_streams.stream_api import default_stream_api

        self.options = options or StreamsOptions()
        self.devices = list(devices) if devices is not None else run_devices(context)
        check_one_type(self.devices, "run.devices")
        self.api: StreamAPI = stream_api or default_stream_api(self.devices, self.options.streams)
        self._lanes: dict[int, Lane] = {}

    def env_devices(self, n_envs: int) -> list[torch.device]:
        return [self.devices[i % len(self.devices)] for i in range(n_envs)]

    # ------------------------------------------------------------ the step

    def _lane(self, env: MorphogeneticEnv) -> Lane:
        # Keyed by the env, not its position: a step may get some envs only (a seed group
        # whose envs share epochs: esper_core.run.shared_epochs), and each keeps its stream.
        lane = self._lanes.get(id(env))
        # A lane belongs to one env object on one device; the stream lives as long as both do.
        if lane is None or lane.env is not env or lane.device != env.device:
            lane = Lane(env, env.device, self.api.new_stream(env.device))
            self._lanes[id(env)] = lane
        return lane

    def step(self, envs: Sequence[MorphogeneticEnv], actions: Sequence[Action]) -> list[StepResult]:
        if len(envs) != len(actions):
            raise ValueError(f"{len(actions)} actions for {len(envs)} envs")
        lanes = [self._lane(env) for env in envs]
        self._begin(lanes, actions)
        self._interleave(lanes)
        return self._finish(lanes)

    def _begin(self, lanes: Sequence[Lane], actions: Sequence[Action]) -> None:
        api = self.api
        # Work queued on a device's current stream before this step (the env's reset,
        # its data upload, the last checkpoint) must finish before the env's stream runs.
        ready: dict[Any, Any] = {}
        for lane in lanes:
            if lane.device not in ready:
                ready[lane.device] = api.record_event(api.current_stream(lane.device))
            api.wait_event(lane.stream, ready[lane.device])
        for lane, action in zip(lanes, actions):
            with api.use(lane.stream):
                lane.env.apply_action(action)
                lane.env.begin_epoch()  # allocates the accumulators on this stream
                lane.batches = iter(lane.env.train_batches())

    def _interleave(self, lanes: Sequence[Lane]) -> None:
        """One batch per env in turn until every env's epoch is exhausted; no host sync."""
        api = self.api
        active = list(lanes)
        while active:
            still: list[Lane] = []
            for lane in active:
                assert lane.batches is not None
                with api.use(lane.stream):
                    batch = next(lane.batches, None)
                    if batch is None:
                        lane.batches = None
                        continue
                    lane.env.train_batch(self._stage(batch, lane))
                still.append(lane)
            active = still

    def _stage(self, batch: Sequence[torch.Tensor], lane: Lane) -> tuple[torch.Tensor, ...]:
        """The batch on the env's device, its memory kept alive for the env's stream."""
        staged = []
        for tensor in batch:
            if tensor.device != lane.device:
                if (
                    tensor.device.type == "cpu"
                    and lane.device.type == "cuda"
                    and not tensor.is_pinned()
                ):
                    tensor = (
                        tensor.pin_memory()
                    )  # a pageable source would make the copy synchronous
                tensor = tensor.to(lane.device, non_blocking=True)
            # The loader may have allocated the batch on another stream (or it may be a
            # view of the shared dataset); without this the allocator could hand its
            # memory to someone else while this env's kernels still read it.
            self.api.record_stream(tensor, lane.stream)
            staged.append(tensor)
        return tuple(staged)

    def _finish(self, lanes: Sequence[Lane]) -> list[StepResult]:
        from esper_core.env.pending import fetch

        api = self.api
        measured = []
        for lane in lanes:
            with api.use(lane.stream):
                # Queued, not read: this env's validation runs on its stream while the
                # next env's is queued on another.
                measured.append(lane.env.queue_measurements())
                queued = api.record_event(lane.stream)
            # The fetch below reads on the caller's stream: after every env's numbers.
            api.wait_event(api.current_stream(lane.device), queued)
        # The step's one host synchronisation (one per device), for every env at once.
        values = fetch(*[p for pendings in measured for p in pendings])
        results, start = [], 0
        for lane, pendings in zip(lanes, measured):
            with api.use(lane.stream):
                results.append(lane.env.end_epoch(values[start : start + len(pendings)]))
                done = api.record_event(lane.stream)
            start += len(pendings)
            # end_epoch queues more work (slot ticks, governor snapshots): whatever
            # runs next on the caller's stream waits for it.
            api.wait_event(api.current_stream(lane.device), done)
        return results

    def close(self) -> None:
        self._lanes.clear()


@hookimpl
def esper_register_executors(register: Any) -> None:
    register(StreamsExecutor)
