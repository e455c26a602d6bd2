"""Exception types a user can cause. The CLI turns each into one line and exit code 2."""

from __future__ import annotations


class EsperError(Exception):
    """Base class for errors caused by user input (config, plugins, data, checkpoints)."""


class ConfigError(EsperError):
    """A config value is missing, unknown, of the wrong type or out of range."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class PluginError(EsperError):
    """A plugin could not be loaded, or one of its hooks failed."""


class UnknownComponentError(EsperError):
    """A component name that no loaded plugin registered."""


class DuplicateComponentError(EsperError):
    """Two plugins registered a component under the same name."""


class DataError(EsperError):
    """A dataset is missing or unreadable."""


class CheckpointError(EsperError):
    """A checkpoint is missing, corrupt, unsafe or does not match the run."""


class RunDirError(EsperError):
    """A run directory is missing, incomplete or belongs to a different run."""


class HostError(EsperError):
    """A user model cannot serve as a host (a slot name, a submodule's output, the example input)."""


class GrowerError(EsperError):
    """The library API (a :class:`Grower` or the Lightning callback) was used wrongly."""
