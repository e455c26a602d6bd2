"""The policy a config names: ``NAME[:ARGUMENT]`` (no dependencies, so the run directory
can be named without resolving any component)."""

from __future__ import annotations

from attrs import frozen


@frozen
class PolicyRef:
    """``--policy NAME[:ARGUMENT]``, e.g. ``ppo:runs/x/checkpoint.pt``."""

    name: str
    argument: str | None = None

    @classmethod
    def parse(cls, text: str) -> PolicyRef:
        name, sep, arg = text.partition(":")
        return cls(name.strip(), arg.strip() if sep else None)
