"""The handful of stream operations the streams executor uses, behind one small interface.

The executor never calls ``torch.cuda`` directly: it asks a :class:`StreamAPI` for
streams, stream contexts, events and synchronisations. :class:`CudaStreams` is the real
thing; :class:`NullStreams` lets the same code run on CPU (where every operation is
already ordered); a test can pass a recording double to check the protocol without a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch
from attrs import frozen


@runtime_checkable
class StreamAPI(Protocol):
    def new_stream(self, device: torch.device) -> Any:
        """A new stream on ``device``."""
        ...

    def current_stream(self, device: torch.device) -> Any:
        """The stream work on ``device`` is queued on right now (the caller's stream)."""
        ...

    def use(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """A context in which work is queued on ``stream`` (and its device is current)."""
        ...

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """Tell the allocator ``tensor`` is used on ``stream``, so its memory is not reused early."""
        ...

    def record_event(self, stream: Any) -> Any:
        """An event marking everything queued on ``stream`` so far."""
        ...

    def wait_event(self, stream: Any, event: Any) -> None:
        """Later work on ``stream`` starts only after ``event`` (no host wait)."""
        ...

    def synchronize(self, stream: Any) -> None:
        """The host waits until ``stream`` has finished its work."""
        ...


@frozen
class NullStream:
    """A stand-in stream on a device without streams: all work there is in order."""

    device: torch.device


class NullStreams:
    """The stream API for CPU devices: every operation is a no-op, so the executor's
    interleaving runs unchanged and gives exactly the serial results."""

    def new_stream(self, device: torch.device) -> NullStream:
        return NullStream(device)

    def current_stream(self, device: torch.device) -> NullStream:
        return NullStream(device)

    def use(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext(stream)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        pass

    def record_event(self, stream: Any) -> None:
        return None

    def wait_event(self, stream: Any, event: Any) -> None:
        pass

    def synchronize(self, stream: Any) -> None:
        pass


class CudaStreams:
    """The stream API on CUDA devices (public ``torch.cuda`` calls only)."""

    def new_stream(self, device: torch.device) -> torch.cuda.Stream:
        return torch.cuda.Stream(device=device)

    def current_stream(self, device: torch.device) -> torch.cuda.Stream:
        return torch.cuda.current_stream(device)

    @contextlib.contextmanager
    def use(self, stream: torch.cuda.Stream) -> Iterator[torch.cuda.Stream]:
        # torch.cuda.stream also makes the stream's device current, so kernels and
        # allocations of the env land on its own GPU.
        with torch.cuda.stream(stream):
            yield stream

    def record_stream(self, tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
        if tensor.device.type == "cuda":
            tensor.record_stream(stream)

    def record_event(self, stream: torch.cuda.Stream) -> torch.cuda.Event:
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait_event(self, stream: torch.cuda.Stream, event: torch.cuda.Event) -> None:
        stream.wait_event(event)

    def synchronize(self, stream: torch.cuda.Stream) -> None:
        stream.synchronize()


def default_stream_api(devices: list[torch.device], use_streams: bool) -> StreamAPI:
    """CUDA streams when the envs run on CUDA devices (and streams are wanted), else no-ops."""
    if use_streams and any(d.type == "cuda" for d in devices):
        return CudaStreams()
    return NullStreams()
