"""``executors.distributed``: envs split over processes (ranks) with ``torch.distributed``.

Launch with ``torchrun --nproc-per-node N --no-python esper train --executor distributed``
(one or several machines) or ``esper train --executor distributed --nproc N`` (one
machine). Backends: gloo on CPU, NCCL on GPU (objects always travel over gloo).

The design (see docs/executors.md):

- Every rank runs the same runner loop over all ``n_envs`` envs, but owns a contiguous
  slice of them (``env_slice``) and builds only those (``build_envs``): only the owner
  resets, trains, validates and checkpoints an env. The envs of other ranks are
  :class:`~esper_streams.peers.PeerEnv` stand-ins (no model, no data).
- Every rank holds the whole policy. After a reset and after each step the ranks
  all-gather the observations / :class:`StepResult` values of their envs, so each
  rank's policy acts on, and learns from, the same data of all envs. The policy state
  (RNG included) is made identical at the start by a broadcast from rank 0, so every
  rank picks the same actions; each step checks that the ranks were asked to apply the
  same actions and fails clearly if not.
- A trainable policy exposes ``gradient_sync`` (and, to split its update, ``shard``);
  this executor sets ``gradient_sync`` to a flat all-reduce that averages a list of
  tensors over the ranks, and ``shard`` to (rank, world): the PPO learner then computes
  only its slice of every minibatch and averages the gradients, so the update is data
  parallel and every rank ends it with identical parameters.
- Rank 0 writes telemetry, checkpoints (with every env's state gathered to it) and the
  summary; the other ranks write nothing.
- Collectives time out after ``timeout`` seconds; a failure caused by another rank is a
  :class:`PeerFailure`, and the launcher reports the rank that failed first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define

from esper_core import ExecutorContext, hookimpl
from esper_core.config_limits import MAX_SECONDS
from esper_core.converter import in_range, one_of, options_field
from esper_core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from esper_core.env.env import MorphogeneticEnv
    from esper_core.env.observation import Observation
    from esper_core.env.step import StepResult
    from esper_core.lifecycle.actions import Action

GRADIENT_SYNC = "gradient_sync"  # the attribute a trainable policy (or its learner) exposes
SHARD = "shard"  # optional beside it: (rank, world), the slice of each update a rank computes


@define
class DistributedOptions:
    backend: str = options_field(
        "auto",
        one_of("auto", "gloo", "nccl"),
        "Process-group backend (auto: nccl on CUDA devices, else gloo).",
    )
    timeout: float = options_field(
        60.0,
        in_range(0, MAX_SECONDS, lo_open=True),
        "Seconds a rank waits for the others in a collective before the job fails (bounds a dead or hung rank).",
    )
    streams: bool = options_field(
        True, doc="On CUDA, step this rank's envs with one CUDA stream each."
    )


def env_slice(n_envs: int, rank: int, world_size: int) -> range:
    """The envs rank ``rank`` owns: a contiguous, balanced slice of ``range(n_envs)``."""
    return range(rank * n_envs // world_size, (rank + 1) * n_envs // world_size)


class DistributedExecutor:
    name: ClassVar[str] = "distributed"
    description: ClassVar[str] = (
        "torch.distributed: envs split over ranks (torchrun or --nproc), gloo on CPU, NCCL on GPU."
    )
    Options: ClassVar[type] = DistributedOptions

    def __init__(
        self, options: DistributedOptions | None = None, context: ExecutorContext | None = None
    ) -> None:
        from esper_streams.group import RankGroup, RankInfo
        from esper_streams.streams import StreamsExecutor, StreamsOptions

        self.options = options or DistributedOptions()
        info = RankInfo.from_environment()
        self.device = _rank_device(context or ExecutorContext(), info.local_rank)
        backend = self.options.backend
        if backend == "auto":
            backend = "nccl" if self.device.type == "cuda" else "gloo"
        if backend == "nccl" and self.device.type != "cuda":
            raise ConfigError(
                [
                    f"executors.distributed.backend: nccl needs CUDA devices, this rank runs on {self.device}; "
                    'use backend = "gloo" (or "auto")'
                ]
            )
        self.group = RankGroup(info, backend, self.options.timeout, self.device)
        self.rank = info.rank
        self.world_size = info.world_size
        self.is_writer = self.rank == 0
        # This rank's envs are stepped like the streams executor does (serial semantics on CPU).
        self.local = StreamsExecutor(
            StreamsOptions(streams=self.options.streams), context, devices=[self.device]
        )
        self._n_envs: int | None = None

    # ------------------------------------------------------------ ownership

    def env_devices(self, n_envs: int) -> list[torch.device]:
        if n_envs < self.world_size:
            raise ConfigError(
                [
                    f"run.n_envs: {n_envs} env(s) for {self.world_size} ranks; every rank needs at least one "
                    f"env (use --envs {self.world_size} or more, or fewer processes)"
                ]
            )
        self._n_envs = n_envs
        return [self.device] * n_envs

    def owned(self, n_envs: int) -> range:
        return env_slice(n_envs, self.rank, self.world_size)

    def build_envs(self, n_envs: int, build: Callable[[int], Any]) -> list[Any]:
        """This rank's envs built with ``build(index)``; a :class:`PeerEnv` for every other."""
        from esper_streams.peers import PeerEnv

        own = {i: build(i) for i in self.owned(n_envs)}
        template = next(iter(own.values()))
        owner = {
            i: r for r in range(self.world_size) for i in env_slice(n_envs, r, self.world_size)
        }
        return [own[i] if i in own else PeerEnv(i, owner[i], template) for i in range(n_envs)]

    def observations(self, envs: Sequence[MorphogeneticEnv]) -> list[Observation]:
        """Every env's current observation (after a resume mid-episode), from its owner."""
        own = self.owned(len(envs))
        mine = [envs[i].observation for i in own]
        gathered = self.group.all_gather(mine, "sharing the observations")
        return self._shown(envs, [o for theirs in gathered for o in theirs], "observations")

    def _shown(self, envs: Sequence[Any], observations: list[Any], what: str) -> list[Any]:
        """``observations`` in env order; the stand-ins of other ranks' envs now show them."""
        from esper_streams.peers import PeerEnv

        ordered = _in_env_order(observations, len(envs), what)
        for env, observation in zip(envs, ordered, strict=True):
            if isinstance(env, PeerEnv):
                env.show(observation)
        return ordered

    # ------------------------------------------------------------ the step

    def step(self, envs: Sequence[MorphogeneticEnv], actions: Sequence[Action]) -> list[StepResult]:
        if len(envs) != len(actions):
            raise ValueError(f"{len(actions)} actions for {len(envs)} envs")
        own = self.owned(len(envs))
        mine = self.local.step([envs[i] for i in own], [actions[i] for i in own])
        gathered = self.group.all_gather((list(actions), mine), "gathering the step results")
        for rank, (their_actions, _) in enumerate(gathered):
            if their_actions != list(actions):
                raise _diverged(self.rank, rank, actions, their_actions)
        results = _in_env_order(
            [r for _, theirs in gathered for r in theirs], len(envs), "step results"
        )
        self._shown(envs, [r.observation for r in results], "observations")
        return results

    def reset_envs(
        self, envs: Sequence[MorphogeneticEnv], seeds: Sequence[int], episode: int
    ) -> list[Observation]:
        own = self.owned(len(envs))
        mine = [envs[i].reset(seeds[i], episode) for i in own]
        gathered = self.group.all_gather(mine, "gathering the first observations")
        return self._shown(envs, [o for theirs in gathered for o in theirs], "observations")

    def env_states(self, envs: Sequence[MorphogeneticEnv]) -> list[dict[str, Any]] | None:
        n = len(envs)
        mine = {i: _to_cpu(envs[i].state_dict()) for i in self.owned(n)}
        owners = [r for r in range(self.world_size) for _ in env_slice(n, r, self.world_size)]
        return self.group.gather_each(mine, owners, "gathering env states for the checkpoint")

    def any_rank(self, flag: bool) -> bool:
        return self.group.any(flag, "agreeing on a stop request")

    # ------------------------------------------------------------ the policy

    def bind_policy(self, policy: Any, training: bool) -> None:
        """Start every rank from rank 0's policy state (RNG included); wire gradient averaging."""
        holder = _gradient_sync_holder(policy)
        if holder is not None:
            setattr(holder, GRADIENT_SYNC, self.sync_gradients)
            if hasattr(holder, SHARD):  # it can split its update: each rank takes its slice
                setattr(holder, SHARD, (self.rank, self.world_size))
        elif training and self.world_size > 1:
            raise ConfigError(
                [
                    f"run.policy: {type(policy).__name__} has no {GRADIENT_SYNC!r} attribute, so its gradients "
                    "cannot be averaged across ranks; the distributed executor can run it (esper run) but not "
                    "train it"
                ]
            )
        if self.world_size > 1:
            state = self.group.broadcast(
                _to_cpu(policy.state_dict()) if self.rank == 0 else None, "sharing the policy state"
            )
            if self.rank != 0:
                policy.load_state_dict(state)

    def sync_gradients(self, grads: list[torch.Tensor]) -> None:
        """The ``gradient_sync`` callable: average ``grads`` in place over the ranks."""
        self.group.all_reduce_mean(grads, "averaging the policy gradients")

    def close(self) -> None:
        self.local.close()
        self.group.close()

    # ------------------------------------------------------------ launching

    @classmethod
    def launch_local(cls, nproc: int, job: Callable[[], Any], options: DistributedOptions) -> Any:
        """Run ``job`` in ``nproc`` processes of one machine, one rank each; return rank 0's result."""
        from esper_streams.launch import launch_local

        return launch_local(nproc, job, timeout=options.timeout)


