"""Esper telemetry backends and the ``esper report`` command.

Backends (entry points ``telemetry.*``): ``console`` (live rich display), ``jsonl``
(events.jsonl), ``csv`` (metrics.csv), ``tensorboard`` and ``wandb``. Each is built by
the runner as ``Backend(options, run_dir=..., quiet=...)`` and fed through
:class:`esper_core.run.telemetry.Hub`. Modules import heavy libraries lazily.
"""

__version__ = "0.1.0"
