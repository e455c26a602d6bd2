"""Esper executors that run many envs at once: ``streams`` (CUDA streams, several GPUs)
and ``distributed`` (``torch.distributed`` over processes and machines)."""

__version__ = "0.1.0"
