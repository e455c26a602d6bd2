"""The ranks of a distributed run: joining the process group and the few collectives Esper needs.

Python objects (step results, observations, env states, the policy's state) always go
through a gloo group on the CPU, whatever the main backend: NCCL cannot move pickled
objects without staging them on a GPU, and CPU copies are device-independent (a tensor
pickled on ``cuda:1`` of one machine must not come back as ``cuda:1`` on another).
Gradient vectors use the main group when they live on a GPU (NCCL) and the gloo group
when they live on the CPU.

Every collective is wrapped so that a failure caused by another rank (a dead peer, a
timeout) surfaces as :class:`PeerFailure` naming this rank and what it was doing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from attrs import define

from esper_streams.errors import DistributedError, PeerFailure
from esper_streams.launch import INIT_METHOD_ENV


@define(eq=False)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_environment(cls) -> RankInfo:
        """Rank, world size and local rank as torchrun (or ``esper --nproc``) sets them."""

        def read(name: str, default: int) -> int:
            raw = os.environ.get(name)
            if raw is None or raw == "":
                return default
            try:
                return int(raw)
            except ValueError:
                raise DistributedError(
                    f"environment variable {name}={raw!r} is not an integer"
                ) from None

        world = read("WORLD_SIZE", 1)
        rank = read("RANK", 0)
        if world < 1 or not 0 <= rank < world:
            raise DistributedError(
                f"RANK={rank} and WORLD_SIZE={world} do not describe a rank of a job"
            )
        return cls(rank=rank, world_size=world, local_rank=read("LOCAL_RANK", rank))


class RankGroup:
    """This process's place in the job; a job of one process needs no process group at all."""

    def __init__(self, info: RankInfo, backend: str, timeout: float, device: torch.device) -> None:
        self.info = info
        self.rank = info.rank
        self.world_size = info.world_size
        self.backend = backend
        self.timeout = timeout
        self.device = device
        self._created = False
        self._objects: Any = None  # the gloo group for objects and CPU tensors
        if self.world_size > 1:
            self._join()

    def _join(self) -> None:
        if not dist.is_available():
            raise DistributedError("this torch build has no torch.distributed support")
        if dist.is_initialized():
            if dist.get_world_size() != self.world_size or dist.get_rank() != self.rank:
                raise DistributedError(
                    f"a process group of {dist.get_world_size()} ranks (this one {dist.get_rank()}) "
                    f"already exists, but the environment says rank {self.rank} of {self.world_size}"
                )
        else:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            # The --nproc launcher names a file store; under torchrun it is env:// (MASTER_ADDR...).
            init_method = os.environ.get(INIT_METHOD_ENV) or "env://"
            with self.guard("joining the process group"):
                dist.init_process_group(
                    self.backend,
                    init_method=init_method,
                    rank=self.rank,
                    world_size=self.world_size,
                    timeout=dt.timedelta(seconds=self.timeout),
                )
            self._created = True
        if dist.get_backend() == "gloo":
            self._objects = dist.group.WORLD
        else:
            with self.guard("creating the gloo group for objects"):
                self._objects = dist.new_group(
                    backend="gloo", timeout=dt.timedelta(seconds=self.timeout)
                )

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except (
            RuntimeError
        ) as exc:  # DistBackendError, DistNetworkError and timeouts are RuntimeErrors
            raise PeerFailure(
                f"rank {self.rank} of {self.world_size}: {what} failed: {exc}. Another rank stopped or "
                f"did not answer within {self.timeout:g} s; the rank that failed first reports the cause"
            ) from exc

    # ------------------------------------------------------------ collectives

    def all_gather(self, obj: Any, what: str) -> list[Any]:
        """``obj`` of every rank, in rank order, on every rank."""
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        with self.guard(what):
            dist.all_gather_object(out, obj, group=self._objects)
        return out

    def gather_each(
        self, mine: dict[int, Any], owners: Sequence[int], what: str
    ) -> list[Any] | None:
        """Item ``i`` (held in ``mine`` by rank ``owners[i]``) of every rank, in order, on
        rank 0; None on the others. Items travel one at a time, point to point, so rank 0
        never holds more than one item's pickled bytes (a gather holds every rank's at once).
        """
        if self.world_size == 1:
            return [mine[i] for i in range(len(owners))]
        out: list[Any] = []
        for i, owner in enumerate(owners):
            if owner == 0:
                if self.rank == 0:
                    out.append(mine[i])
            elif self.rank == owner:
                with self.guard(what):
                    dist.send_object_list([mine[i]], dst=0, group=self._objects)
            elif self.rank == 0:
                box: list[Any] = [None]
                with self.guard(what):
                    dist.recv_object_list(box, src=owner, group=self._objects)
                out.append(box[0])
        return out if self.rank == 0 else None

    def broadcast(self, obj: Any, what: str) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj if self.rank == 0 else None]
        with self.guard(what):
            dist.broadcast_object_list(box, src=0, group=self._objects)
        return box[0]

    def any(self, flag: bool, what: str) -> bool:
        if self.world_size == 1:
            return flag
        t = torch.tensor([1 if flag else 0], dtype=torch.int64)
        with self.guard(what):
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._objects)
        return bool(t[0])

    def all_reduce_mean(self, tensors: Sequence[torch.Tensor], what: str) -> None:
        """Replace each tensor by its mean over the ranks, as ONE flat vector per device and dtype."""
        if self.world_size == 1 or not tensors:
            return
        buckets: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for t in tensors:
            buckets.setdefault((t.device, t.dtype), []).append(t)
        for (device, _), group_tensors in buckets.items():
            flat = torch.cat([t.detach().reshape(-1) for t in group_tensors])
            self._check_same_size(flat.numel(), what)
            group = self._objects if device.type == "cpu" else None  # None: the main (NCCL) group
            with self.guard(what):
                dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
            flat.div_(self.world_size)
            offset = 0
            for t in group_tensors:
                n = t.numel()
                t.detach().copy_(flat[offset : offset + n].view_as(t))
                offset += n

    def _check_same_size(self, n: int, what: str) -> None:
        # Vectors of different lengths would be summed out of register (or hang): refuse.
        t = torch.tensor([n, -n], dtype=torch.int64)
        with self.guard(what):
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._objects)
        if int(t[0]) != n or int(-t[1]) != n:
            raise DistributedError(
                f"rank {self.rank}: {what}: the ranks' gradient vectors differ in length "
                f"(this rank {n}, others between {int(-t[1])} and {int(t[0])}); every rank must hold "
                "the same policy with the same parameters that have gradients"
            )

    def close(self) -> None:
        if self._created and dist.is_initialized():
            dist.destroy_process_group()
        self._created = False