# ---------------------------------------------------------------- helpers


def _rank_device(context: ExecutorContext, local_rank: int) -> torch.device:
    """``run.devices[local_rank % len]``, else ``run.device`` (a bare ``cuda``: one GPU per local rank)."""
    import torch

    from esper_streams.devices import parse_device

    if context.devices:
        names = context.devices
        return parse_device(names[local_rank % len(names)], "run.devices")
    device = torch.device(context.device)
    if device.type == "cuda" and device.index is None:
        return parse_device(f"cuda:{local_rank % max(torch.cuda.device_count(), 1)}", "run.device")
    return parse_device(context.device, "run.device")


def _gradient_sync_holder(policy: Any) -> Any:
    for holder in (policy, getattr(policy, "learner", None)):
        if holder is not None and hasattr(holder, GRADIENT_SYNC):
            return holder
    return None


def _in_env_order(items: list[Any], n_envs: int, what: str) -> list[Any]:
    from esper_streams.errors import DistributedError

    if len(items) != n_envs or any(
        getattr(item, "env_index", i) != i for i, item in enumerate(items)
    ):
        raise DistributedError(
            f"the ranks returned {what} for envs {[getattr(x, 'env_index', '?') for x in items]}, "
            f"expected 0..{n_envs - 1}; every rank must run with the same run.n_envs"
        )
    return items


def _diverged(rank: int, other: int, mine: Sequence[Action], theirs: Sequence[Action]) -> Exception:
    from esper_streams.errors import DistributedError

    return DistributedError(
        f"rank {rank}: the policy chose different actions on rank {other} ({list(theirs)}) than here "
        f"({list(mine)}); the ranks' policies diverged. A policy must act only from its observations and "
        "its own seeded state (no process-global randomness) to run under the distributed executor"
    )


def _to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor copied to the CPU (containers rebuilt, other values kept)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_cpu(v) for v in obj)
    return obj


@hookimpl
def esper_register_executors(register: Any) -> None:
    register(DistributedExecutor)
