"""Errors of the multi-process executor (no torch import: the launcher reads them too)."""

from __future__ import annotations

from esper_core.errors import EsperError


class DistributedError(EsperError):
    """A rank of a distributed run failed, or the ranks disagree about the run."""


class PeerFailure(DistributedError):
    """A collective failed on this rank because another rank stopped answering.

    The rank that failed first reports the cause; the launcher prefers its error."""
