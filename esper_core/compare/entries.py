"""The ``[[policies]]`` and ``[[tasks]]`` entries of an experiment file.

Values of their own, below the experiment file that lists them and the training groups
that expand them (:mod:`esper_core.compare.training_group`).
"""

from __future__ import annotations

from typing import Any

from attrs import define

from esper_core.compare.labels import label_check
from esper_core.converter import each, options_field, os_path


@define
class PolicyEntry:
    """One policy of the experiment."""

    # No default: an entry with only a label would otherwise compare some default policy.
    name: str | None = options_field(
        None, doc="Policy component, or NAME:ARGUMENT (ppo:DIR/checkpoint.pt); required."
    )
    label: str | None = options_field(
        None, label_check, "Name in tables and cell directories (default: from name)."
    )
    options: dict[str, Any] = options_field({}, doc="Options merged over [config.policies.NAME].")
    checkpoints: list[str] = options_field(
        [],
        each(os_path),
        "Trained policies of one method from independent training runs, one checkpoint "
        "each: an arm LABEL.run-i per checkpoint (NAME:CHECKPOINT, name a bare component), "
        "also reported across the runs.",
    )
    config: dict[str, Any] = options_field(
        {},
        doc="A partial run config merged over the shared [config] for this policy's cells "
        "(a training length: {env = {max_epochs = 12}}); its static-final baseline keeps it.",
    )


@define
class TaskEntry:
    """One task of the experiment."""

    name: str | None = options_field(None, doc="Task component; required.")
    label: str | None = options_field(
        None, label_check, "Name in tables and cell directories (default: name)."
    )
    options: dict[str, Any] = options_field({}, doc="Options merged over [config.tasks.NAME].")
